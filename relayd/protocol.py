"""relay's wire protocol on relayd's Unix socket, without any I/O (DESIGN §3, docs/protocol.md).

NDJSON: one JSON object per line, UTF-8, at most `MAX_LINE` bytes including the newline.
Every frame has a `type`. A `Connection` is one side of a conversation: feed it the bytes
that arrived, get frames (or protocol violations) out, and ask it for the bytes of a frame
to send. The daemon and the blocking client share it, and tests drive two of them against
each other in memory.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

from .wire.connection import MAX_LINE as MAX_LINE, LineFramer as LineFramer  # the framing, written once for both sides
from .wire.handshake import VERSION as VERSION  # the version lives with the greeting
from .errors import LineTooLong, ProtocolError, RelayError
from .records import Event

# Topic names as a subscriber may spell them -> the `topic` field of events.jsonl.
TOPICS: dict[str, str] = {
    "inbox": "inbox",
    "reservation": "reservation",
    "reservations": "reservation",
    "command": "command",
    "commands": "command",
    "presence": "presence",
    "agent": "agent",
    "agents": "agent",
    "wake": "wake",
}
ALL_TOPICS = "*"

RequestId = Union[int, str]


_NO_PARAMS = msgspec.Raw(b"{}")


class Frame(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    """Base of every wire message; the `type` field says which one it is."""


class Hello(Frame, tag="hello"):
    """Optional first frame, both ways. The server's answer names its store directory."""

    version: int
    client: str | None = None
    server: str | None = None
    store: str | None = None


class Request(Frame, tag="request"):
    """Run operation `op` (a name from `relayd.ops.table()`) with `params`. `parts`: the
    client takes a result longer than one line as `part` frames (see `Part`).

    The session fields (version 3, relayd.session) ask for an agent's bookkeeping around
    any operation: `touch` its last-seen first, count its `unread` messages after, and
    (`announce`, seconds) wait that long at most for relayd's own triggers to report how
    the recipients of the messages it stored were told; the response carries the answers.

    A received request holds its params as JSON text (`msgspec.Raw`), which
    `relayd.ops.decode_params` decodes once, straight into the operation's own type. A
    client may build one with a dict instead (msgspec encodes what a field holds)."""

    id: RequestId
    op: str
    params: msgspec.Raw = _NO_PARAMS
    parts: bool = False
    agent: str | None = None
    touch: bool = False
    unread: bool = False
    announce: float = 0.0

    def bookkeeping(self) -> bool:
        """Whether the request asks for any session field."""
        return self.touch or self.unread or self.announce > 0


class ErrorBody(msgspec.Struct, omit_defaults=True):
    code: str
    message: str
    details: dict[str, Any] | None = None


class Response(Frame, tag="response"):
    """`parts` > 0: the result came before it in that many `part` frames. `unread` and
    `announced` answer the request's session fields (absent when not asked)."""

    id: RequestId
    ok: bool
    result: Any = None
    error: ErrorBody | None = None
    parts: int = 0
    unread: int | None = None
    announced: list[Any] | None = None


class Part(Frame, tag="part"):
    """A piece of a result too long for one line: the JSON text of the result, cut into
    pieces in order; the `response` with the same id and `parts` follows the last one."""

    id: RequestId
    data: str


class Subscribe(Frame, tag="subscribe"):
    """Start receiving events; `agent` narrows them to one agent, `after` replays first."""

    topics: list[str]
    agent: str | None = None
    after: str | None = None
    scope: Literal["host", "team"] = "host"  # team: other hosts' events too (relayd --bridge)


class Subscribed(Frame, tag="subscribed"):
    """The server's acknowledgement: events follow (replayed ones first)."""

    topics: list[str]
    agent: str | None = None
    scope: Literal["host", "team"] = "host"


class ErrorFrame(Frame, tag="error"):
    """A problem not tied to a request id. `fatal` means the server closes the connection."""

    error: ErrorBody
    fatal: bool = False


# An event on the wire is an `events.jsonl` record plus `"type":"event"`: the same fields,
# derived from `records.Event` so the two can never drift apart.
EventFrame = msgspec.defstruct(
    "EventFrame",
    [
        (f.name, f.type, msgspec.field(default=f.default, name=f.encode_name) if f.encode_name != f.name else f.default)
        for f in msgspec.structs.fields(Event)
    ],
    bases=(Frame,),
    tag="event",
    kw_only=True,
    omit_defaults=True,
    module=__name__,
)

AnyFrame = Union[Hello, Request, Response, Part, Subscribe, Subscribed, ErrorFrame, EventFrame]  # type: ignore[valid-type]

_decoder = msgspec.json.Decoder(AnyFrame)
_encoder = msgspec.json.Encoder()


class Violation(msgspec.Struct, frozen=True):
    """A line that is not a protocol frame. The peer gets an error frame and, when
    `fatal`, the connection is closed (the byte stream can no longer be trusted)."""

    code: str
    message: str
    fatal: bool = True
    request_id: RequestId | None = None


PART_BYTES = 256 * 1024  # JSON text per part: escaped, at most twice that, well inside a line


def encode_result(result: Any) -> bytes:
    return _encoder.encode(result)


def reply_lines(request_id: RequestId, result_json: bytes, parts: bool, unread: int | None = None, announced: list[Any] | None = None) -> bytes | None:
    """The wire lines of a successful response whose encoded result is `result_json`:
    one line when it fits, else (when the client takes them) `part` frames and a closing
    response. None: too long for one line and the client did not ask for parts."""
    head = b'{"type":"response","id":' + _encoder.encode(request_id) + b',"ok":true,"result":'
    tail = b"}\n"
    if unread is not None or announced is not None:
        tail = _encoder.encode(Response(id=0, ok=True, unread=unread, announced=announced)).partition(b',"ok":true')[2] + b"\n"
    if len(head) + len(result_json) + len(tail) <= MAX_LINE:
        return head + result_json + tail
    if not parts:
        return None
    out = []
    start = 0
    while start < len(result_json):
        end = min(start + PART_BYTES, len(result_json))
        while end < len(result_json) and result_json[end] & 0xC0 == 0x80:
            end -= 1  # never cut a UTF-8 character in two
        out.append(encode(Part(id=request_id, data=result_json[start:end].decode())))
        start = end
    out.append(encode(Response(id=request_id, ok=True, parts=len(out), unread=unread, announced=announced)))
    return b"".join(out)


def encode(frame: Frame) -> bytes:
    """One frame as a wire line, newline included."""
    return _encoder.encode(frame) + b"\n"


def encode_event_line(line: bytes) -> bytes:
    """An `events.jsonl` line (`{"id":...}`, no newline) as an event frame, without re-encoding."""
    return b'{"type":"event",' + line[1:] + b"\n"


def decode(line: bytes) -> Frame | Violation:
    """One line (no newline) -> a frame, or the Violation that describes what is wrong."""
    try:
        frame = _decoder.decode(line)
        if type(frame) is Request:
            # params are kept as JSON text, whose strings the decoder only skipped over
            line.decode()
        return frame
    except msgspec.ValidationError as exc:
        return Violation(ProtocolError.code, f"not a protocol frame: {exc}", fatal=False, request_id=_peek_id(line))
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        return Violation(ProtocolError.code, f"not a JSON object on one UTF-8 line: {exc}")
    except RecursionError:
        return Violation(ProtocolError.code, "JSON nested too deeply")


class _JustId(msgspec.Struct):
    id: RequestId | None = None


_id_decoder = msgspec.json.Decoder(_JustId)


def _peek_id(line: bytes) -> RequestId | None:
    """The `id` of a request that failed validation, so its error can carry it."""
    try:
        return _id_decoder.decode(line).id
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None


def error_body(exc: RelayError) -> ErrorBody:
    wire = exc.to_wire()
    details = wire.get("details")
    return ErrorBody(code=exc.code, message=exc.message, details=details if isinstance(details, dict) else None)


def normalize_topics(topics: list[str]) -> list[str]:
    """Subscriber topic names -> event topics; `*` means all. Unknown names are an error."""
    if not topics:
        raise ProtocolError("subscribe needs at least one topic, e.g. [\"inbox\"] (or \"*\" for all)")
    chosen: list[str] = []
    for name in topics:
        if name == ALL_TOPICS:
            return sorted(set(TOPICS.values()))
        topic = TOPICS.get(name.lower()) if isinstance(name, str) else None
        if topic is None:
            known = ", ".join(sorted(set(TOPICS)))
            raise ProtocolError(f"unknown topic {name!r}: use {known} or *", topic=name)
        if topic not in chosen:
            chosen.append(topic)
    return chosen


Role = Literal["client", "server"]


class Connection:
    """One side of a protocol connection, with no I/O of its own.

    `receive_data(bytes)` returns the frames (and violations) found in them;
    `send(frame)` returns the bytes to write. After a fatal violation the connection
    is `closed` and yields nothing more.
    """

    def __init__(self, role: Role, max_line: int = MAX_LINE) -> None:
        self.role = role
        self.framer = LineFramer(max_line)
        self.closed = False
        self.peer_hello: Hello | None = None

    def receive_data(self, data: bytes) -> list[Frame | Violation]:
        if self.closed:
            return []
        out: list[Frame | Violation] = []
        try:
            lines = self.framer.feed(data)
        except LineTooLong as exc:
            self.closed = True
            return [Violation(exc.code, exc.message)]
        for line in lines:
            if not line.strip():
                continue  # blank lines are harmless keep-alives
            item = decode(line)
            if isinstance(item, Violation):
                out.append(item)
                if item.fatal:
                    self.closed = True
                    break
                continue
            if isinstance(item, Hello):
                self.peer_hello = item
            out.append(item)
        return out

    def send(self, frame: Frame) -> bytes:
        return encode(frame)

    def violation_reply(self, violation: Violation) -> bytes:
        """What the server answers a violation with."""
        body = ErrorBody(code=violation.code, message=violation.message)
        if violation.request_id is not None and not violation.fatal:
            return encode(Response(id=violation.request_id, ok=False, error=body))
        return encode(ErrorFrame(error=body, fatal=violation.fatal))
