"""relayd's per-connection state (relayd.daemon.peerstate) in memory: no socket, no loop.

Each test plays what the server tells the state and checks what the state tells the
server to do with the socket's read watch, and whether bytes may be written now.
"""

from __future__ import annotations

import pytest

from relayd.daemon.peerstate import PeerState, Reading
from relayd.protocol import Connection, MAX_LINE, Violation

KEEP, RESUME, PAUSE = Reading.KEEP, Reading.RESUME, Reading.PAUSE


def started(limit: int = 4) -> PeerState:
    state = PeerState(limit)
    assert state.start() is RESUME and state.watching
    return state


def test_a_new_connection_is_read_and_settled() -> None:
    state = started()
    assert state.settled() and state.write_now() and state.start() is KEEP


def test_a_client_that_never_reads_its_replies_stops_being_read() -> None:
    """Back-pressure: replies that cannot be written pile up to the outbox limit, then the
    connection is no longer read; writing them out reads it again."""
    state = started(limit=3)
    assert [state.reply_queued(durable_later=True) for _ in range(3)] == [KEEP, KEEP, PAUSE]
    assert not state.watching and state.unanswered == 3 and not state.settled()
    assert state.replies_written(1, were_waiting=1) is RESUME
    assert state.unanswered == 2 and state.watching
    assert state.replies_written(2, were_waiting=2) is KEEP and state.settled()


def test_a_socket_that_takes_less_pauses_reading_until_the_backlog_went_out() -> None:
    state = started()
    state.reply_queued(durable_later=False)
    assert state.write_now()
    assert state.sent_short() is PAUSE  # the rest waits for the drain task
    assert state.replies_written(1, were_waiting=0) is KEEP  # written to the backlog: still paused
    assert not state.write_now() and not state.settled()
    # a reply handled meanwhile does not overtake the backlog
    state.reply_queued(durable_later=False)
    assert state.replies_written(1, were_waiting=0) is KEEP
    assert state.backlogged() is KEEP and state.backlog == 2
    assert state.drain_took() is KEEP  # still being written: still paused
    assert state.drained() is RESUME and state.write_now() and state.settled()


def test_close_while_writing_is_final_and_settles_once_the_backlog_went_out() -> None:
    state = started()
    state.reply_queued(durable_later=False)
    state.sent_short()
    state.replies_written(1, were_waiting=0)
    assert state.finish() is KEEP and state.finished  # the peer hung up (already paused)
    assert not state.settled()  # what it was sent still goes out (a half-closed client reads it)
    assert state.drained() is KEEP and not state.watching  # never read again
    assert state.settled()


def test_finishing_while_reading_pauses_and_nothing_resumes_it() -> None:
    state = started(limit=2)
    assert state.finish() is PAUSE
    state.reply_queued(durable_later=False)
    assert state.replies_written(1, were_waiting=0) is KEEP and not state.watching
    assert state.start() is KEEP


def test_an_oversized_frame_finishes_the_connection_after_its_error_is_written() -> None:
    """The protocol object closes on a line over MAX_LINE; the server queues the error frame
    and finishes the state; the error still goes out, nothing more is read."""
    conn, state = Connection("server"), started()
    [violation] = conn.receive_data(b"x" * (MAX_LINE + 1))
    assert isinstance(violation, Violation) and violation.fatal and violation.code == "line_too_long"
    state.reply_queued(durable_later=False)
    assert conn.closed and state.finish() is PAUSE
    assert not state.settled() and state.replies_written(1, were_waiting=0) is KEEP and state.settled()
    assert not state.watching


def test_a_team_decision_holds_later_frames_and_reading() -> None:
    state = started()
    state.reply_queued(durable_later=True)
    assert state.deciding_started() is PAUSE
    with pytest.raises(RuntimeError):
        state.deciding_started()
    state.deciding_done()
    assert state.replies_written(1, were_waiting=1) is RESUME
    with pytest.raises(RuntimeError):
        state.deciding_done()


def test_events_go_straight_out_only_when_nothing_is_ahead_of_them() -> None:
    state = started()
    assert not state.event_now()  # the pump is busy (replaying): events queue behind it
    state.pump_waiting = True
    assert state.event_now()
    state.sent_short()
    assert not state.event_now() and not state.pump_waiting  # and stay queued until the pump is idle again
    state.drained()
    assert not state.event_now()


def test_a_subscriber_is_dropped_once() -> None:
    state = started()
    assert state.drop() and not state.drop() and state.slow


def test_impossible_inputs_are_refused() -> None:
    state = started()
    with pytest.raises(RuntimeError):
        state.replies_written(1, were_waiting=0)  # nothing was queued
    state.sent_short()
    with pytest.raises(RuntimeError):
        state.sent_short()  # the socket is the drain task's while it runs
