"""Which process is an agent's program, read from /proc: the owner of its session state.

A recorded session state (relayd.arrival.program_state) belongs to one program process,
named by its pid and its start time (field 22 of /proc/PID/stat, in clock ticks since boot),
so that a pid the kernel hands out again is not taken for the process that had it before.
The hook that reports a state runs as a child of the program, often through a shell
(`sh -c "relayctl hook claude"`); OpenCode's plugin runs in the program and starts the hook
itself. So the program is the hook's nearest ancestor that is not a shell.

No imports beyond os: `relayctl hook` loads this at every event of every session.
"""

from __future__ import annotations

import os

# Process names (/proc/PID/stat field 2) that only pass a command on.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "env", "timeout", "nice", "setsid"})
_MAX_DEPTH = 64  # a parent chain longer than this is not followed (a loop in a damaged /proc view)


class Process(tuple):
    """(pid, start time): one process for as long as it lives."""

    __slots__ = ()

    def __new__(cls, pid: int, start: int) -> "Process":
        return super().__new__(cls, (pid, start))

    @property
    def pid(self) -> int:
        return self[0]

    @property
    def start(self) -> int:
        return self[1]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(name, parent pid, start time) of a live process; None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The name stands in parentheses and may itself hold blanks and parentheses.
    open_at, close_at = raw.find(b"("), raw.rfind(b")")
    if open_at < 0 or close_at < open_at:
        return None
    fields = raw[close_at + 2 :].split()  # field 3 (state) onwards
    try:
        return raw[open_at + 1 : close_at].decode(errors="replace"), int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def process(pid: int) -> Process | None:
    """The live process with this pid, with its start time; None when there is none."""
    found = _stat(pid)
    return Process(pid, found[2]) if found else None


def started(pid: int) -> str | None:
    """The start time of the live process `pid` as /proc writes it (field 22, clock ticks
    since boot; Claude Code's session record keeps the same text); None when none runs."""
    found = _stat(pid)
    return str(found[2]) if found is not None else None


def age(owner: Process) -> float | None:
    """Seconds since the process `owner` started (its start time against the machine's
    uptime); None when it no longer runs or /proc does not say."""
    if not alive(owner):
        return None
    try:
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - owner.start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def foreground(pid: int) -> Process | None:
    """The leader of the process group in the foreground of `pid`'s terminal (a shell's
    running command, or the program a pane runs itself); None without a terminal or /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        tpgid = int(raw[raw.rfind(b")") + 2 :].split()[5])  # field 8
    except (OSError, IndexError, ValueError):
        return None
    return process(tpgid) if tpgid > 0 else None


def alive(owner: Process) -> bool:
    """The very process `owner` names still runs (not a later one given the same pid)."""
    found = _stat(owner.pid)
    return found is not None and found[2] == owner.start


def ancestors(pid: int) -> list[int]:
    """`pid`, its parent, its parent's parent ... up to (not including) pid 0."""
    chain = []
    while pid > 0 and len(chain) < _MAX_DEPTH:
        chain.append(pid)
        found = _stat(pid)
        if found is None:
            break
        pid = found[1]
    return chain


def program_of(hook_pid: int) -> Process | None:
    """The program a hook process runs for: its nearest ancestor that is not a shell (the
    hook's own process excluded); None when it has no such parent (pid 1 aside)."""
    for pid in ancestors(hook_pid)[1:]:
        found = _stat(pid)
        if found is None:
            return None
        name, _, start = found
        if pid == 1:
            return None
        if name not in SHELLS:
            return Process(pid, start)
    return None


def runs_under(owner: Process, top: int) -> bool:
    """`owner` is alive and is the process `top` or one of its descendants."""
    return alive(owner) and top in ancestors(owner.pid)
