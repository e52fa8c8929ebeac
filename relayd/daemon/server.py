"""The socket server: accept connections, check who is calling, move bytes.

Each connection (`Peer`) reads in a callback of the event loop (frames in, store
operations run right here in the loop thread) and writes its replies in request order,
each once the group commit that makes its writes durable is done; once subscribed, an
event pump task sends events. Tasks live in the connection's task group; the connection
is closed in `finally`. When a connection is read, and whether a write goes straight out,
is decided by its `PeerState` (relayd.daemon.peerstate, no I/O), and what each frame
means -- run now, join a batch, decide team-wide, wait for announcements -- by the
`Router` (relayd.daemon.router, no I/O): this module carries out its plans. Every
operation runs through `relayd.ops.run`, as in direct mode.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import resource
import socket
import struct
import time
from collections import deque
from typing import Any, Awaitable, Callable, Iterator

import anyio
import structlog
from anyio.abc import SocketListener, SocketStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from relayd import ops, protocol, session
from relayd.errors import Dropped, Internal, PermissionDenied, RelayError, Unavailable
from relayd.protocol import ErrorBody, ErrorFrame, Request, Response, Subscribe, Subscribed
from relayd.records import check_agent_name
from relayd.store import Store

from .commit import HOLD, Batch, GroupCommit
from .events import QUEUE_EVENTS, EventLog, Hub, Subscriber
from .peerstate import PeerState, Reading
from .router import Answer, AwaitAnnouncement, Call, JoinBatch, JoinEvents, Refuse, Router, Run, TeamWide, Violated

log = structlog.get_logger()

RECEIVE_BYTES = 64 * 1024
OUTBOX = 256  # replies waiting per connection; a client that never reads stops being read
_PEERCRED = struct.Struct("3i")
_RETRY_ACCEPT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
ACCEPT_PAUSE = 0.1  # seconds without accepting after running out of descriptors
IDLE_TIMEOUT = 600.0  # a request connection silent this long is closed
DROP_DRAIN = 10.0  # seconds a dropped subscriber gets to read what was queued for it
_FDS_RESERVED = 256  # descriptors kept for the store, group commit and the event log


def default_max_connections() -> int:
    """Half of what the descriptor limit leaves after the daemon's own needs (group
    commit holds a descriptor per write until its fsync), at most 1024 (a team of agents needs
    a few per pane; each idle connection costs relayd ~20 KiB)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, min(1024, (soft - _FDS_RESERVED) // 2))


class Server:
    def __init__(
        self,
        store: Store,
        committer: GroupCommit | None,
        hub: Hub,
        events: EventLog,
        *,
        max_connections: int | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.store = store
        self.committer = committer
        self.hub = hub
        self.events = events
        self.table = ops.table()
        self.peers: set[Peer] = set()
        self.draining = False
        self.all_closed = anyio.Event()
        self._ids = itertools.count(1)
        self._accepting: anyio.CancelScope | None = None
        self.requests = 0
        self.deferred: list[Deferred] = []  # batchable requests waiting for run_deferred
        # Operations decided team-wide by the bridge (register, reserve, release): the
        # bridge gets the request and this server's execute, and answers as execute does.
        self.team_ops: dict[str, Callable[[Request, Callable[[Request], tuple[Batch | None, bytes]]], Awaitable[tuple[Batch | None, bytes]]]] = {}
        self.router = Router(self.table, batching=committer is not None, team_wide=self.team_ops, store_root=store.root)
        self.round = anyio.Event()  # set when the requests deferred so far have run
        # Connections whose replies the last round wrote, with nothing else outstanding (a
        # client waiting for its answer to send the next request), and when (GroupCommit.hold).
        self.answered: set[Peer] = set()
        self.answered_at = 0.0
        self.max_connections = max_connections if max_connections is not None else default_max_connections()
        self.idle_timeout = idle_timeout
        self.clock = time.monotonic
        self.refusing = 0
        self._refusal_logged = -1e9
        # Set (and replaced) when a message's track may say more of its announcements: the
        # requests waiting for announcements look again (`announced`).
        self._tracks_changed = anyio.Event()
        if committer is not None:
            committer.on_durable = self.flush_replies

    # -- accepting -------------------------------------------------------------------
    async def serve(self, listener: SocketListener, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as peers:
            sweeping = anyio.CancelScope()
            peers.start_soon(self._close_idle, sweeping)
            with anyio.CancelScope() as self._accepting:
                task_status.started()
                async with listener:
                    while True:
                        try:
                            stream = await listener.accept()
                        except (OSError, anyio.BrokenResourceError) as exc:
                            # anyio reports a failed accept(2) as BrokenResourceError from the OSError.
                            cause = exc if isinstance(exc, OSError) else exc.__cause__
                            if not isinstance(cause, OSError) or cause.errno not in _RETRY_ACCEPT:
                                raise
                            # Out of descriptors: stop accepting briefly (the waiting
                            # connections stay in the backlog) rather than spin or die.
                            log.warning("accept failed, pausing", error=cause.strerror, connections=len(self.peers))
                            await anyio.sleep(ACCEPT_PAUSE)
                            continue
                        if len(self.peers) + self.refusing >= self.max_connections:
                            peers.start_soon(self._refuse_busy, stream)
                            continue
                        peers.start_soon(self._handle, stream)
            sweeping.cancel()  # draining: the connections left finish on their own

    async def _refuse_busy(self, stream: SocketStream) -> None:
        """Over the connection cap: say why in one frame, then close."""
        self.refusing += 1
        try:
            if self.clock() - self._refusal_logged >= 1.0:  # one line a second, not one per client
                self._refusal_logged = self.clock()
                log.warning("connection refused: too many connections", limit=self.max_connections)
            body = ErrorBody(code=Unavailable.code, message=f"relayd is serving its limit of {self.max_connections} connections; close idle ones or try again")
            with anyio.move_on_after(1):
                await stream.send(protocol.encode(ErrorFrame(error=body, fatal=True)))
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self.refusing -= 1
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _close_idle(self, scope: anyio.CancelScope) -> None:
        """Close request connections that have sent nothing for `idle_timeout` (an idle
        client reconnects on its next request; subscribers are never idle)."""
        period = max(0.05, min(self.idle_timeout / 4, 30.0))
        with scope:
            await self._sweep_idle(period)

    async def _sweep_idle(self, period: float) -> None:
        while True:
            await anyio.sleep(period)
            horizon = self.clock() - self.idle_timeout
            for peer in tuple(self.peers):
                if peer.subscriber is None and peer.unanswered == 0 and peer.last_active < horizon:
                    log.debug("closing an idle connection", idle_s=round(self.clock() - peer.last_active, 1))
                    peer.close_idle()

    def stop_accepting(self) -> None:
        self.draining = True
        if self._accepting is not None:
            self._accepting.cancel()
        for peer in tuple(self.peers):
            peer.stop_reading()
        if not self.peers:
            self.all_closed.set()

    async def _handle(self, stream: SocketStream) -> None:
        peer_id = next(self._ids)
        try:
            with structlog.contextvars.bound_contextvars(conn=peer_id):
                raw: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
                pid, uid, _ = _PEERCRED.unpack(raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
                if uid != os.geteuid():
                    log.warning("refused a connection from another user", uid=uid, pid=pid)
                    refusal = ErrorFrame(error=ErrorBody(code=PermissionDenied.code, message="relayd serves only its own user"), fatal=True)
                    with anyio.move_on_after(1):
                        await stream.send(protocol.encode(refusal))
                        await _linger(stream)
                    return
                log.debug("connected", pid=pid)
                peer = Peer(self, stream)
                self.peers.add(peer)
                try:
                    await peer.run()
                finally:
                    self.peers.discard(peer)
                    if self.draining and not self.peers:
                        self.all_closed.set()
                    log.debug("disconnected")
        except OSError as exc:
            log.info("connection failed", error=str(exc))
        except Exception:  # a bug in handling one peer must not take the daemon down
            log.exception("connection handler failed", conn=peer_id)
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    # -- operations ------------------------------------------------------------------
    def execute(self, request: Request) -> tuple[Batch | None, bytes]:
        """Run one request now, however the router would have planned it (the bridge runs
        what it decided team-wide this way): its batch to wait for and its reply."""
        try:
            call = self.router.call(request)
        except RelayError as exc:
            return self.refuse(request, exc)
        return self.run(call)

    def run(self, call: Call) -> tuple[Batch | None, bytes]:
        """Run one operation in this (the loop) thread; the reply waits for the batch."""
        try:
            payload = _reply(call.request, *self.outcome(call))
        except RelayError as exc:
            _log_bug(call.request.op, exc)
            payload = _refusal(call.request, exc)
        return self._pending(), payload

    def refuse(self, request: Request, exc: RelayError) -> tuple[Batch | None, bytes]:
        """A request the router found nothing to run for, answered in its turn (after the
        writes before it are durable, as any reply)."""
        self.requests += 1
        return self._pending(), _refusal(request, exc)

    def outcome(self, call: Call) -> tuple[Any, int | None]:
        """Run one request now: (its result, the unread count its session fields asked for).
        Raises the operation's RelayError."""
        self.requests += 1
        request = call.request
        if call.op is None:  # version 2's session_call
            result, name = session.legacy(self.store, request.params)
            answer = result, None
        else:
            name = call.op.name
            if not call.bookkeeping:
                answer = ops.run(self.store, call.op, request.params), None
            else:
                answer = session.run(self.store, call.op, request.params, request.agent, request.touch, request.unread)
        if name in session.SETTLING:
            self.tracks_changed()
        return answer

    def tracks_changed(self) -> None:
        """Messages' tracks may say more of their announcements now (relayd's triggers
        reported: relayd.daemon.notifications; a hook or a channel push did: `outcome`).
        In the loop thread."""
        self._tracks_changed.set()
        self._tracks_changed = anyio.Event()

    async def announced(self, result: Any, wait: float) -> list[Any]:
        """How the recipients of the messages in `result` are being told, once relayd's own
        triggers reported or `wait` seconds (at most session.ANNOUNCE_MAX) passed. Read
        from their tracks, as a client asking `track` would: again each time they may have
        changed (`tracks_changed`), and at least every session.ANNOUNCE_RECHECK."""
        ids = session.message_ids(result)
        deadline = anyio.current_time() + min(wait, session.ANNOUNCE_MAX)
        while True:
            changed = self._tracks_changed
            told, settled = session.announcements(self.store, ids)
            left = deadline - anyio.current_time()
            if settled or left <= 0:
                return told
            with anyio.move_on_after(min(left, session.ANNOUNCE_RECHECK)):
                await changed.wait()

    def _pending(self) -> Batch | None:
        return self.committer.pending() if self.committer is not None else None

    def defer(self, plan: JoinBatch, peer: Peer) -> Deferred:
        """Queue a request of a batchable operation to run with the others that arrive
        while the current fsync round runs (see `run_deferred`)."""
        assert self.committer is not None  # (the router batches only with group commit)
        request, op = plan.request, plan.op
        self.requests += 1
        item = Deferred(op, request, self.round, peer)
        try:
            item.params = ops.decode_params(op, request.params)
            session.before(self.store, request.agent, request.touch)  # (its unread count: after the batch)
        except RelayError as exc:  # answered in its place, after the requests before it
            item.payload = _refusal(request, exc)
        self.deferred.append(item)
        self.committer.poke()
        return item

    def run_deferred(self) -> None:
        """Run every queued request now, those of one operation together, in arrival order.

        The group commit calls this just before it takes a batch to fsync, so the sends
        that arrived while the previous batch was syncing share one append per inbox,
        one event-log write and one fsync round. A connection whose next request is not
        batchable calls it first: that request may depend on the queued ones."""
        queued, self.deferred = self.deferred, []
        finished, self.round = self.round, anyio.Event()
        runnable = [item for item in queued if item.payload is None]
        start = 0
        while start < len(runnable):
            op = runnable[start].op
            end = start
            while end < len(runnable) and runnable[end].op is op:
                end += 1
            group = runnable[start:end]
            start = end
            try:
                outcomes = ops.run_batch(self.store, op, [item.params for item in group])
            except RelayError as exc:  # (a bug: every request of the group fails)
                _log_bug(op.name, exc, batched=len(group))
                outcomes = [exc] * len(group)
            for item, outcome in zip(group, outcomes):
                try:
                    if isinstance(outcome, RelayError):
                        raise outcome
                    item.payload = _reply(item.request, outcome, session.after(self.store, item.request.agent, item.request.unread))
                except RelayError as exc:
                    item.payload = _refusal(item.request, exc)
        batch = self._pending()
        answered: set[Peer] = set()  # (requests that failed before writing: answered now)
        for item in queued:
            item.batch = batch
            if batch is None:
                answered.add(item.peer)
            else:
                batch.waiting.add(item.peer)
        finished.set()
        _flush_ready(answered)

    def flush_replies(self, batch: Batch) -> None:
        """Write the replies that `batch` made durable: on the connections that queued
        one waiting for it (those whose first reply is still not ready are passed over at
        the cost of that one check). Only those: going over every connection with replies
        waiting, after every round, cost more than the rest of writing the replies."""
        _flush_ready(batch.waiting)
        # (in place: GroupCommit.held is bound to this set's clear)
        self.answered.clear()
        self.answered.update(peer for peer in batch.waiting if peer.state.settled())
        self.answered_at = self.clock()
        batch.waiting = set()

    def expecting(self) -> float:
        """How long a round should still wait (GroupCommit.hold): while requests are queued
        and clients that the last round answered have not sent their next request yet, up
        to HOLD after that answer -- busy clients, whose requests may as well share the
        round. Clients answered longer ago are not waited for: a lone sender now and then
        must not pay for it."""
        if not self.deferred or not self.answered:
            return 0.0
        return max(0.0, self.answered_at + HOLD - self.clock())

    def quiet(self) -> bool:
        """At most one reply is waiting for durability (group commit may fsync inline)."""
        return sum(peer.unanswered for peer in self.peers) <= 1


def _flush_ready(peers: set[Peer]) -> None:
    for peer in peers:
        if peer.front_ready():
            peer._flush()


def _reply(request: Request, result: Any, unread: int | None = None, announced: list[Any] | None = None) -> bytes:
    result_json = protocol.encode_result(result)
    payload = protocol.reply_lines(request.id, result_json, request.parts, unread, announced)
    if payload is None:
        raise RelayError(
            f"the result of {request.op} is {len(result_json)} bytes, more than one line may hold ({protocol.MAX_LINE}); "
            'send the request with "parts": true to receive it in pieces (docs/protocol.md, section 2)',
        )
    return payload


def _log_bug(op: str, exc: RelayError, **more: Any) -> None:
    """A bug in an operation (ops.run made it an Internal error): its traceback goes to the log."""
    if isinstance(exc, Internal) and exc.__cause__ is not None:
        log.error("operation failed", op=op, exc_info=exc.__cause__, **more)


def _refusal(request: Request, exc: RelayError) -> bytes:
    return protocol.encode(Response(id=request.id, ok=False, error=protocol.error_body(exc)))


class Deferred:
    """A request queued to run together with others. Once `ran` is set, `payload` is
    its reply and `batch` the group commit batch that makes its writes durable."""

    __slots__ = ("op", "request", "params", "ran", "payload", "batch", "peer")

    def __init__(self, op: ops.Operation | None, request: Request, ran: anyio.Event, peer: Peer) -> None:
        self.op = op
        self.request = request
        self.peer = peer  # whose outbox holds it
        self.params: Any = None  # decoded; a request whose params do not decode has its payload already
        self.ran = ran
        self.payload: bytes | None = None
        self.batch: Batch | None = None

    def ready(self) -> bool:
        return self.ran.is_set() and (self.batch is None or self.batch.done.is_set())


# What a connection's outbox holds, in request order: (the batch to wait for, the
# request id, the reply), or a deferred request that supplies both once it has run.
Reply = tuple[Batch | None, Any, bytes] | Deferred


class Peer:
    """One client connection.

    Both directions run in callbacks of the event loop rather than in a task per
    request: `_on_readable` handles every complete request that arrived, and `_flush`
    writes every reply whose writes are durable, in request order, straight into the
    socket -- called once a chunk of requests is handled and whenever a group commit
    round ends. A task is started only to finish a write the socket had no room for.
    """

    def __init__(self, server: Server, stream: SocketStream) -> None:
        self.server = server
        self.stream = stream
        self.raw: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        self.conn = protocol.Connection("server")
        self.state = PeerState(OUTBOX)  # every decision about reading and writing (relayd.daemon.peerstate)
        self.subscriber: Subscriber | None = None
        self._last_deferred: Deferred | None = None
        self._group: TaskGroup | None = None
        self._reading: anyio.CancelScope | None = None
        self._pumping: anyio.CancelScope | None = None
        self.last_active = server.clock()
        self._outbox: deque[Reply] = deque()  # replies not yet written, in request order
        self._frames: deque[Any] = deque()  # received, not yet handled (waiting behind a team decision)
        self._backlog: list[bytes] = []  # written but not yet taken by the socket
        self._read_done = anyio.Event()  # wakes `_read` once the state is finished
        self._read_failed: BaseException | None = None
        self._settled = anyio.Event()  # set when nothing is left to write
        self._drained = anyio.Event()  # set when the backlog went out

    @property
    def unanswered(self) -> int:
        """Replies waiting for their writes to become durable."""
        return self.state.unanswered

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                with anyio.CancelScope() as self._reading:
                    await self._read()
                # Done reading (EOF, fatal error or drain). Replies already queued still go
                # out; a subscriber that half-closed keeps receiving events.
                while not self.state.settled():
                    self._settled = anyio.Event()
                    await self._settled.wait()
            if self.conn.closed:
                with anyio.move_on_after(1):
                    await _linger(self.stream)
        finally:
            self._outbox.clear()  # a round that ends later writes nothing to a closed connection
            self.server.answered.discard(self)
            if self.subscriber is not None:
                self.server.hub.remove(self.subscriber)
                self.subscriber.queue.close()

    def stop_reading(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        if self._pumping is not None:
            self._pumping.cancel()

    def _abort(self) -> None:
        if self._group is not None:
            self._group.cancel_scope.cancel()

    def close_idle(self) -> None:
        self._abort()

    def _drop_slow(self) -> None:
        """The hub dropped this subscriber (its queue is full). What was queued still goes
        out, then a `dropped` error frame, so a client can resume after its last event;
        one that does not read within DROP_DRAIN seconds is simply disconnected."""
        if self.subscriber is None or not self.state.drop():
            return
        self.subscriber.queue.close()  # the pump ends once the queue is drained
        if self._group is not None:
            self._group.start_soon(self._drop_deadline)

    async def _drop_deadline(self) -> None:
        await anyio.sleep(DROP_DRAIN)
        self._abort()

    def _apply(self, reading: Reading) -> None:
        """Do what the state decided about the socket's read watch."""
        if reading is Reading.RESUME:
            asyncio.get_running_loop().add_reader(self.raw.fileno(), self._on_readable)
        elif reading is Reading.PAUSE:
            asyncio.get_running_loop().remove_reader(self.raw.fileno())

    # -- reading ---------------------------------------------------------------------
    async def _read(self) -> None:
        """Until EOF, a fatal protocol error or stop_reading.

        The reading itself happens in `_on_readable`: the socket stays registered while
        the connection lives, and each readable turn takes one recv() and handles every
        complete request in it, with no task switch, wake-up or epoll (un)registration per
        request -- they were most of relayd's cost per request."""
        self._apply(self.state.start())
        try:
            await self._read_done.wait()
        finally:
            self._finish()  # (also when stop_reading cancelled us: never resume)
        if self._read_failed is not None:
            raise self._read_failed

    def _finish(self) -> None:
        self._apply(self.state.finish())
        self._read_done.set()

    def _on_readable(self) -> None:
        try:
            try:
                data = self.raw.recv(RECEIVE_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                self.last_active = self.server.clock()
                self.server.answered.discard(self)
                self._take(data)
                if self.front_ready():  # (a durable reply, the usual one, waits for its round)
                    self._flush()
            if not data or self.conn.closed:
                self._finish()
        except Exception as exc:  # a bug: end this connection (the handler logs it), keep serving
            self._read_failed = exc
            self._finish()

    def _take(self, data: bytes) -> None:
        self._frames.extend(self.conn.receive_data(data))
        self._handle_frames()

    def _handle_frames(self) -> None:
        """Carry out the router's plan for each frame received, in order (relayd.daemon.router)."""
        route = self.server.router.route
        while self._frames and not self.state.deciding:
            last = self._last_deferred
            plan = route(self._frames.popleft(), queued=last is not None and not last.ran.is_set())
            if plan.after_queued:
                self.server.run_deferred()
            match plan:
                case JoinBatch():
                    self._last_deferred = queued = self.server.defer(plan, self)
                    self._queue(queued, durable_later=True)
                case Run(call=call):
                    batch, payload = self.server.run(call)
                    self._queue((batch, call.request.id, payload), durable_later=batch is not None)
                case TeamWide(request=request):
                    self._decide(request, self.server.team_ops[request.op])
                case AwaitAnnouncement(call=call):
                    self._announce(call)
                case Refuse(request=request, error=error):
                    batch, payload = self.server.refuse(request, error)
                    self._queue((batch, request.id, payload), durable_later=batch is not None)
                case Violated(violation=item):
                    log.info("protocol violation", code=item.code, detail=item.message[:200], fatal=item.fatal)
                    self._queue((None, None, self.conn.violation_reply(item)))
                case Answer(frame=frame):
                    self._queue((None, None, protocol.encode(frame)))
                case JoinEvents(subscribe=subscribe):
                    self._subscribe(subscribe)

    def _decide(self, request: Request, decide: Callable[..., Awaitable[tuple[Batch | None, bytes]]]) -> None:
        """A team-wide operation (the bridge decides it, asynchronously): its reply keeps
        its place in the outbox, and this connection reads and handles nothing more until
        it is decided -- the next request may depend on it."""
        slot = Deferred(None, request, anyio.Event(), self)
        self._queue(slot, durable_later=True)
        self._apply(self.state.deciding_started())
        assert self._group is not None
        self._group.start_soon(self._decided, slot, decide)

    async def _decided(self, slot: Deferred, decide: Callable[..., Awaitable[tuple[Batch | None, bytes]]]) -> None:
        slot.batch, slot.payload = await decide(slot.request, self.server.execute)
        if slot.batch is not None:
            slot.batch.waiting.add(self)  # (its round may still be syncing: written when it ends)
        slot.ran.set()
        self.state.deciding_done()
        self._handle_frames()
        self._flush()

    def _announce(self, call: Call) -> None:
        """A request that also waits for its messages' announcements: it runs now, in its
        turn, and its reply keeps its place in the outbox while a task waits (the
        connection goes on reading; the replies after it wait behind it)."""
        request = call.request
        try:
            result, unread = self.server.outcome(call)
        except RelayError as exc:
            _log_bug(request.op, exc)
            batch = self.server._pending()
            self._queue((batch, request.id, _refusal(request, exc)), durable_later=batch is not None)
            return
        slot = Deferred(None, request, anyio.Event(), self)
        slot.batch = self.server._pending()
        self._queue(slot, durable_later=True)
        assert self._group is not None
        self._group.start_soon(self._announced, slot, result, unread)

    async def _announced(self, slot: Deferred, result: Any, unread: int | None) -> None:
        try:
            if slot.batch is not None:
                await slot.batch.wait()  # announcements follow the durable write
            announced = await self.server.announced(result, slot.request.announce)
            slot.payload = _reply(slot.request, result, unread, announced)
        except RelayError as exc:  # (a failed fsync: _flush answers with its error)
            slot.payload = _refusal(slot.request, exc)
        slot.ran.set()
        self._flush()

    # -- writing ---------------------------------------------------------------------
    def _queue(self, item: Reply, durable_later: bool = False) -> None:
        self._outbox.append(item)
        if type(item) is tuple and item[0] is not None:
            item[0].waiting.add(self)  # (a Deferred's batch is known once it has run)
        self._apply(self.state.reply_queued(durable_later))

    def front_ready(self) -> bool:
        """Whether the first reply in the outbox can be written now (see `_flush`)."""
        if not self._outbox:
            return False
        item = self._outbox[0]
        if isinstance(item, Deferred):
            return item.ready()
        batch = item[0]
        return batch is None or batch.done.is_set()

    def _flush(self) -> None:
        """Write every reply at the front of the outbox that is ready: its request has run
        and its writes are durable (a failed fsync turns it into that error)."""
        outbox = self._outbox
        out = []
        waited = 0
        while outbox:
            item = outbox[0]
            if isinstance(item, Deferred):
                if not item.ready():
                    break
                assert item.payload is not None
                batch, request_id, payload = item.batch, item.request.id, item.payload
                waited += 1
            else:
                batch, request_id, payload = item
                if batch is not None:
                    if not batch.done.is_set():
                        break
                    waited += 1
            if batch is not None and batch.error is not None:
                payload = protocol.encode(Response(id=request_id, ok=False, error=protocol.error_body(batch.error)))
            outbox.popleft()
            out.append(payload)
        if out:
            self._write(b"".join(out))
        # (after the write: a short one pauses reading, which the written replies must not undo)
        self._apply(self.state.replies_written(len(out), waited))
        if self.state.settled():
            self._settled.set()

    def _write(self, data: bytes) -> None:
        """Straight into the socket buffer when it has room (the usual case); what does
        not fit goes to a task that waits until the socket takes it, and everything
        written after it waits behind it."""
        if not self.state.write_now():
            self._backlog.append(data)
            self._apply(self.state.backlogged())
            return
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._abort()  # the peer is gone
            return
        if sent < len(data):
            self._backlog.append(data[sent:])
            self._apply(self.state.sent_short())
            assert self._group is not None
            self._group.start_soon(self._drain)

    async def _drain(self) -> None:
        try:
            while self._backlog:
                chunk = b"".join(self._backlog)
                self._backlog.clear()
                self._apply(self.state.drain_took())
                await self.stream.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._backlog.clear()
            self._abort()  # the peer is gone
        finally:
            self._apply(self.state.drained())
            self._drained.set()
        self._flush()

    async def _send(self, data: bytes) -> None:
        """Write `data` (subscription events) and wait until the socket has taken it, so
        that a subscriber who stops reading fills its bounded queue and is dropped."""
        self._write(data)
        while not self.state.write_now():
            self._drained = anyio.Event()
            await self._drained.wait()

    def _write_event_now(self, data: bytes) -> bool:
        """Events for this subscriber, written at once when nothing is ahead of them: the
        pump is idle (its queue empty, everything it took written) and the socket has no
        backlog. Otherwise they are queued, and so is everything after them, in order."""
        if self.state.event_now():
            self._write(data)
            return True
        return False

    def _subscribe(self, request: Subscribe) -> None:
        try:
            if self.subscriber is not None:
                raise ProtocolError("already subscribed on this connection; open another one for other topics")
            topics = protocol.normalize_topics(request.topics)
            if request.agent is not None:
                check_agent_name(request.agent)
            if request.scope == "team" and self.server.store.remote is None:
                raise Unavailable("scope team needs relayd started with --bridge (this relayd serves one host only)")
        except RelayError as exc:
            self._queue((None, None, protocol.encode(ErrorFrame(error=protocol.error_body(exc)))))
            return
        queue, events = anyio.create_memory_object_stream[bytes](QUEUE_EVENTS)
        self.subscriber = Subscriber(topics, request.agent, queue, drop=self._drop_slow, team=request.scope == "team", direct=self._write_event_now)
        # Fix the replay's end and join the hub in one step (no await between), so every
        # event is either replayed or queued, never both, never neither.
        replay = self.server.events.replay(request.after, self.subscriber.wants) if request.after else iter(())
        self.server.hub.subscribers.add(self.subscriber)
        log.debug("subscribed", topics=topics, agent=request.agent, after=request.after)
        assert self._group is not None
        ack = protocol.encode(Subscribed(topics=topics, agent=request.agent, scope=request.scope))
        self._group.start_soon(self._pump, ack, replay, events)

    async def _pump(self, ack: bytes, replay: Iterator[bytes], events: MemoryObjectReceiveStream[bytes]) -> None:
        with anyio.CancelScope() as self._pumping:
            async with events:
                await self._send(ack)
                chunk: list[bytes] = []
                for frame in replay:
                    chunk.append(frame)
                    if len(chunk) >= 256:
                        await self._send(b"".join(chunk))
                        chunk = []
                if chunk:
                    await self._send(b"".join(chunk))
                while True:
                    try:
                        frame = events.receive_nowait()
                    except anyio.WouldBlock:
                        self.state.pump_waiting = True  # meanwhile the hub may write events directly
                        try:
                            frame = await events.receive()
                        except anyio.EndOfStream:
                            break
                        finally:
                            self.state.pump_waiting = False
                    except anyio.EndOfStream:
                        break
                    out = [frame]
                    while len(out) < 256:
                        try:
                            out.append(events.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    await self._send(b"".join(out))
            if self.state.slow:
                body = ErrorBody(code=Dropped.code, message="dropped: not reading fast enough (resume with after = the last event id received)")
                await self._send(protocol.encode(ErrorFrame(error=body, fatal=True)))
                self._abort()


async def _linger(stream: SocketStream, limit: int = 4 << 20) -> None:
    """Half-close, then discard what the peer still sends (up to `limit` bytes): closing a
    Unix socket with unread input resets the connection, and the peer would lose the
    error frame that explains why it is being closed."""
    try:
        await stream.send_eof()
        while limit > 0:
            limit -= len(await stream.receive(RECEIVE_BYTES))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


