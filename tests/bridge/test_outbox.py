"""The bridge's local outbox (`relayd.remote`): what a crash can leave, and what the
forwarder reads from it. No NATS here: these are the store-side rules."""

from __future__ import annotations

import os
import random

import pytest

from relayd import layout, remote
from relayd.errors import Unavailable
from relayd.records import Message
from relayd.store import Store


def message(n: int, to: str = "bob") -> Message:
    return Message(id=f"01M8{n:022d}", ts="2026-11-23T08:00:00.000Z", from_="alice", to=to, subject=f"m{n}", body=f"m{n}")


@pytest.fixture
def store(store_dir):
    with Store(str(store_dir)) as opened:
        yield opened


def outbox_path(store: Store) -> str:
    return os.path.join(store.root, layout.BRIDGE, layout.OUTBOX)


def test_entries_come_out_in_order_and_the_cursor_passes_only_what_was_forwarded(store):
    remote.append_outbox(store, "beta", [message(1), message(2)])
    remote.append_outbox(store, "gamma", [message(3, to="carol")])
    entries, end, bad = remote.pending(store)
    assert [(e.host, e.message.id) for _, e in entries] == [("beta", message(1).id), ("beta", message(2).id), ("gamma", message(3).id)]
    assert bad == 0 and remote.backlog(store) == 3
    remote.write_cursor(store, entries[0][0])  # only the first was acknowledged
    assert remote.backlog(store) == 2
    assert [e.message.id for _, e in remote.pending(store)[0]] == [message(2).id, message(3).id]
    remote.write_cursor(store, end)
    assert remote.pending(store) == ([], None, 0) and remote.backlog(store) == 0


def test_a_torn_tail_is_not_an_entry_and_the_next_append_repairs_it(store):
    remote.append_outbox(store, "beta", [message(1)])
    with open(outbox_path(store), "ab") as fh:
        fh.write(b'{"host":"beta","message":{"id":"01M8TORN')  # a crash mid-write
    entries, _, bad = remote.pending(store)
    assert [e.message.id for _, e in entries] == [message(1).id] and bad == 0
    remote.append_outbox(store, "beta", [message(2)])
    assert [e.message.id for _, e in remote.pending(store)[0]] == [message(1).id, message(2).id]


def test_a_damaged_line_is_skipped_and_counted_not_forwarded_forever(store):
    remote.append_outbox(store, "beta", [message(1)])
    with open(outbox_path(store), "ab") as fh:
        fh.write(b"not json\n")
    remote.append_outbox(store, "beta", [message(2)])
    entries, end, bad = remote.pending(store)
    assert [e.message.id for _, e in entries] == [message(1).id, message(2).id] and bad == 1
    remote.write_cursor(store, end)
    assert remote.backlog(store) == 0


def test_compaction_empties_only_a_fully_forwarded_outbox(store):
    remote.append_outbox(store, "beta", [message(1), message(2)])
    entries, end, _ = remote.pending(store)
    remote.write_cursor(store, entries[0][0])
    assert remote.compact(store) is False and remote.backlog(store) == 1
    remote.write_cursor(store, end)
    assert remote.compact(store) is True
    assert os.path.getsize(outbox_path(store)) == 0 and remote.backlog(store) == 0
    remote.append_outbox(store, "beta", [message(3)])
    assert [e.message.id for _, e in remote.pending(store)[0]] == [message(3).id]


def test_a_cursor_past_the_end_after_a_crash_in_compaction_forwards_from_the_start(store):
    remote.append_outbox(store, "beta", [message(1)])
    _, end, _ = remote.pending(store)
    remote.write_cursor(store, end)
    fresh = outbox_path(store) + ".new"
    open(fresh, "wb").close()
    os.replace(fresh, outbox_path(store))  # compaction put a new file in place, then the process died
    remote.append_outbox(store, "beta", [message(2)])
    assert [e.message.id for _, e in remote.pending(store)[0]] == [message(2).id]


def test_direct_mode_on_a_bridged_store_refuses_remote_names_and_team_decisions(store):
    assert remote.recipient_host(store, "bob") is None  # never bridged: just unknown
    remote.write_state(store, remote.BridgeState(host="alpha", url="nats://127.0.0.1:4222", agents={"bob": "beta"}))
    with pytest.raises(Unavailable, match="bob is an agent on host beta.*relayd --bridge nats://127.0.0.1:4222 --host-name alpha"):
        remote.recipient_host(store, "bob")
    with pytest.raises(Unavailable, match="reserving files is decided team-wide"):
        remote.refuse_unbridged(store, "reserving files")
    remote.forget_state(store)
    assert remote.recipient_host(store, "bob") is None
    remote.refuse_unbridged(store, "reserving files")


def test_reconnect_backoff_is_jittered_and_capped():
    pytest.importorskip("nats")
    from relayd.bridge.link import backoff

    rng = random.Random(7)
    for attempt in range(12):
        delays = [backoff(attempt, base=0.2, cap=5.0, rng=rng) for _ in range(200)]
        assert all(0 <= d <= min(5.0, 0.2 * 2**attempt) for d in delays)
        assert max(delays) > 0.5 * min(5.0, 0.2 * 2**attempt)  # spread over the range, not fixed
