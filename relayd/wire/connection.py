"""The one client connection to relayd: connect, greet, read lines, request with parts,
retry, and a send's id (DESIGN §3, docs/protocol.md); and the framing of lines, which
relayd's side (relayd.protocol.Connection) shares.

Every client builds on it, in one of two styles: relayctl's quick client
(`relayctl.fast.QuickClient`) and the full client (`relayd.client.full.Client`) are both a
`Caller`, differing only in what they run when no relayd serves the store and how they
know which operations change it; the watcher (`relayd.client.watch`) opens a `Line` and
subscribes. Standard library only, frames as plain dicts: the quick client must not load
msgspec (tests/client/test_startup_imports.py); the full client passes msgspec's JSON functions,
which are faster, as `loads` and `dumps`.

Before it sends anything, a connection checks that the socket and the process answering on
it are the user's own (`relayd.wire.peer`): another user's socket -- a name taken in a
shared sticky directory while relayd was stopped -- is refused with one line on stderr
naming it and its owner, and counts as no daemon. When the daemon is absent (socket file
missing, connection refused, another user's socket, or the daemon on that socket serves
another store) the caller runs the operation on the store itself; any other
failure is reported, never masked by a silent fallback. A relayd that is there but does
not answer (stopped with SIGSTOP, or stuck) counts as absent for a request it has not seen
-- no greeting within `layout.ANSWER_WAIT` -- and for one it may have seen when running
that request here cannot do it twice: a send, whose message id is chosen before the first
attempt (relayd.dedup), and a request that changes nothing. Any other request waits for
relayd's answer up to the full timeout. `silent` then says so (`status` shows relayd as
not answering).
"""

from __future__ import annotations

import os
import sys

from .. import jsonline, layout
from . import peer
from ..errors import NO_ANSWER, LineTooLong, PeerError, ProtocolError, RelayError, TimedOut, Unavailable, from_wire, no_answer, went_away

TYPE_CHECKING = False  # typing itself costs relayctl ~2 ms of start-up
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Iterator

MAX_LINE = 1 << 20  # bytes per line, newline included (relayd.protocol re-exports it, and LineFramer)
RECEIVE_BYTES = 256 * 1024
RETRIES = 3  # reconnects for one request whose daemon vanished (a restart may be under way)
# Requests a pipelining client keeps in flight on one connection. relayd stops reading a
# connection with 256 unanswered replies (docs/protocol.md), so a client that sends only
# while fewer than that are in flight can never wait on relayd while relayd waits on it.
WINDOW = 128
MAX_IN_FLIGHT = 255


class LineFramer:
    """Splits a byte stream into lines of at most `max_line` bytes (newline included)."""

    __slots__ = ("_buffer", "max_line", "overflowed")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buffer = bytearray()
        self.max_line = max_line
        self.overflowed = False

    def feed(self, data: bytes) -> list[bytes]:
        """Complete lines (without their newline). Raises LineTooLong once a line
        exceeds the limit; after that the framer accepts nothing more."""
        if self.overflowed:
            raise LineTooLong(f"line longer than {self.max_line} bytes")
        buffer = self._buffer
        start_scan = len(buffer)
        buffer += data
        lines = []
        start = 0
        newline = buffer.find(b"\n", start_scan)
        while newline >= 0:
            if newline + 1 - start > self.max_line:
                self._overflow()
            lines.append(bytes(buffer[start:newline]))
            start = newline + 1
            newline = buffer.find(b"\n", start)
        if start:
            del buffer[:start]
        if len(buffer) >= self.max_line:  # no room left for the newline
            self._overflow()
        return lines

    def _overflow(self) -> None:
        self.overflowed = True
        self._buffer = bytearray()
        raise LineTooLong(f"line longer than {self.max_line} bytes")

    @property
    def pending(self) -> int:
        """Bytes of an incomplete line held back."""
        return len(self._buffer)


def _encode_line(frame: dict) -> bytes:
    return jsonline.dumps(frame).encode()


class Lost(Exception):
    """The daemon went away mid-conversation."""


class Silent(Exception):
    """The daemon said nothing within the answer wait, for a request safe to run here."""


class Line:
    """A blocking connection to relayd, one JSON frame (a dict) per line each way."""

    def __init__(self, sock: Any, wait: float, loads: Callable[[bytes], Any] = jsonline.loads, dumps: Callable[[dict], bytes] = _encode_line) -> None:
        self.sock = sock
        self.wait = wait  # for an answer, before relayd counts as hung (layout.ANSWER_WAIT)
        self.loads = loads
        self.dumps = dumps
        self._framer = LineFramer()
        self._frames: list[dict] = []
        self._poller: Any = None

    def send(self, frame: dict) -> None:
        try:
            self.sock.sendall(self.dumps(frame) + b"\n")
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Lost(str(exc)) from None

    def take(self, data: bytes) -> list[dict]:
        """The frames completed by `data` (blank lines skipped); PeerError for a line that is
        not a JSON object or is longer than the protocol allows."""
        try:
            lines = self._framer.feed(data)
        except LineTooLong:
            raise PeerError(f"relayd sent a line longer than {MAX_LINE} bytes") from None
        frames = []
        for line in lines:
            if not line.strip():
                continue
            try:
                frame = self.loads(line)
            except (ValueError, RecursionError):
                frame = None
            if not isinstance(frame, dict):
                raise PeerError("relayd sent something that is not relay's protocol: not a JSON object on one UTF-8 line")
            frames.append(frame)
        return frames

    def receive(self) -> dict:
        """The next frame; TimedOut when nothing came within the socket's timeout."""
        while not self._frames:
            try:
                data = self.sock.recv(RECEIVE_BYTES)
            except TimeoutError:
                raise TimedOut(NO_ANSWER) from None
            except ConnectionResetError as exc:
                raise Lost(str(exc)) from None
            if not data:
                raise Lost("relayd closed the connection")
            self._frames.extend(self.take(data))
        return self._frames.pop(0)

    def reply(self, request_id: int, on_silence: Callable[[], None]) -> tuple[dict, Any]:
        """The response to `request_id` and its result (joined from its parts, if any).
        The first time relayd says nothing for the socket's timeout, `on_silence` decides
        (raise, or go on waiting); the second time is TimedOut."""
        pieces: list[str] = []
        waited = False
        while True:
            try:
                frame = self.receive()
            except TimedOut:
                if waited:
                    raise
                waited = True
                on_silence()
                continue
            kind = frame.get("type")
            if kind == "part" and frame.get("id") == request_id and isinstance(frame.get("data"), str):
                pieces.append(frame["data"])
            elif kind == "response" and frame.get("id") == request_id:
                if not frame.get("ok") or not frame.get("parts"):
                    return frame, frame.get("result")
                if frame["parts"] != len(pieces):
                    raise ProtocolError(f"relayd announced {frame['parts']} parts of a result and sent {len(pieces)}")
                try:
                    return frame, self.loads("".join(pieces))
                except ValueError as exc:
                    raise ProtocolError(f"the parts of a result do not join into JSON: {exc}") from None
            elif kind == "error":
                raise wire_error(frame.get("error"))

    def subscribe(self, topics: list[str], agent: str | None = None, after: str | None = None, scope: str = "host") -> dict:
        """Subscribe on this connection; relayd's `subscribed` answer, or the error it gave
        (events follow: `receive` them)."""
        frame: dict[str, Any] = {"type": "subscribe", "topics": list(topics)}
        if agent is not None:
            frame["agent"] = agent
        if after is not None:
            frame["after"] = after
        if scope != "host":
            frame["scope"] = scope
        self.send(frame)
        answer = self.receive()
        if answer.get("type") == "error":
            raise wire_error(answer.get("error"))
        if answer.get("type") != "subscribed":
            raise PeerError(f"relayd answered subscribe with {answer.get('type')!r}")
        return answer

    def stale(self) -> bool:
        """Between requests relayd sends nothing on a request connection: anything readable
        now is its end (or a closing error frame), so this connection is no use any more."""
        if self._frames or self._framer.pending:
            return True
        if self._poller is None:
            # deferred imports: relayctl's fast path loads this module and must stay small; each of
            # these is needed only by the call that imports it
            import select  # here: only a connection kept between requests needs it

            self._poller = select.poll()
            self._poller.register(self.sock, select.POLLIN)
        return bool(self._poller.poll(0))

    def close(self) -> None:
        self.sock.close()


ABSENT, HUNG = "absent", "hung"  # why `connect` found no relayd to talk to


def connect(socket_path: str, store_dir: str, program: str, wait: float, **codec: Any) -> Line | str:
    """A greeted connection to the relayd serving `store_dir` at `socket_path`; ABSENT when
    none does (no socket, refused, shutting down, serving another store, or a socket of
    another user: see relayd.wire.peer), HUNG when one is there and does not greet within
    `wait` (it saw no request). Raises Unavailable for a socket that cannot be used,
    VersionMismatch for a relayd of another protocol version, PeerError for something that
    is not relayd."""
    if not layout.socket_path_fits(socket_path):
        return ABSENT  # no daemon can listen at such a path: direct mode
    try:
        sock = peer.connect(socket_path, wait)
    except peer.ForeignSocket as refused:
        _refuse(refused)  # nothing was sent to it: for this client, no relayd is there
        return ABSENT
    except (FileNotFoundError, NotADirectoryError, ConnectionRefusedError):
        return ABSENT  # no socket there (or its directory is not one): no daemon
    except TimeoutError:
        return HUNG  # its backlog is full and nobody accepts: hung, and it saw nothing
    except PermissionError:
        if _unreadable(store_dir):  # the socket beside the store: the store is the trouble
            from ..fsio import unreadable_store

            raise unreadable_store(store_dir) from None
        raise Unavailable(f"cannot connect to relayd at {socket_path}: permission denied (the socket or its directory belongs to another user)") from None
    except OSError as exc:
        raise Unavailable(f"cannot connect to relayd at {socket_path}: {exc.strerror or exc}") from None
    from . import handshake  # (here: a command that finds no relayd never greets one)

    line = Line(sock, wait, **codec)
    try:
        line.send(handshake.hello(program))
        ours = handshake.ours(line.receive(), store_dir, program)
    except Lost:
        line.close()
        return ABSENT  # it was shutting down: as good as absent
    except TimedOut:
        line.close()  # accepted by the kernel, never greeted: hung, and no request sent
        return HUNG
    except RelayError:
        line.close()
        raise
    if not ours:
        line.close()
        return ABSENT  # a daemon for another store: not ours
    return line


def with_send_id(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """A send with its message id chosen now, before the first attempt, unless given: when
    relayd vanishes mid-request the send is repeated with that id, through a restarted
    daemon or in direct mode, and the store appends it once."""
    if op != "send" or params.get("id"):
        return params
    from ..ulid import new_ulid

    return dict(params, id=new_ulid())


class Caller:
    """Requests to the relayd serving a store, over one kept connection, with the rules of
    the module's docstring. A subclass says what runs a request on the store itself
    (`_direct`) and which operations change it (`_mutates`)."""

    # Check a connection kept from an earlier call: that relayd has not closed it meanwhile,
    # and, before a request that must not run twice, that it still answers (see `_ask`).
    probe = True

    def __init__(self, store_dir: str, socket_path: str | None = None, *, name: str = "relayctl", timeout: float | None = 30.0, daemon: bool = True, **codec: Any) -> None:
        """`daemon=False`: the caller has just found no relayd for this store (relayctl's
        fast path), so every call runs on the store directly without trying the socket."""
        self.store_dir = os.path.abspath(store_dir)
        self.socket_path = socket_path or layout.default_socket_path(self.store_dir)
        self.name = name
        self.timeout = timeout
        self.codec = codec
        self._line: Line | None = None
        self._last_id = 0
        self._try_daemon = daemon
        self._fresh = False  # the connection was opened (and greeted) for the current call
        self.mode = "direct"  # "daemon" once a call went through relayd
        self.silent = False  # the last call found relayd there but not answering

    # -- what a subclass says ---------------------------------------------------------
    def direct(self, op: str, params: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
        """Run the request on the store in this process: as `ask` answers."""
        raise NotImplementedError

    def _mutates(self, op: str) -> bool:
        return True

    # -- connecting -------------------------------------------------------------------
    def _open(self) -> Line | None:
        """A greeted connection to the daemon serving this store, or None when there is none."""
        # (never below half a second, however short the timeout: relayd reads the inbox for
        # a send older than dedup.LATE_MS, so a copy this client stores after giving up on
        # relayd is found there when relayd wakes up and runs the request too)
        timeout = self.timeout
        wait = layout.ANSWER_WAIT if timeout is None else min(layout.ANSWER_WAIT, max(timeout, 0.5))
        line = connect(self.socket_path, self.store_dir, self.name, wait, **self.codec)
        if line == HUNG:
            self.silent = True
        return line if isinstance(line, Line) else None

    def _daemon(self) -> Line | None:
        """The connection for the current call: the one kept from an earlier call while
        relayd has not closed it, else a new one (`_fresh`), or None."""
        if self._line is not None and not self._fresh and self.probe and self._line.stale():
            self._drop()  # relayd closed it meanwhile (idle, or restarted): open a fresh one
        if self._line is None:
            self._fresh = True
            if self._try_daemon:
                self._line = self._open()
        return self._line

    def _drop(self) -> None:
        if self._line is not None:
            self._line.close()
            self._line = None

    # -- requests ---------------------------------------------------------------------
    def call(self, op: str, params: dict[str, Any] | None = None) -> Any:
        """Run `op` with `params`; returns plain JSON-able data, or raises RelayError."""
        return self.ask(op, params)["result"]

    def ask(self, op: str, params: dict[str, Any] | None = None, **session: Any) -> dict[str, Any]:
        """`call` with a request's session fields (relayd.session: `agent`, `touch`,
        `unread`, `announce`): {"result": ..., "unread": ..., "announced": ...}, the last two
        None unless asked for."""
        try:
            return self._ask(op, params or {}, session)
        finally:
            self._fresh = False  # kept for the next call: from an earlier one then

    def _ask(self, op: str, params: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
        params = with_send_id(op, params)
        repeatable = op == "send" or not self._mutates(op)  # may run again after an unknown outcome
        lost = 0
        if self._try_daemon:
            self.silent = False  # (else what the caller found before it gave up on relayd)
        while True:
            line = self._daemon()
            if line is None:
                return self.direct(op, params, session)
            # (relayd answers a request that waits for announcements that much later)
            line.sock.settimeout(line.wait + session.get("announce", 0))
            if not self._fresh and self.probe and not repeatable:
                # A connection kept from an earlier call: relayd may have stopped since. A
                # request it has not seen can run here, so ask first whether it answers.
                try:
                    line.reply(self._request(line, "version", {}, {}), _give_up)
                except Silent:
                    self._drop()
                    self.silent = True
                    return self.direct(op, params, session)
                except Lost:
                    self._drop()
                    continue  # reconnect: its greeting asks the same
            try:
                request_id = self._request(line, op, params, session)
            except Lost:
                self._drop()  # died since our last call, before seeing this request: safe to redo
                lost += 1
                if lost > RETRIES:
                    return self.direct(op, params, session)
                continue
            try:
                reply, result = line.reply(request_id, lambda: self._patient(line, repeatable))
            except Silent:
                self._drop()  # a late answer on this connection would be misread: close it
                self.silent = True
                return self.direct(op, params, session)
            except Lost:
                self._drop()
                lost += 1
                if repeatable and lost <= RETRIES:
                    continue  # the same request again: a send repeats its id, so it lands once
                if repeatable:
                    return self.direct(op, params, session)
                raise went_away(op) from None
            except TimedOut:
                self._drop()
                raise no_answer(op) from None
            except RelayError:
                self._drop()
                raise
            self.mode = "daemon"
            if not reply.get("ok"):
                raise wire_error(reply.get("error"))
            return {"result": result, "unread": reply.get("unread"), "announced": reply.get("announced")}

    # -- pipelining -------------------------------------------------------------------
    def pipeline(self, requests: Iterable[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], dict[str, Any]]], window: int = WINDOW) -> Iterator[tuple[dict[str, Any], Any]]:
        """Run many requests with up to `window` of them in flight on one connection, and
        yield `(params, outcome)` for each, in the order given: `outcome` is the result, or
        the RelayError that request alone failed with (the others go on). `requests` are
        `(op, params)` or `(op, params, session)`, taken lazily, so a long stream is never
        held whole. A send gets its id here, before it is first sent (`params` yielded
        carry it).

        Nothing is sent twice behind the caller's back: when the connection is lost, each
        request still in flight is yielded as `went_away` (a send among them may or may not
        have been stored: sending it again with the same id stores it at most once), and
        the requests not sent yet go on through a new connection, or on the store here
        when no relayd is left. With no relayd at all every request runs here, in order."""
        window = max(1, min(window, MAX_IN_FLIGHT))
        source = iter(requests)
        pending: list[tuple[int, str, dict[str, Any]]] = []  # sent, not yet answered, oldest first: (id, op, params); a list, as collections costs the fast path's start-up
        answers: dict[int, Any] = {}
        parts: dict[int, list[str]] = {}
        exhausted = False
        try:
            while True:
                line = self._daemon() if not pending else self._line
                if line is None:  # no relayd: the rest runs here, one after the other
                    for request in source:
                        op, params, session = _unpack(request)
                        params = with_send_id(op, params)
                        try:
                            outcome: Any = self.direct(op, params, session)["result"]
                        except RelayError as exc:
                            outcome = exc
                        yield params, outcome
                    return
                batch = []
                while not exhausted and len(pending) < window:
                    try:
                        op, params, session = _unpack(next(source))
                    except StopIteration:
                        exhausted = True
                        break
                    params = with_send_id(op, params)
                    self._last_id = request_id = self._last_id + 1
                    batch.append(line.dumps({"type": "request", "id": request_id, "op": op, "params": params, "parts": True, **session}) + b"\n")
                    pending.append((request_id, op, params))
                if batch:
                    line.sock.settimeout(self.timeout)
                    try:
                        line.sock.sendall(b"".join(batch))
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # what relayd answered before it went is read below; the rest are lost
                if not pending:
                    return
                try:
                    frame = line.receive()
                except (Lost, TimedOut, RelayError) as exc:
                    self._drop()
                    failure = exc if isinstance(exc, RelayError) and not isinstance(exc, TimedOut) else None
                    while pending:
                        request_id, op, params = pending.pop(0)
                        answer = answers.pop(request_id, None)
                        if answer is None:
                            answer = failure or (no_answer(op) if isinstance(exc, TimedOut) else _lost_in_flight(op, params))
                        yield params, answer
                    if isinstance(exc, TimedOut):
                        self._try_daemon = False  # a hung relayd: what was never sent runs here
                        self.silent = True
                    continue
                kind, frame_id = frame.get("type"), frame.get("id")
                if kind == "part" and isinstance(frame_id, int) and isinstance(frame.get("data"), str):
                    parts.setdefault(frame_id, []).append(frame["data"])
                elif kind == "response" and isinstance(frame_id, int):
                    answers[frame_id] = _outcome(line, frame, parts.pop(frame_id, []))
                elif kind == "error":
                    raise wire_error(frame.get("error"))
                while pending and pending[0][0] in answers:
                    request_id, _, params = pending.pop(0)
                    self.mode = "daemon"
                    yield params, answers.pop(request_id)
        finally:
            if pending:
                self._drop()  # abandoned mid-stream (the caller stopped iterating): answers would be misread

    def send_many(self, messages: Iterable[dict[str, Any]], window: int = WINDOW) -> list[Any]:
        """Send each message (the `send` operation's parameters: `agent`, `to`, `body`, ...)
        with many in flight; one outcome each, in order: the send's result, or the
        RelayError that message failed with. Every result is durable, as for `call`."""
        return [outcome for _, outcome in self.pipeline((("send", message) for message in messages), window)]

    def _request(self, line: Line, op: str, params: dict[str, Any], session: dict[str, Any]) -> int:
        self._last_id = request_id = self._last_id + 1
        line.send({"type": "request", "id": request_id, "op": op, "params": params, "parts": True, **session})
        return request_id

    def _patient(self, line: Line, repeatable: bool) -> None:
        """relayd has said nothing for the answer wait: raise Silent when running the
        request here is safe (see the module's docstring), else wait out the rest of the
        timeout."""
        if repeatable:
            raise Silent
        line.sock.settimeout(None if self.timeout is None else max(self.timeout - line.sock.gettimeout(), 0.001))

    def close(self) -> None:
        self._drop()


def _lost_in_flight(op: str, params: dict[str, Any]) -> Unavailable:
    if op == "send":
        return Unavailable(f"relayd went away with send {params['id']} in flight: it may or may not be stored; sent again with the same id, it is stored once", id=params["id"])
    return went_away(op)


def _unpack(request: tuple) -> tuple[str, dict[str, Any], dict[str, Any]]:
    if len(request) == 2:
        return request[0], request[1] or {}, {}
    op, params, session = request
    return op, params or {}, session or {}


def _outcome(line: Line, frame: dict, pieces: list[str]) -> Any:
    """What a pipelined response says: its result (joined from its parts), or its error."""
    if not frame.get("ok"):
        return wire_error(frame.get("error"))
    if not frame.get("parts"):
        return frame.get("result")
    if frame["parts"] != len(pieces):
        return ProtocolError(f"relayd announced {frame['parts']} parts of a result and sent {len(pieces)}")
    try:
        return line.loads("".join(pieces))
    except ValueError as exc:
        return ProtocolError(f"the parts of a result do not join into JSON: {exc}")


def _give_up() -> None:
    raise Silent


def wire_error(error: object) -> RelayError:
    """The error a frame's `error` object names (relayd.errors.from_wire)."""
    return from_wire(error if isinstance(error, dict) else {})


_refused: set[tuple[str, int]] = set()  # (socket, owner) already said by this process


def _refuse(refused: peer.ForeignSocket) -> None:
    """Say once per process and socket that another user's socket was not used; the call
    goes on on the store itself. (A long-running client -- relay-mcp, the web view -- tries
    the socket again at each call, since relayd may have taken its name back meanwhile.)"""
    if (refused.path, refused.uid) in _refused:
        return
    _refused.add((refused.path, refused.uid))
    try:
        sys.stderr.write(f"warning: {refused}; working on the store directly\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no stderr (closed, or None): the store is still used directly


def _unreadable(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except PermissionError:
        return True
    except OSError:
        return False
    return False
