"""What each frame a client sends means, decided in one place, with no I/O.

Rule 1: every decision about how relayd serves a frame lives here -- whether a request
joins the batch the next group commit round runs, is decided team-wide by the bridge,
runs now and then waits for its messages' announcements, or simply runs now; how it runs
(its operation, its session fields, version 2's `session_call`); and which frames are
answered without running anything. `Router.route` takes one frame and returns a `Plan`;
`relayd.daemon.server.Peer` carries the plan out (queues, runs, writes) and decides
nothing. Tests drive the router in memory (tests/daemon/test_router.py).

One rule spans frames: a connection's requests run in the order they arrived, so a frame
that does not join the batch while requests of its connection wait in it has them run
first (`after_queued`): it may depend on them (a read after a send).
"""

from __future__ import annotations

from collections.abc import Container, Mapping

import msgspec

from relayd import __version__, ops, session
from relayd.errors import ProtocolError, RelayError
from relayd.protocol import ErrorBody, ErrorFrame, Hello, Request, Subscribe, Violation
from relayd.registry import Operation
from relayd.wire import handshake


class Call(msgspec.Struct, frozen=True):
    """How a request runs now: its operation (None: version 2's `session_call`, whose
    params name the operation), with its session fields around it when it asks for any."""

    request: Request
    op: Operation | None
    bookkeeping: bool = False


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    # True: run the requests this connection queued for the batch first (see the docstring).
    after_queued: bool = False


class JoinBatch(Plan, frozen=True):
    """Queue the request to run with the others of its operation that arrive while the
    current fsync round runs (Server.run_deferred)."""

    request: Request
    op: Operation


class TeamWide(Plan, frozen=True):
    """The bridge decides the request for the whole team; the connection handles nothing
    more until it is decided."""

    request: Request


class AwaitAnnouncement(Plan, frozen=True):
    """Run the request now; its reply waits for the durable write and then for its
    messages' announcements (at most `request.announce` seconds)."""

    call: Call


class Run(Plan, frozen=True):
    """Run the request now; its reply waits for the durable write."""

    call: Call


class Refuse(Plan, frozen=True):
    """Answer the request with `error` in its turn, running nothing."""

    request: Request
    error: RelayError


class Violated(Plan, frozen=True):
    """A line that is no frame: log it and answer it (the connection closes when fatal)."""

    violation: Violation


class Answer(Plan, frozen=True):
    """Write `frame` back, running nothing: the greeting's answer, or why a frame of
    its kind is not a client's to send."""

    frame: Hello | ErrorFrame


class JoinEvents(Plan, frozen=True):
    """Start this connection's subscription."""

    subscribe: Subscribe


PlanKind = JoinBatch | TeamWide | AwaitAnnouncement | Run | Refuse | Violated | Answer | JoinEvents


class Router:
    """What relayd knows when it decides: its operations, whether it batches (group
    commit is on), which operations its bridge decides team-wide (filled in once the bridge
    is up, so kept as the live collection) and the store it serves (named in the greeting)."""

    def __init__(self, table: Mapping[str, Operation], *, batching: bool, team_wide: Container[str], store_root: str) -> None:
        self.table = table
        self.batching = batching
        self.team_wide = team_wide
        self.store_root = store_root

    def route(self, frame: object, *, queued: bool = False) -> PlanKind:
        """The plan for one frame; `queued`: requests of this connection wait in the batch."""
        match frame:
            case Request() if self.batching and frame.announce <= 0 and (op := self.table.get(frame.op)) is not None and op.batch is not None:
                return JoinBatch(frame, op)
            case Request() if frame.op in self.team_wide:
                return TeamWide(frame, after_queued=queued)
            case Request():
                try:
                    call = self.call(frame)
                except RelayError as exc:
                    return Refuse(frame, exc, after_queued=queued)
                if frame.announce > 0:
                    return AwaitAnnouncement(call, after_queued=queued)
                return Run(call, after_queued=queued)
            case Violation():
                return Violated(frame, after_queued=queued)
            case Hello():
                # (a client of an older version is answered in its own: relayd still speaks it)
                answer = Hello(version=handshake.spoken(frame.version), server=f"relayd {__version__}", store=self.store_root)
                return Answer(answer, after_queued=queued)
            case Subscribe():
                return JoinEvents(frame, after_queued=queued)
            case _:
                body = ErrorBody(code=ProtocolError.code, message=f"a client may not send {type(frame).__name__} frames")
                return Answer(ErrorFrame(error=body), after_queued=queued)

    def call(self, request: Request) -> Call:
        """How `request` runs when it runs now (also the bridge's way to run one it has
        decided). Raises UsageError for an operation relayd does not have."""
        if request.op == session.LEGACY:  # a version 2 client's
            return Call(request, None)
        op = self.table.get(request.op) or ops.lookup(request.op)  # lookup raises "unknown operation"
        return Call(request, op, request.bookkeeping())
