"""The team as a zellij session: a layout with one pane per agent, in a background session.

zellij gives a pane its id only inside it (ZELLIJ_PANE_ID), so each pane registers itself
as its agent's notify target (`relayctl register NAME --notify zellij:$ZELLIJ_PANE_ID`)
and then becomes the agent's program. Started with `zellij attach --create-background
TEAM` and `zellij --session TEAM action new-tab --layout FILE`; stopped with `zellij
kill-session TEAM`.

zellij offers no way to list a session's panes from outside, so each pane leaves its
program's pid in `<state>/<agent>.pid` (the program is exec'd: same pid). Run again, `up`
starts a new pane (`action new-pane`) only for the agents whose program no longer runs;
their exited panes stay, showing how the program ended.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from typing import Callable

from relayd.errors import UsageError
from relayd.fsio import replace_file
from relayctl.context import installed_command

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


def pane_script(agent, team: Team, store_dir: str, socket: str | None, state: str) -> str:
    """What an agent's pane runs: register the pane as the agent's notify target, note the
    pid, become the agent's program."""
    relayctl = shlex.join([*installed_command("relayctl", "relayctl"), "--dir", store_dir, *(["--socket", socket] if socket else [])])
    argv = clients.launch(agent, team, store_dir, socket, state)
    env = clients.pane_env(agent, team, store_dir, socket)
    notify = "channel" if clients.arrival(agent) == "channel" else "zellij:$ZELLIJ_PANE_ID"
    return (
        f"{relayctl} -q register {shlex.quote(agent.name)} --notify {notify}; "
        f"echo $$ > {shlex.quote(_pid_file(state, agent.name))}; "
        f"exec env {shlex.join(f'{k}={v}' for k, v in env.items())} {shlex.join(argv)}"
    )


def layout(team: Team, store_dir: str, socket: str | None, state: str) -> str:
    """The KDL layout: one pane per agent, each registering itself, then running its program."""
    lines = ["layout {"]
    for agent in team.agents:
        lines += [
            f"    pane name={_kdl(agent.name)} command=\"sh\" cwd={_kdl(team.repo)} {{",
            f"        args \"-c\" {_kdl(pane_script(agent, team, store_dir, socket, state))}",
            "    }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _pid_file(state: str, agent: str) -> str:
    return os.path.join(state, f"{agent}.pid")


def running(state: str, agent: str) -> bool:
    """Whether the program a pane started for `agent` still runs: the pid it left is alive
    and its environment names the agent (a reused pid does not)."""
    try:
        with open(_pid_file(state, agent)) as fh:
            pid = int(fh.read().strip())
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"RELAY_AGENT={agent}\0".encode() in fh.read()
    except (OSError, ValueError):
        return False


def _kdl(text: str) -> str:
    return json.dumps(text)  # a KDL string is written like a JSON one


def bring_up(team: Team, store_dir: str, socket: str | None, state: str, say: Callable[[str], None]) -> dict:
    alive = {agent.name for agent in team.agents if running(state, agent.name)}
    if not alive:
        path = os.path.join(state, "layout.kdl")
        replace_file(path, layout(team, store_dir, socket, state).encode())
        zellij("attach", "--create-background", team.name)
        zellij("--session", team.name, "action", "new-tab", "--layout", path, "--name", team.name)
        say(f"zellij session {team.name}: {len(team.agents)} panes from {path}; each registers itself as its agent's notify target")
        say(f"attach with: zellij attach {team.name}    stop with: relayctl down")
        return {"team": team.name, "session": team.name, "agents": {a.name: "started" for a in team.agents}, "layout": path}
    outcome = {}
    for agent in team.agents:
        if agent.name in alive:
            outcome[agent.name] = "running"
        else:
            zellij("--session", team.name, "action", "new-pane", "--name", agent.name, "--cwd", team.repo,
                   "--", "sh", "-c", pane_script(agent, team, store_dir, socket, state))
            outcome[agent.name] = "restarted"
        say(f"{agent.name:<16} {outcome[agent.name]}")
    say(f"attach with: zellij attach {team.name}    stop with: relayctl down")
    return {"team": team.name, "session": team.name, "agents": outcome}


def take_down(team: Team, state: str) -> None:
    zellij("kill-session", team.name)
    for agent in team.agents:
        try:
            os.unlink(_pid_file(state, agent.name))
        except FileNotFoundError:
            pass
