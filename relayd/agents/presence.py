"""Heartbeat files: the one place that writes and reads `agents/<name>/heartbeat`.

Free of msgspec and of the store handle, so that relay-mcp can mark its role present the
moment a client connects without loading the store client (its start-up budget is a few
tens of milliseconds); the `touch`, `heartbeat` and `register` operations use the same
functions.
"""

from __future__ import annotations

from .. import layout
from ..fsio import Dir
from ..timefmt import now_iso


def touch_heartbeat(agent: Dir) -> str:
    """Refresh last-seen. Not fsynced: losing a heartbeat to a crash costs nothing."""
    stamp = now_iso()
    agent.replace(layout.HEARTBEAT, stamp.encode() + b"\n", None)
    agent.unlink(layout.HEARTBEAT_STALE, missing_ok=True)
    return stamp


# The program a web view registers its identity with (`relayctl web --as NAME`).
WEB_VIEW = "relay-web"


def archive(agent: Dir) -> bool:
    """Mark the agent away (status: archived, not alive) until its next heartbeat; False
    when it was away already (or a heartbeat raced this)."""
    try:
        agent.rename(layout.HEARTBEAT, layout.HEARTBEAT_STALE)
    except FileNotFoundError:
        return False
    return True


def archived(agent: Dir) -> bool:
    return not agent.exists(layout.HEARTBEAT) and agent.exists(layout.HEARTBEAT_STALE)


def last_heartbeat(agent: Dir) -> str | None:
    raw = agent.read_bytes(layout.HEARTBEAT) or agent.read_bytes(layout.HEARTBEAT_STALE)
    return raw.decode(errors="replace").strip() or None if raw else None


def touch_if_registered(store_dir: str, name: str) -> bool:
    """The `touch` operation's write for an agent that is registered already (its name
    checked by the caller); False when the store or the agent does not exist yet."""
    try:
        with Dir.open_root(store_dir) as root, root.subdir(layout.AGENTS) as agents, agents.subdir(name) as agent:
            if not agent.exists(layout.META):
                return False
            touch_heartbeat(agent)
            return True
    except (FileNotFoundError, NotADirectoryError):
        return False
