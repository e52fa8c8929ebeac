"""The team as a zellij session: a layout with one pane per agent, in a background session.

zellij gives a pane its id only inside it (ZELLIJ_PANE_ID), so each pane registers itself
as its agent's notify target (`relayctl register NAME --notify zellij:$ZELLIJ_PANE_ID`)
and then becomes the agent's program. Started with `zellij attach --create-background
TEAM` and `zellij --session TEAM action new-tab --layout FILE`; stopped with `zellij
kill-session TEAM`. (Restarting only exited panes is tmux-only: zellij offers no way to
list a session's panes from outside.)
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from typing import Callable

from relayd.errors import UsageError

from . import clients
from .teamfile import Team


NOT_INSTALLED = 'zellij is not installed (not on PATH); install it, or set multiplexer = "tmux"'


def zellij(*args: str) -> None:
    try:
        done = subprocess.run(["zellij", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise UsageError(NOT_INSTALLED) from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:300]
        raise UsageError(f"zellij {' '.join(args[:2])} failed: {said or f'exit {done.returncode}'}")


def layout(team: Team, store_dir: str, socket: str | None, state: str) -> str:
    """The KDL layout: one pane per agent, each registering itself, then running its program."""
    from relayctl.context import installed_command

    relayctl = shlex.join([*installed_command("relayctl", "relayctl"), "--dir", store_dir, *(["--socket", socket] if socket else [])])
    lines = ["layout {"]
    for agent in team.agents:
        argv = clients.launch(agent, team, store_dir, socket, state)
        env = clients.pane_env(agent, team, store_dir, socket)
        notify = "channel" if agent.notify == "channel" else "zellij:$ZELLIJ_PANE_ID"
        script = (
            f"{relayctl} -q register {shlex.quote(agent.name)} --notify {notify}; "
            f"exec env {shlex.join(f'{k}={v}' for k, v in env.items())} {shlex.join(argv)}"
        )
        lines += [
            f"    pane name={_kdl(agent.name)} command=\"sh\" cwd={_kdl(team.repo)} {{",
            f"        args \"-c\" {_kdl(script)}",
            "    }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _kdl(text: str) -> str:
    return json.dumps(text)  # a KDL string is written like a JSON one


def bring_up(team: Team, store_dir: str, socket: str | None, state: str, say: Callable[[str], None]) -> dict:
    path = os.path.join(state, "layout.kdl")
    with open(path, "w") as fh:
        fh.write(layout(team, store_dir, socket, state))
    zellij("attach", "--create-background", team.name)
    zellij("--session", team.name, "action", "new-tab", "--layout", path, "--name", team.name)
    say(f"zellij session {team.name}: {len(team.agents)} panes from {path}; each registers itself as its agent's notify target")
    say(f"attach with: zellij attach {team.name}    stop with: relayctl down")
    return {"team": team.name, "session": team.name, "agents": {a.name: "started" for a in team.agents}, "layout": path}


def take_down(team: Team) -> None:
    zellij("kill-session", team.name)
