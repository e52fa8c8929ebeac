"""The wire protocol as a pure object: two peers talking in memory, no sockets."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relayd import ops, protocol
from relayd.errors import ProtocolError
from relayd.protocol import Connection, ErrorFrame, Hello, Request, Response, Subscribe, Violation
from relayd.records import Event, json_encoder


class Pair:
    """A client and a server Connection wired back to back."""

    def __init__(self) -> None:
        self.client = Connection("client")
        self.server = Connection("server")

    def to_server(self, frame: protocol.Frame, split: int | None = None) -> list:
        data = self.client.send(frame)
        if split is None:
            return self.server.receive_data(data)
        return self.server.receive_data(data[:split]) + self.server.receive_data(data[split:])

    def to_client(self, frame: protocol.Frame) -> list:
        return self.client.receive_data(self.server.send(frame))


def test_request_and_response_round_trip_with_the_same_id():
    pair = Pair()
    [request] = pair.to_server(Request(id="a-7", op="send", params={"agent": "bob", "to": ["eve"], "body": "hi"}))
    assert (request.id, request.op) == ("a-7", "send")
    # The server keeps params as their JSON text, decoded once into the operation's own type.
    assert ops.decode_params(ops.lookup("send"), request.params) == ops.decode_params(ops.lookup("send"), {"agent": "bob", "to": ["eve"], "body": "hi"})
    [response] = pair.to_client(Response(id=request.id, ok=True, result={"messages": []}))
    assert response.id == "a-7" and response.ok and response.result == {"messages": []}


def test_hello_carries_version_and_store():
    pair = Pair()
    [hello] = pair.to_server(Hello(version=1, client="relay-mcp"))
    assert hello.version == 1 and pair.server.peer_hello == hello
    [answer] = pair.to_client(Hello(version=1, server="relayd 0.1.0", store="/s"))
    assert protocol.encode(answer) == b'{"type":"hello","version":1,"server":"relayd 0.1.0","store":"/s"}\n'


@pytest.mark.parametrize("split", [1, 5, 17, 30])
def test_a_frame_split_anywhere_arrives_once(split):
    pair = Pair()
    frames = pair.to_server(Subscribe(topics=["inbox"], agent="inferno"), split=split)
    assert frames == [Subscribe(topics=["inbox"], agent="inferno")]


def test_pipelined_frames_in_one_chunk_keep_their_order():
    server = Connection("server")
    data = b"".join(protocol.encode(Request(id=i, op="version")) for i in range(50))
    assert [f.id for f in server.receive_data(data)] == list(range(50))


def test_event_frames_are_the_log_records_plus_type():
    event = Event(id="01J0000000000000000000000A", ts="2026-01-01T00:00:00.000Z", topic="inbox", agent="inferno", message_id="01J0000000000000000000000B", from_="storm")
    line = json_encoder.encode(event)
    wire = protocol.encode_event_line(line)
    assert msgspec.json.decode(wire) == {"type": "event", **msgspec.json.decode(line)}
    [frame] = Connection("client").receive_data(wire)
    assert isinstance(frame, protocol.EventFrame) and frame.agent == "inferno" and frame.from_ == "storm"


def test_a_line_over_the_limit_is_fatal_and_nothing_more_is_taken():
    server = Connection("server", max_line=64)
    [violation] = server.receive_data(b"x" * 65)
    assert isinstance(violation, Violation) and violation.code == "line_too_long" and violation.fatal
    assert server.closed and server.receive_data(protocol.encode(Request(id=1, op="version"))) == []
    assert isinstance(msgspec.json.decode(server.violation_reply(violation)), dict)


def test_a_line_exactly_at_the_limit_is_accepted():
    frame = protocol.encode(Request(id=1, op="version", params={"pad": ""}))
    padded = frame[:-3] + b" " * 10 + frame[-3:]
    server = Connection("server", max_line=len(padded))
    assert len(server.receive_data(padded)) == 1


@pytest.mark.parametrize(
    "line",
    [b"\xff\xfe{}", b'{"type":"request","id":1,"op":"send","params":{"body":"\xff\xfe"}}', b'{"type":"request","id":1,"op":"x","params":{"a":NaN}}', b'{"type":"request","id":1,"op":"\\ud800"}', b'{"type":"request","id":1,"op":"version","params":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}", b"\x00\x01\x02"],
    ids=["invalid-utf8", "invalid-utf8-in-string", "nan", "lone-surrogate", "deep-nesting", "binary"],
)
def test_undecodable_lines_are_fatal_violations(line):
    server = Connection("server")
    [violation] = server.receive_data(line + b"\n")
    assert isinstance(violation, Violation) and violation.fatal and server.closed
    reply = msgspec.json.decode(server.violation_reply(violation))
    assert reply["type"] == "error" and reply["fatal"] is True and reply["error"]["code"] == "protocol_error"


def test_valid_json_of_the_wrong_shape_is_answered_with_its_id_and_is_not_fatal():
    server = Connection("server")
    [violation] = server.receive_data(b'{"type":"request","id":9,"params":{}}\n')
    assert not violation.fatal and violation.request_id == 9
    reply = msgspec.json.decode(server.violation_reply(violation))
    assert reply == {"type": "response", "id": 9, "ok": False, "error": {"code": "protocol_error", "message": violation.message}}
    assert not server.closed


def test_topics_accept_singular_plural_and_star():
    assert protocol.normalize_topics(["inbox", "reservations", "commands"]) == ["inbox", "reservation", "command"]
    assert protocol.normalize_topics(["reservation", "reservations"]) == ["reservation"]
    assert set(protocol.normalize_topics(["*"])) == {"inbox", "reservation", "command", "presence", "agent", "wake"}
    with pytest.raises(ProtocolError):
        protocol.normalize_topics(["mail"])
    with pytest.raises(ProtocolError):
        protocol.normalize_topics([])


def test_error_frames_decode_on_the_client():
    [frame] = Connection("client").receive_data(protocol.encode(ErrorFrame(error=protocol.ErrorBody(code="permission_denied", message="no"), fatal=True)))
    assert isinstance(frame, ErrorFrame) and frame.fatal and frame.error.code == "permission_denied"


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_arbitrary_bytes_never_raise(chunks):
    server = Connection("server", max_line=256)
    for chunk in chunks:
        for item in server.receive_data(chunk):
            assert isinstance(item, (protocol.Frame, Violation))
