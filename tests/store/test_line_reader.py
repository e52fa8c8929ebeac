"""The one NDJSON line reader (`relayd.fsio`): complete lines forward and backward, a torn
tail never taken as a line, a line longer than the chunk read whole -- and the readers that
use it (the event log at start-up, idempotent sends) taking only complete lines too."""

from __future__ import annotations

import os

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from relayd import ops
from relayd.daemon.events import EventLog, Hub
from relayd.fsio import blocks_forward, complete_end, complete_lines, line_start_at, lines_backward, regions_backward, regions_holding
from relayd.inbox.read import read_all
from relayd.records import Message, json_encoder
from relayd.store import Store
from relayd.timefmt import now_iso
from relayd.ulid import new_ulid

lines_st = st.lists(st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"x")), max_size=30)
torn_st = st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"y"))
chunk_st = st.integers(min_value=1, max_value=64)


def opened(tmp_path_factory, data: bytes) -> int:
    path = tmp_path_factory.mktemp("r") / "f"
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(lines=lines_st, torn=torn_st, chunk=chunk_st)
def test_regions_cover_the_complete_lines_backwards_and_never_split_one(tmp_path_factory, lines, torn, chunk) -> None:
    whole = b"".join(line + b"\n" for line in lines)
    fd = opened(tmp_path_factory, whole + torn)
    try:
        assert complete_end(fd) == len(whole)
        regions = [(offset + begin, data[begin:]) for offset, data, begin in regions_backward(fd, complete_end(fd), chunk, chunk * 4)]
    finally:
        os.close(fd)
    offsets = [offset for offset, _ in regions]
    assert offsets == sorted(offsets, reverse=True)  # last region first
    assert b"".join(region for _, region in reversed(regions)) == whole
    for offset, region in regions:
        assert whole[offset : offset + len(region)] == region
        assert offset == 0 or whole[offset - 1 : offset] == b"\n"  # starts a line


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(lines=lines_st, torn=torn_st, chunk=chunk_st)
def test_both_directions_give_the_same_complete_lines_at_the_same_ends(tmp_path_factory, lines, torn, chunk) -> None:
    data = b"".join(line + b"\n" for line in lines) + torn
    expected, end = [], 0
    for line in lines:
        end += len(line) + 1
        expected.append((end, line))
    fd = opened(tmp_path_factory, data)
    try:
        assert list(complete_lines(fd, 0, chunk=chunk)) == expected  # the torn tail is not a line
        assert list(lines_backward(fd, chunk)) == [(e, line) for e, line in reversed(expected) if line]
        blocks = list(blocks_forward(fd, 0, chunk=chunk))
        assert b"".join(block for _, block in blocks) == data[: complete_end(fd)]
        assert all(block.endswith(b"\n") for _, block in blocks)
    finally:
        os.close(fd)


@settings(max_examples=200, deadline=None)
@given(lines=lines_st, torn=torn_st, at=st.integers(min_value=0, max_value=2000))
def test_a_position_inside_a_line_moves_to_the_next_line_start(tmp_path_factory, lines, torn, at) -> None:
    data = b"".join(line + b"\n" for line in lines) + torn
    at = min(at, len(data))
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    fd = opened(tmp_path_factory, data)
    try:
        assert line_start_at(fd, at) == min([s for s in starts if s >= at], default=len(data))
    finally:
        os.close(fd)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.sampled_from([b"", b"ab", b"xaby", b"zz", b"b" * 50]), max_size=40), torn=torn_st, chunk=chunk_st)
def test_a_byte_search_from_the_end_finds_every_complete_line_holding_the_needle(tmp_path_factory, lines, torn, chunk) -> None:
    data = b"".join(line + b"\n" for line in lines) + torn + b"ab"
    expected, end = [], 0
    for line in lines:
        end += len(line) + 1
        if b"ab" in line:
            expected.append((end, line))
    fd = opened(tmp_path_factory, data)
    try:
        found = [hit for _, hits in regions_holding(fd, b"ab", chunk, chunk * 4) for hit in hits]
    finally:
        os.close(fd)
    assert found == expected[::-1]  # the torn tail holds the needle too, and is no line


def test_a_line_longer_than_the_chunk_is_read_whole_not_cut(tmp_path_factory) -> None:
    long = b"x" * 1000
    fd = opened(tmp_path_factory, b"a\n" + long + b"\nb\n")
    try:
        assert [line for _, line in complete_lines(fd, 0, chunk=16)] == [b"a", long, b"b"]
        assert [line for _, line in lines_backward(fd, first=16, most=16)] == [b"b", long, b"a"]
    finally:
        os.close(fd)


def event_line(n: int) -> bytes:
    return b'{"id":"%s","ts":"2026-11-24T03:00:00.000Z","topic":"presence","agent":"a%d"}\n' % (new_ulid().encode(), n)


@pytest.mark.slow
def test_relayd_opens_a_large_event_log_with_a_torn_tail_at_its_end_without_reading_it_all(short_tmp, monkeypatch) -> None:
    """At start-up the event follower begins after the last complete line. A torn last line
    (a writer killed mid-append, or still writing) used to make it read the whole log."""
    root = short_tmp / "store"
    root.mkdir()
    log_path = root / "events.jsonl"
    earlier = b"".join(event_line(n) for n in range(200_000))  # ~19 MiB of events already published
    last = event_line(-1)
    log_path.write_bytes(earlier + last[:40])  # ... and the start of one still being written
    read = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        data = real_pread(fd, size, offset)
        read.append(len(data))
        return data

    delivered = []
    events = EventLog(str(root), Hub(), when_durable=lambda publish: publish(), on_event=delivered.append)
    monkeypatch.setattr(os, "pread", counting_pread)
    events.start_at_end()
    monkeypatch.setattr(os, "pread", real_pread)
    try:
        assert sum(read) < 1 << 20, f"start-up read {sum(read)} bytes of a {len(earlier)}-byte log"
        with open(log_path, "ab") as fh:
            fh.write(last[40:])  # the line is finished
        events.read_new()
        # Only the line finished after start-up is published: none of the earlier ones is replayed.
        assert [e.agent for e in delivered] == ["a-1"]
    finally:
        os.close(events.fd)


def test_a_send_retried_after_a_write_torn_before_its_newline_is_stored(store_dir) -> None:
    """A crash can cut an append just before its newline: the line is not a message (readers
    skip it, the next append cuts it away), so retrying the send with its id must store it."""
    with Store(str(store_dir)) as store:
        for name in ("alice", "bob"):
            ops.call(store, "register", {"name": name})
        chosen = new_ulid()
        torn = Message(id=chosen, ts=now_iso(), from_="alice", to="bob", subject="deploy done", body="deploy done")
        with open(store_dir / "agents" / "bob" / "inbox.jsonl", "ab") as fh:
            fh.write(json_encoder.encode(torn))  # everything but the newline
        ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": "deploy done", "id": chosen})
        stored = read_all(store, "bob")
    assert [m.id for m in stored.messages] == [chosen] and not stored.corrupt
