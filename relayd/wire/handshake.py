"""The greeting a client opens a relayd connection with, written once (DESIGN §3).

A client sends `hello(program)` and hands relayd's answer to `ours()`, which says
whether that relayd serves the client's store (True), serves another one (False: the
client works on its store directly), or cannot be talked to: a relayd speaking another
protocol version was started from an older or newer install, and the user is told which
one to restart instead of meeting "unknown field" errors later.

Standard library only, with frames as plain dicts: relayctl's fast path greets relayd
through this module without loading msgspec; the msgspec clients pass
`msgspec.to_builtins(frame)`.
"""

from __future__ import annotations

import os

from .. import __version__
from ..errors import PeerError, VersionMismatch, from_wire

# The protocol version; relayd.protocol re-exports it. Raise it whenever a client of this
# version needs something an older relayd does not have (2: the session_call operation;
# 3: a request's session fields, which a relayd of 2 would ignore), so such a pair says
# "restart" instead of failing request by request. relayd still serves a client of any
# version from OLDEST on, answering its hello with that client's own version (`spoken`).
VERSION = 3
OLDEST = 1


def spoken(theirs: object) -> int:
    """The version relayd answers a client's hello with: the client's own when relayd still
    speaks it (a newer relayd keeps every older request form working), else relayd's."""
    if isinstance(theirs, int) and not isinstance(theirs, bool) and OLDEST <= theirs <= VERSION:
        return theirs
    return VERSION


def hello(program: str) -> dict[str, object]:
    """The first frame `program` (relayctl, relay-mcp, ...) sends."""
    return {"type": "hello", "version": VERSION, "client": f"{program} {__version__}"}


def ours(answer: object, store_dir: str, program: str) -> bool:
    """Judge relayd's answer to `hello(program)`: True when it serves `store_dir`, False
    when it serves another store; raises VersionMismatch for another protocol version, the
    reported error for an error frame, PeerError for anything else."""
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind == "error" and isinstance(answer, dict):
        error = answer.get("error")
        raise from_wire(error if isinstance(error, dict) else {})
    if kind != "hello" or not isinstance(answer, dict):
        raise PeerError(f"relayd answered hello with {kind or type(answer).__name__!r}, not hello")
    version = answer.get("version")
    if version != VERSION:
        raise mismatch(version, program)
    store = answer.get("store")
    return isinstance(store, str) and bool(store) and os.path.realpath(store) == os.path.realpath(store_dir)


def mismatch(theirs: object, program: str) -> VersionMismatch:
    """The sentence for a relayd that speaks protocol `theirs`: restart the older side."""
    if isinstance(theirs, int) and not isinstance(theirs, bool) and theirs > VERSION:
        todo = f"this {program} is older than relayd: restart {program} (or run the one installed with relayd)"
    else:
        todo = "restart relayd"
    return VersionMismatch(f"relayd speaks protocol {theirs}, this {program} {VERSION}: {todo}", relayd=theirs, client=VERSION)
