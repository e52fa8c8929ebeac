"""The team's tmux session: one pane per agent, found again by a pane option.

Each pane carries `@relay_agent` = its agent's name, so a second `relayctl up` finds the
panes it made: a live one is left alone, a dead one (the window keeps panes whose program
exited: remain-on-exit) is respawned with its command, a missing one is split off anew.
The tmux server is the user's default one (TMUX_TMPDIR, -L are honoured through the
environment as tmux itself honours them); notify targets name it by socket path, so that
relayd reaches it whatever its own environment.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from relayd.errors import UsageError

AGENT_OPTION = "@relay_agent"


@dataclass
class Pane:
    agent: str
    pane_id: str
    dead: bool
    pid: int


NOT_INSTALLED = 'tmux is not installed (not on PATH); install it, or set multiplexer = "zellij"'


def _run(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["tmux", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise UsageError(NOT_INSTALLED) from None


def tmux(*args: str, check: bool = True) -> str:
    done = _run(args)
    if check and done.returncode != 0:
        said = " ".join(done.stderr.split())[:300]
        raise UsageError(f"tmux {args[0]} failed: {said or f'exit {done.returncode}'}")
    return done.stdout


class TmuxTeam:
    def __init__(self, session: str) -> None:
        self.session = session
        # The session itself, whoever asks: tmux resolves a bare `=NAME` to a window of that
        # name in the caller's own session first, and people name a window after their
        # project, so `up` run in a window named like the team saw no team there and `down`
        # listed the caller's panes. Panes are named by their ids, unique on the server.
        self.target = f"={session}:"

    def exists(self) -> bool:
        return _run(("has-session", "-t", self.target)).returncode == 0

    def panes(self) -> dict[str, Pane]:
        """The session's agent panes, by agent."""
        if not self.exists():
            return {}
        out = tmux("list-panes", "-s", "-t", self.target, "-F", f"#{{{AGENT_OPTION}}}\t#{{pane_id}}\t#{{pane_dead}}\t#{{pane_pid}}")
        found = {}
        for line in out.splitlines():
            agent, pane_id, dead, pid = (line.split("\t") + ["", "", "", ""])[:4]
            if agent:
                found[agent] = Pane(agent, pane_id, dead == "1", int(pid) if pid.isdigit() else 0)
        return found

    def socket_path(self) -> str:
        return tmux("display-message", "-p", "-t", self.target, "#{socket_path}").strip()

    def start(self, agent: str, argv: list[str], env: dict[str, str], cwd: str) -> str:
        """A new pane (the session's first, or split off) running argv; its pane id."""
        command, environment = shlex.join(argv), _env_args(env)
        cwd = _literal(cwd)
        if not self.exists():
            pane = tmux("new-session", "-d", "-s", self.session, "-n", self.session, "-x", "200", "-y", "60",
                        "-c", cwd, *environment, "-P", "-F", "#{pane_id}", command).strip()
            tmux("set-option", "-w", "-t", pane, "remain-on-exit", "on")
        else:
            pane = tmux("split-window", "-d", "-t", self.target, "-c", cwd, *environment, "-P", "-F", "#{pane_id}", command).strip()
            tmux("select-layout", "-t", pane, "tiled")
        tmux("set-option", "-p", "-t", pane, AGENT_OPTION, agent)
        tmux("select-pane", "-t", pane, "-T", agent)
        return pane

    def respawn(self, pane: Pane, argv: list[str], env: dict[str, str], cwd: str) -> None:
        """Run a dead pane's program again, in the same pane."""
        tmux("respawn-pane", "-k", "-t", pane.pane_id, "-c", _literal(cwd), *_env_args(env), shlex.join(argv))

    def exit_status(self, pane_id: str) -> tuple[bool, str]:
        """(whether the pane's program has exited, its exit status or signal as tmux shows it)."""
        out = tmux("display-message", "-p", "-t", pane_id, "#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}", check=False)
        dead, status, signal = (out.rstrip("\n").split("\t") + ["", "", ""])[:3]
        return dead == "1", (f"signal {signal}" if signal and signal != "0" else f"status {status or '?'}")

    def capture(self, pane_id: str, history: int = 0) -> str:
        """The pane's screen; with `history`, that many lines above it too (a pane resized
        by the next one's split can have moved its program's last words up there)."""
        return tmux("capture-pane", "-p", "-J", *(["-S", f"-{history}"] if history else []), "-t", pane_id, check=False)

    def send_keys(self, pane_id: str, *keys: str) -> None:
        tmux("send-keys", "-t", pane_id, *keys)

    def kill(self) -> None:
        tmux("kill-session", "-t", self.target, check=False)


def _literal(path: str) -> str:
    """A path as tmux's -c takes it: tmux expands formats there, so `#(cmd)` in a directory's
    name would run cmd; `##` is tmux's literal `#`."""
    return path.replace("#", "##")


def _env_args(env: dict[str, str]) -> list[str]:
    return [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
