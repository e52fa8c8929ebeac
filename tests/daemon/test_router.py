"""What relayd makes of each frame (relayd.daemon.router) in memory: no socket, no loop,
no store. Each test hands the router frames as a client's bytes decode to them and checks
the plan the socket server would carry out."""

from __future__ import annotations

import msgspec
import pytest

from relayd import ops
from relayd.daemon.router import Answer, AwaitAnnouncement, JoinBatch, JoinEvents, Refuse, Router, Run, TeamWide, Violated
from relayd.errors import UsageError
from relayd.protocol import Connection, ErrorFrame, Hello, Response
from relayd.wire import handshake

SEND = b'{"agent":"alpha","to":["beta"],"body":"hi"}'


def router(*, batching: bool = True, team_wide: tuple[str, ...] = ()) -> Router:
    return Router(ops.table(), batching=batching, team_wide=set(team_wide), store_root="/srv/relay")


def frames(*lines: bytes) -> list[object]:
    """What relayd's side of the protocol makes of these lines."""
    return list(Connection("server").receive_data(b"".join(line + b"\n" for line in lines)))


def request(op: str, params: bytes = b"{}", **fields: object) -> object:
    extra = b"".join(b',"%s":%s' % (name.encode(), msgspec.json.encode(value)) for name, value in fields.items())
    [frame] = frames(b'{"type":"request","id":7,"op":"%s","params":%s%s}' % (op.encode(), params, extra))
    return frame


def test_a_send_joins_the_batch_of_the_next_fsync_round() -> None:
    plan = router().route(request("send", SEND), queued=True)
    assert isinstance(plan, JoinBatch) and plan.op.name == "send" and plan.request.id == 7
    assert not plan.after_queued  # (it joins the queue behind the others: nothing to run first)


def test_without_group_commit_a_send_runs_at_once() -> None:
    plan = router(batching=False).route(request("send", SEND))
    assert isinstance(plan, Run) and plan.call.op is not None and plan.call.op.name == "send"


def test_a_send_waiting_for_its_announcements_runs_alone_after_what_was_queued() -> None:
    plan = router().route(request("send", SEND, announce=2.5), queued=True)
    assert isinstance(plan, AwaitAnnouncement) and plan.after_queued
    assert plan.call.request.announce == 2.5 and plan.call.bookkeeping


def test_a_request_that_is_not_batchable_runs_now_after_the_queued_ones_it_may_read() -> None:
    plan = router().route(request("read", b'{"agent":"beta"}'), queued=True)
    assert isinstance(plan, Run) and plan.after_queued and plan.call.op is not None and plan.call.op.name == "read"
    assert not plan.call.bookkeeping
    assert not router().route(request("read", b'{"agent":"beta"}'), queued=False).after_queued


def test_session_fields_run_around_the_operation() -> None:
    plan = router().route(request("read", b'{"agent":"beta"}', agent="beta", touch=True, unread=True))
    assert isinstance(plan, Run) and plan.call.bookkeeping


@pytest.mark.parametrize("op", ["register", "reserve", "release"])
def test_with_a_bridge_team_operations_are_decided_team_wide(op: str) -> None:
    plan = router(team_wide=("register", "reserve", "release")).route(request(op, announce=1.0), queued=True)
    assert isinstance(plan, TeamWide) and plan.request.op == op and plan.after_queued
    alone = router().route(request(op))  # (no bridge: this host decides)
    assert isinstance(alone, Run) and alone.call.op is not None and alone.call.op.name == op


def test_a_version_2_session_call_runs_the_operation_its_params_name() -> None:
    plan = router().route(request("session_call", b'{"op":"read","params":{"agent":"beta"}}'))
    assert isinstance(plan, Run) and plan.call.op is None  # (session.legacy reads the operation from its params)


@pytest.mark.parametrize("announce", [0.0, 3.0])
def test_an_unknown_operation_is_refused_in_its_turn_naming_the_known_ones(announce: float) -> None:
    plan = router().route(request("sned", SEND, announce=announce), queued=True)
    assert isinstance(plan, Refuse) and plan.after_queued and plan.request.id == 7
    assert isinstance(plan.error, UsageError) and "unknown operation 'sned'" in str(plan.error) and "send" in str(plan.error)


def test_the_greeting_is_answered_in_the_clients_version_naming_the_store() -> None:
    [hello] = frames(b'{"type":"hello","version":%d,"client":"old 1"}' % handshake.OLDEST)
    plan = router().route(hello, queued=True)
    assert isinstance(plan, Answer) and plan.after_queued
    assert isinstance(plan.frame, Hello) and plan.frame.version == handshake.OLDEST and plan.frame.store == "/srv/relay"
    [newer] = frames(b'{"type":"hello","version":%d}' % (handshake.VERSION + 5))
    answer = router().route(newer)
    assert isinstance(answer, Answer) and isinstance(answer.frame, Hello) and answer.frame.version == handshake.VERSION


def test_a_subscription_starts_the_connections_events() -> None:
    [subscribe] = frames(b'{"type":"subscribe","topics":["inbox"],"agent":"beta"}')
    plan = router().route(subscribe)
    assert isinstance(plan, JoinEvents) and plan.subscribe.topics == ["inbox"] and plan.subscribe.agent == "beta"


def test_a_line_that_is_no_frame_is_answered_as_a_violation() -> None:
    [violation] = frames(b"not json")
    plan = router().route(violation, queued=True)
    assert isinstance(plan, Violated) and plan.violation.code == "protocol_error" and plan.after_queued


def test_a_frame_only_relayd_sends_is_refused_with_its_kind_named() -> None:
    plan = router().route(Response(id=1, ok=True))
    assert isinstance(plan, Answer) and isinstance(plan.frame, ErrorFrame)
    assert plan.frame.error.code == "protocol_error" and "Response" in plan.frame.error.message and not plan.frame.fatal
