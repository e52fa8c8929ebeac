"""The one client used by `relayctl` and `relay-mcp`.

`call(op, params)` sends the request to relayd when it runs. When the daemon is absent
(socket file missing, connection refused, or the daemon on that socket serves another
store) the very same store function runs in this process instead; any other failure is
reported, never masked by a silent fallback. Blocking sockets only: no event loop, so
a command starts in milliseconds.

A relayd that is there but does not answer (stopped with SIGSTOP, or stuck) counts as
absent for a request it has not seen -- no greeting within `layout.ANSWER_WAIT` -- and
for one it may have seen when running that request here cannot do it twice: a send,
whose message id is chosen before the first attempt (relayd.dedup), and a request that
changes nothing. Any other request waits for relayd's answer up to the full timeout.
`silent` then says so (`status` shows relayd as not answering).
"""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator

import msgspec

from . import fsio, layout
from .errors import NO_ANSWER, PeerError, RelayError, TimedOut, Unavailable, from_wire, no_answer, went_away
from .store import Store
from .ulid import new_ulid

if TYPE_CHECKING:
    import socket

    from . import protocol

# relayd.protocol and relayd.handshake are imported where a connection to relayd is made or
# used: a command that finds no relayd runs on the store and never needs them.

RECEIVE_BYTES = 256 * 1024
_RETRIES = 3  # reconnects for one request whose daemon vanished (a restart may be under way)


class _Lost(Exception):
    """The daemon went away mid-conversation."""


class _Silent(Exception):
    """The daemon said nothing within the answer wait, for a request safe to run here."""


class _Line:
    """A blocking protocol connection to relayd."""

    def __init__(self, sock: socket.socket, wait: float) -> None:
        from . import protocol

        # Kept here: a request's path uses it several times, and an import statement in a
        # function runs the import machinery's Python code at every call.
        self.protocol = protocol
        self.sock = sock
        self.wait = wait  # for an answer, before relayd counts as hung (layout.ANSWER_WAIT)
        self.conn = protocol.Connection("client")
        self.frames: list[protocol.Frame | protocol.Violation] = []
        self._poller: Any = None

    def send(self, frame: protocol.Frame) -> None:
        self._write(self.protocol.encode(frame))

    def send_raw(self, frame: dict[str, object]) -> None:
        self._write(msgspec.json.encode(frame) + b"\n")

    def _write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _Lost(str(exc)) from None

    def receive(self) -> protocol.Frame:
        while not self.frames:
            try:
                data = self.sock.recv(RECEIVE_BYTES)
            except TimeoutError:
                raise TimedOut(NO_ANSWER) from None
            except ConnectionResetError as exc:
                raise _Lost(str(exc)) from None
            if not data:
                raise _Lost("relayd closed the connection")
            self.frames.extend(self.conn.receive_data(data))
        item = self.frames.pop(0)
        if isinstance(item, self.protocol.Violation):
            raise PeerError(f"relayd sent something that is not relay's protocol: {item.message}")
        return item

    def stale(self) -> bool:
        """Between requests relayd sends nothing on a request connection: anything readable
        now is its end (or a closing error frame), so this connection is no use any more."""
        if self.frames:
            return True
        if self._poller is None:
            import select  # here: only a connection kept between requests needs it

            self._poller = select.poll()
            self._poller.register(self.sock, select.POLLIN)
        return bool(self._poller.poll(0))

    def close(self) -> None:
        self.sock.close()


class Client:
    def __init__(
        self,
        store_dir: str,
        socket_path: str | None = None,
        *,
        fsync: bool | None = None,
        name: str = "relayctl",
        timeout: float | None = 30.0,
        daemon: bool = True,
    ) -> None:
        """`daemon=False`: the caller has just found no relayd for this store (relayctl's
        fast path), so every call runs on the store directly without trying the socket."""
        self.store_dir = os.path.abspath(store_dir)
        self.socket_path = socket_path or layout.default_socket_path(self.store_dir)
        self.name = name
        self.timeout = timeout
        self._fsync = fsync
        self._store: Store | None = None
        self._line: _Line | None = None
        self._ids = itertools.count(1)
        self._try_daemon = daemon
        self._fresh = False  # the connection was opened (and greeted) for the current call
        self.mode = "direct"  # "daemon" once a call went through relayd
        self.silent = False  # the last call found relayd there but not answering

    # -- connecting ------------------------------------------------------------------
    def _open(self, timeout: float | None) -> _Line | None:
        """A greeted connection to the daemon serving this store, or None when there is none."""
        if not layout.socket_path_fits(self.socket_path):
            return None  # no daemon can listen at such a path: direct mode
        import socket  # here: a call in direct mode never needs it

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        # (never below half a second, however short the timeout: relayd reads the inbox for
        # a send older than dedup.LATE_MS, so a copy this client stores after giving up on
        # relayd is found there when relayd wakes up and runs the request too)
        wait = layout.ANSWER_WAIT if timeout is None else min(layout.ANSWER_WAIT, max(timeout, 0.5))
        sock.settimeout(wait)
        try:
            sock.connect(self.socket_path)
        except (FileNotFoundError, NotADirectoryError, ConnectionRefusedError):
            sock.close()  # no socket there (or its directory is not one): no daemon
            return None
        except socket.timeout:
            sock.close()  # its backlog is full and nobody accepts: hung, and it saw nothing
            self.silent = True
            return None
        except PermissionError:
            sock.close()
            if _unreadable(self.store_dir):  # the socket beside the store: the store is the trouble
                raise fsio.unreadable_store(self.store_dir) from None
            raise Unavailable(f"cannot connect to relayd at {self.socket_path}: permission denied (the socket or its directory belongs to another user)") from None
        except OSError as exc:
            sock.close()
            raise Unavailable(f"cannot connect to relayd at {self.socket_path}: {exc.strerror or exc}") from None
        from . import handshake

        line = _Line(sock, wait)
        try:
            line.send_raw(handshake.hello(self.name))
            ours = handshake.ours(msgspec.to_builtins(line.receive()), self.store_dir, self.name)
        except _Lost:
            line.close()
            return None  # it was shutting down: as good as absent
        except TimedOut:
            line.close()  # accepted by the kernel, never greeted: hung, and no request sent
            self.silent = True
            return None
        except RelayError:
            line.close()
            raise
        if not ours:
            line.close()
            return None  # a daemon for another store: not ours
        return line

    def _daemon(self) -> _Line | None:
        if self._line is not None and self._line.stale():
            self._drop()  # relayd closed it meanwhile (idle, or restarted): open a fresh one
        self._fresh = self._line is None
        if self._line is None and self._try_daemon:
            self._line = self._open(self.timeout)
        return self._line

    def _drop(self) -> None:
        if self._line is not None:
            self._line.close()
            self._line = None

    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.store_dir, fsync=self._fsync)
        return self._store

    # -- requests --------------------------------------------------------------------
    def call(self, op: str, params: dict[str, Any] | None = None) -> Any:
        """Run `op` with `params`; returns plain JSON-able data, or raises RelayError.

        A send gets its message id here, before the first attempt (unless the caller chose
        one), so when relayd vanishes mid-request the send is simply repeated with the same
        id, through a restarted daemon or in direct mode: the store appends it once.
        """
        return self.ask(op, params)["result"]

    def ask(self, op: str, params: dict[str, Any] | None = None, **session: Any) -> dict[str, Any]:
        """`call` with a request's session fields (relayd.session: `agent`, `touch`,
        `unread`, `announce`): {"result": ..., "unread": ..., "announced": ...}, the last two
        None unless asked for."""
        params = _with_send_id(op, params or {})
        lost = 0
        self.silent = False
        while True:
            line = self._daemon()
            if line is None:
                return self._direct(op, params, session)
            # (relayd answers a request that waits for announcements that much later)
            line.sock.settimeout(line.wait + session.get("announce", 0.0))
            if not self._fresh and not _repeatable(op):
                # A connection kept from an earlier call: relayd may have stopped since. A
                # request it has not seen can run here, so ask first whether it answers.
                try:
                    self._reply(line, self._request(line, "version", {}), _give_up)
                except _Silent:
                    self._drop()
                    self.silent = True
                    return self._direct(op, params, session)
                except _Lost:
                    self._drop()
                    continue  # reconnect: its greeting asks the same
            try:
                request_id = self._request(line, op, params, session)
            except _Lost:
                self._drop()  # died since our last call, before seeing this request: safe to redo
                lost += 1
                if lost > _RETRIES:
                    return self._direct(op, params, session)
                continue
            try:
                reply, result = self._reply(line, request_id, lambda: self._patient(line, op))
            except _Silent:
                self._drop()  # a late answer on this connection would be misread: close it
                self.silent = True
                return self._direct(op, params, session)
            except _Lost:
                self._drop()
                lost += 1
                idempotent = _repeatable(op)  # (a touch may repeat)
                if idempotent and lost <= _RETRIES:
                    continue  # the same request again: a send repeats its id, so it lands once
                if idempotent:
                    return self._direct(op, params, session)
                raise went_away(op) from None
            except TimedOut:
                self._drop()
                raise no_answer(op) from None
            except RelayError:
                self._drop()
                raise
            self.mode = "daemon"
            if not reply.ok:
                raise from_wire(msgspec.to_builtins(reply.error) if reply.error else {})
            return {"result": result, "unread": reply.unread, "announced": reply.announced}

    def _request(self, line: _Line, op: str, params: dict[str, Any], session: dict[str, Any] | None = None) -> int:
        request_id = next(self._ids)
        line.send(line.protocol.Request(id=request_id, op=op, params=params, parts=True, **(session or {})))
        return request_id

    def _patient(self, line: _Line, op: str) -> None:
        """relayd has said nothing for the answer wait: raise _Silent when running `op` here
        is safe (see the module's docstring), else wait out the rest of the timeout."""
        if _repeatable(op):
            raise _Silent
        line.sock.settimeout(None if self.timeout is None else max(self.timeout - line.wait, 0.001))

    def _reply(self, line: _Line, request_id: int, on_silence: Callable[[], None]) -> tuple[protocol.Response, Any]:
        """The response to `request_id` and its result (joined from its parts, if any).
        The first time relayd says nothing for the socket's timeout, `on_silence` decides
        (raise, or go on waiting); the second time is TimedOut."""
        protocol = line.protocol
        pieces = protocol.Reassembly()
        waited = False
        while True:
            try:
                frame = line.receive()
            except TimedOut:
                if waited:
                    raise
                waited = True
                on_silence()
                continue
            if isinstance(frame, protocol.Part) and frame.id == request_id:
                pieces.add(frame)
            elif isinstance(frame, protocol.Response) and frame.id == request_id:
                return frame, pieces.result(frame) if frame.parts else frame.result
            elif isinstance(frame, protocol.ErrorFrame):
                raise from_wire(msgspec.to_builtins(frame.error))

    def _direct(self, op: str, params: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
        from . import ops

        self.mode = "direct"
        unread = None
        if session.get("touch") or session.get("unread"):
            from . import session as bookkeeping

            result, unread = bookkeeping.run(self.store(), ops.lookup(op), params, session.get("agent"), bool(session.get("touch")), bool(session.get("unread")))
            result = msgspec.to_builtins(result)
        else:
            result = ops.call(self.store(), op, params)
        if op in APPENDING_OPS and isinstance(result, dict) and (result.get("messages") or op == "redeliver"):
            # With no daemon to react to the inbox events, whoever appended notifies; and
            # `redeliver` (run from cron without relayd) also retries triggers held back.
            from .notify import agents_awaiting_trigger, notify_new_messages

            recipients = list(dict.fromkeys(m["to"] for m in result.get("messages", [])))
            if op == "redeliver":
                recipients = list(dict.fromkeys(recipients + agents_awaiting_trigger(self.store())))
            if recipients:
                result["notifications"] = notify_new_messages(self.store(), recipients)
        announced = None
        if session.get("announce"):
            # No relayd to announce later: this send announced (its notifications), or what
            # its recipients' tracks say now is all there is to know.
            from . import session as bookkeeping

            announced = bookkeeping.notified(result["notifications"]) if isinstance(result, dict) and result.get("notifications") else bookkeeping.announcements(self.store(), bookkeeping.message_ids(result))[0]
        return {"result": result, "unread": unread, "announced": announced}

    # -- events ----------------------------------------------------------------------
    def subscribe(self, topics: list[str], agent: str | None = None, after: str | None = None, scope: str = "host") -> Iterator[dict[str, Any]]:
        """The `{"type":"subscribed",...}` acknowledgement, then events as dicts
        (`{"type":"event","topic":...}`), replayed ones first with `after`.

        Needs the daemon: raises Unavailable when none serves this store, and when the
        daemon goes away (the caller may fall back to watching files itself).
        """
        line = self._open(self.timeout)
        if line is None and self.silent:
            raise Unavailable(f"relayd at {self.socket_path} is not answering (stopped or stuck?)")
        if line is None:
            raise Unavailable(f"relayd is not running for {self.store_dir}; start it with 'relayctl daemon' (or 'relayd')")
        protocol = line.protocol
        try:
            line.send(protocol.Subscribe(topics=list(topics), agent=agent, after=after, scope=scope))  # type: ignore[arg-type]
            answer = line.receive()
            if isinstance(answer, protocol.ErrorFrame):
                raise from_wire(msgspec.to_builtins(answer.error))
            if not isinstance(answer, protocol.Subscribed):
                raise PeerError(f"relayd answered subscribe with {type(answer).__name__}")
            line.sock.settimeout(None)
            yield msgspec.to_builtins(answer)
            while True:
                frame = line.receive()
                if isinstance(frame, protocol.ErrorFrame):
                    raise from_wire(msgspec.to_builtins(frame.error))
                if isinstance(frame, protocol.EventFrame):
                    yield msgspec.to_builtins(frame)
        except _Lost:
            raise Unavailable("relayd closed the event stream (stopped or restarted)") from None
        finally:
            line.close()

    def close(self) -> None:
        self._drop()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Operations whose answer lists the inbox lines they appended under "messages".
APPENDING_OPS = frozenset({"send", "redeliver", "dlq_retry", "gc"})


def _with_send_id(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """A send with its message id chosen now, unless given."""
    if op != "send" or params.get("id"):
        return params
    return dict(params, id=new_ulid())


def _give_up() -> None:
    raise _Silent


def _repeatable(op: str) -> bool:
    """Whether `op` may run again (here, or through relayd once more) after an attempt
    whose outcome is unknown: a send, by its message id, and anything that changes nothing."""
    return op == "send" or not _mutates(op)


def _mutates(op: str) -> bool:
    from . import ops
    from .errors import UsageError

    try:
        return ops.lookup(op).mutates  # (loads every domain module only for an op not yet loaded)
    except UsageError:
        return True


def _unreadable(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except PermissionError:
        return True
    except OSError:
        return False
    return False
