"""The socket server: accept connections, check who is calling, move bytes.

Each connection has a reader (frames in, store operations run right here in the loop
thread), a reply writer (waits for the group commit that makes a reply's writes durable,
then sends replies in request order) and, once subscribed, an event pump. All of them
live in the connection's task group; the connection is closed in `finally`.
"""

from __future__ import annotations

import errno
import itertools
import os
import resource
import socket
import struct
import time
from typing import Any, Awaitable, Callable, Iterator

import anyio
import structlog
from anyio.abc import SocketListener, SocketStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from relayd import __version__, ops, protocol
from relayd.errors import ProtocolError, RelayError, StoreError, Unavailable
from relayd.protocol import ErrorBody, ErrorFrame, Hello, Request, Response, Subscribe, Subscribed, Violation
from relayd.records import check_agent_name
from relayd.store import Store

from .commit import Batch, GroupCommit
from .events import QUEUE_EVENTS, EventLog, Hub, Subscriber

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
        self.round = anyio.Event()  # set when the requests deferred so far have run
        self.max_connections = max_connections if max_connections is not None else default_max_connections()
        self.idle_timeout = idle_timeout
        self.clock = time.monotonic
        self.refusing = 0
        self._refusal_logged = -1e9

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
            body = ErrorBody(code="unavailable", message=f"relayd is serving its limit of {self.max_connections} connections; close idle ones or try again")
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
                    refusal = ErrorFrame(error=ErrorBody(code="permission_denied", message="relayd serves only its own user"), fatal=True)
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
        """Run one operation in this (the loop) thread; the reply waits for the batch."""
        self.requests += 1
        try:
            op = self.table.get(request.op) or ops.lookup(request.op)  # lookup raises "unknown operation"
            result = op.run(self.store, ops.decode_params(op, request.params))
            payload = _reply(request, result)
        except RelayError as exc:
            payload = protocol.encode(Response(id=request.id, ok=False, error=protocol.error_body(exc)))
        except Exception as exc:  # a bug in an operation: report it, keep serving
            log.exception("operation failed", op=request.op)
            payload = _internal_error(request, exc)
        return self._pending(), payload

    def _pending(self) -> Batch | None:
        return self.committer.pending() if self.committer is not None else None

    def defer(self, request: Request) -> Deferred | None:
        """Queue a request of a batchable operation to run with the others that arrive
        while the current fsync round runs (see `run_deferred`). None when it is run
        alone instead: not batchable, no group commit, or parameters that do not decode."""
        op = self.table.get(request.op)
        if op is None or op.batch is None or self.committer is None:
            return None
        try:
            params = ops.decode_params(op, request.params)
        except RelayError:
            return None
        self.requests += 1
        item = Deferred(op, request, params, self.round)
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
        start = 0
        while start < len(queued):
            op = queued[start].op
            end = start
            while end < len(queued) and queued[end].op is op:
                end += 1
            group = queued[start:end]
            start = end
            assert op.batch is not None
            try:
                outcomes = op.batch(self.store, [item.params for item in group])
            except Exception as exc:  # a bug in an operation: every request of the group fails
                log.exception("operation failed", op=op.name, batched=len(group))
                for item in group:
                    item.payload = _internal_error(item.request, exc)
                continue
            for item, outcome in zip(group, outcomes):
                try:
                    if isinstance(outcome, RelayError):
                        raise outcome
                    item.payload = _reply(item.request, outcome)
                except RelayError as exc:
                    item.payload = protocol.encode(Response(id=item.request.id, ok=False, error=protocol.error_body(exc)))
        batch = self._pending()
        for item in queued:
            item.batch = batch
        finished.set()

    def quiet(self) -> bool:
        """At most one reply is waiting for durability (group commit may fsync inline)."""
        return sum(peer.unanswered for peer in self.peers) <= 1


def _reply(request: Request, result: Any) -> bytes:
    payload = protocol.encode(Response(id=request.id, ok=True, result=result))
    if len(payload) > protocol.MAX_LINE:
        raise RelayError(
            f"the result of {request.op} is {len(payload)} bytes, more than one line may hold ({protocol.MAX_LINE}); ask for less (e.g. a smaller last)",
        )
    return payload


def _internal_error(request: Request, exc: Exception) -> bytes:
    body = ErrorBody(code="internal", message=f"internal error in {request.op}: {type(exc).__name__}: {exc}")
    return protocol.encode(Response(id=request.id, ok=False, error=body))


class Deferred:
    """A request queued to run together with others. Once `ran` is set, `payload` is
    its reply and `batch` the group commit batch that makes its writes durable."""

    __slots__ = ("op", "request", "params", "ran", "payload", "batch")

    def __init__(self, op: ops.Operation, request: Request, params: Any, ran: anyio.Event) -> None:
        self.op = op
        self.request = request
        self.params = params
        self.ran = ran
        self.payload: bytes | None = None
        self.batch: Batch | None = None

    def ready(self) -> bool:
        return self.ran.is_set() and (self.batch is None or self.batch.done.is_set())


# What a connection's reply writer gets, in request order: (the batch to wait for, the
# request id, the reply), or a deferred request that supplies both once it has run.
Reply = tuple[Batch | None, Any, bytes] | Deferred


class Peer:
    """One client connection."""

    def __init__(self, server: Server, stream: SocketStream) -> None:
        self.server = server
        self.stream = stream
        self.raw: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        self.conn = protocol.Connection("server")
        self.lock = anyio.Lock(fast_acquire=True)  # no extra loop turn when free (the usual case)
        self.subscriber: Subscriber | None = None
        self.unanswered = 0  # replies waiting for their batch to become durable
        self._last_deferred: Deferred | None = None
        self._group: TaskGroup | None = None
        self._reading: anyio.CancelScope | None = None
        self._pumping: anyio.CancelScope | None = None
        self.last_active = server.clock()
        self._slow = False  # dropped for not reading: told so after what was queued

    async def run(self) -> None:
        replies, pending = anyio.create_memory_object_stream[Reply](OUTBOX)
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                group.start_soon(self._write_replies, pending)
                async with replies:
                    with anyio.CancelScope() as self._reading:
                        await self._read(replies)
                # Done reading (EOF, fatal error or drain). Replies already queued still go
                # out; a subscriber that half-closed keeps receiving events.
            if self.conn.closed:
                with anyio.move_on_after(1):
                    await _linger(self.stream)
        finally:
            if self.subscriber is not None:
                self.server.hub.remove(self.subscriber)

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
        if self._slow or self.subscriber is None:
            return
        self._slow = True
        self.subscriber.queue.close()  # the pump ends once the queue is drained
        if self._group is not None:
            self._group.start_soon(self._drop_deadline)

    async def _drop_deadline(self) -> None:
        await anyio.sleep(DROP_DRAIN)
        self._abort()

    async def _send(self, data: bytes) -> None:
        try:
            async with self.lock:
                # Straight into the socket buffer when it has room (the usual case), the
                # stream's waiting send only for what does not fit: a loop turn less.
                try:
                    sent = self.raw.send(data)
                except BlockingIOError:
                    sent = 0
                if sent < len(data):
                    await self.stream.send(data[sent:])
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._abort()  # the peer is gone
            await anyio.lowlevel.checkpoint()

    async def _read(self, replies: MemoryObjectSendStream[Reply]) -> None:
        raw = self.raw
        fd = raw.fileno()
        while not self.conn.closed:
            # What SocketStream.receive does, minus a loop turn per call: read first, wait
            # only when nothing is there (and yield anyway when something was, so one
            # busy connection cannot starve the rest).
            try:
                data = raw.recv(RECEIVE_BYTES)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            except OSError:
                return
            if not data:
                return
            self.last_active = self.server.clock()
            await anyio.lowlevel.checkpoint()
            for item in self.conn.receive_data(data):
                if isinstance(item, Request) and (queued := self.server.defer(item)) is not None:
                    self.unanswered += 1
                    self._last_deferred = queued
                    await _put(replies, queued)
                    continue
                if self._last_deferred is not None and not self._last_deferred.ran.is_set():
                    self.server.run_deferred()  # this request may depend on the queued ones
                match item:
                    case Request():
                        if (decide := self.server.team_ops.get(item.op)) is not None:
                            batch, payload = await decide(item, self.server.execute)
                        else:
                            batch, payload = self.server.execute(item)
                        if batch is not None:
                            self.unanswered += 1
                        await _put(replies, (batch, item.id, payload))
                    case Violation():
                        log.info("protocol violation", code=item.code, detail=item.message[:200], fatal=item.fatal)
                        await replies.send((None, None, self.conn.violation_reply(item)))
                    case Hello():
                        answer = Hello(version=protocol.VERSION, server=f"relayd {__version__}", store=self.server.store.root)
                        await replies.send((None, None, protocol.encode(answer)))
                    case Subscribe():
                        await self._subscribe(item, replies)
                    case _:
                        body = ErrorBody(code="protocol_error", message=f"a client may not send {type(item).__name__} frames")
                        await replies.send((None, None, protocol.encode(ErrorFrame(error=body))))

    async def _write_replies(self, pending: MemoryObjectReceiveStream[Reply]) -> None:
        """Replies in request order, each once its writes are durable; ready ones coalesce."""
        async with pending:
            carry = None
            while True:
                if carry is None:
                    try:
                        carry = pending.receive_nowait()
                    except anyio.WouldBlock:
                        try:
                            carry = await pending.receive()
                        except anyio.EndOfStream:
                            return
                    except anyio.EndOfStream:
                        return
                out = [await self._ready(carry)]
                carry = None
                while len(out) < 64:
                    try:
                        item = pending.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    if not _is_ready(item):
                        carry = item
                        break
                    out.append(await self._ready(item))
                await self._send(b"".join(out))

    async def _ready(self, item: Reply) -> bytes:
        if isinstance(item, Deferred):
            if not item.ran.is_set():  # (waiting on a set Event would still yield once)
                await item.ran.wait()
            assert item.payload is not None
            if item.batch is None:  # nothing to make durable (it failed before writing)
                self.unanswered -= 1
                return item.payload
            item = (item.batch, item.request.id, item.payload)
        batch, request_id, payload = item
        if batch is not None:
            try:
                await batch.wait()
            except StoreError as exc:
                payload = protocol.encode(Response(id=request_id, ok=False, error=protocol.error_body(exc)))
            finally:
                self.unanswered -= 1
        return payload

    async def _subscribe(self, request: Subscribe, replies: MemoryObjectSendStream[Reply]) -> None:
        try:
            if self.subscriber is not None:
                raise ProtocolError("already subscribed on this connection; open another one for other topics")
            topics = protocol.normalize_topics(request.topics)
            if request.agent is not None:
                check_agent_name(request.agent)
            if request.scope == "team" and self.server.store.remote is None:
                raise Unavailable("scope team needs relayd started with --bridge (this relayd serves one host only)")
        except RelayError as exc:
            await replies.send((None, None, protocol.encode(ErrorFrame(error=protocol.error_body(exc)))))
            return
        queue, events = anyio.create_memory_object_stream[bytes](QUEUE_EVENTS)
        self.subscriber = Subscriber(topics, request.agent, queue, drop=self._drop_slow, team=request.scope == "team")
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
                async for frame in events:
                    out = [frame]
                    while len(out) < 256:
                        try:
                            out.append(events.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    await self._send(b"".join(out))
            if self._slow:
                body = ErrorBody(code="dropped", message="dropped: not reading fast enough (resume with after = the last event id received)")
                await self._send(protocol.encode(ErrorFrame(error=body, fatal=True)))
                self._abort()


async def _put(replies: MemoryObjectSendStream[Reply], item: Reply) -> None:
    """Queue a reply; waits (and yields) only when the queue is full. A request handled
    per loop turn costs several turns otherwise, which is much of relayd's overhead."""
    try:
        replies.send_nowait(item)
    except anyio.WouldBlock:
        await replies.send(item)


def _is_ready(item: Reply) -> bool:
    if isinstance(item, Deferred):
        return item.ready()
    return item[0] is None or item[0].done.is_set()


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


