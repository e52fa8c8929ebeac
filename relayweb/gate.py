"""Which connections the web view keeps: the rules that stop a neighbour on 127.0.0.1 from
locking the owner out by opening connections and never finishing a request.

Rule 1: everything about admitting, ageing and dropping connections is decided here, in
one object without I/O; serve.GatedH11 only reports events to it and closes what it names.

A connection is *trusted* once one of its requests carried the token (guard.Guard says
so); until then it is a stranger's. Strangers get little:
* at most `strangers` connections at once: a new one pushes out the oldest stranger, so
  half-sent requests can never fill the process's descriptors (which made the accept loop
  spin and log) nor keep out the owner, whose browser sends a whole request at once;
* `deadline` seconds to show the token (headers included); then the connection closes.
Trusted connections are the owner's; past `total` connections in all, a new one is
refused. Event streams (the owner's open pages) are capped at `streams`: a new one
pushes out the oldest, whose page reconnects, so streams a client stopped reading can
hold at most `streams` pending states in memory (app.events drops a stalled one sooner).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, TypeVar

Conn = TypeVar("Conn")

DEADLINE = 10.0  # seconds a stranger's connection may take to show the token
STRANGERS = 64
STREAMS = 16
TOTAL = 512


@dataclass
class _Entry(Generic[Conn]):
    conn: Conn
    opened: float
    trusted: bool = False
    stream: bool = False


@dataclass
class Gate(Generic[Conn]):
    clock: Callable[[], float] = time.monotonic
    deadline: float = DEADLINE
    strangers: int = STRANGERS
    streams: int = STREAMS
    total: int = TOTAL
    _open: dict[Hashable, _Entry[Conn]] = field(default_factory=dict)  # oldest first

    def opened(self, peer: Hashable, conn: Conn) -> tuple[bool, list[Conn]]:
        """A new connection: (whether to keep it, the connections to close for it)."""
        if len(self._open) >= self.total:
            return False, []
        pushed_out: list[Conn] = []
        waiting = [p for p, e in self._open.items() if not e.trusted]
        while len(waiting) >= self.strangers:
            pushed_out.append(self._open.pop(waiting.pop(0)).conn)
        self._open[peer] = _Entry(conn, self.clock())
        return True, pushed_out

    def trust(self, peer: Hashable) -> None:
        """One of its requests carried the token."""
        entry = self._open.get(peer)
        if entry is not None:
            entry.trusted = True

    def overdue(self, peer: Hashable) -> bool:
        """A stranger past its deadline: close it."""
        entry = self._open.get(peer)
        return entry is not None and not entry.trusted and self.clock() - entry.opened >= self.deadline

    def stream(self, peer: Hashable) -> list[Conn]:
        """The connection now carries an event stream: the oldest streams past the cap, to close."""
        entry = self._open.get(peer)
        if entry is None:
            return []
        entry.stream = True
        streams = [p for p, e in self._open.items() if e.stream]
        return [self._open.pop(p).conn for p in streams[: max(0, len(streams) - self.streams)]]

    def closed(self, peer: Hashable, conn: Conn) -> None:
        entry = self._open.get(peer)
        if entry is not None and entry.conn is conn:  # (not a newer connection from a reused port)
            del self._open[peer]

    def drop(self, peer: Hashable) -> Conn | None:
        """Forget a connection the caller is closing; returns it."""
        entry = self._open.pop(peer, None)
        return entry.conn if entry is not None else None

    def __len__(self) -> int:
        return len(self._open)
