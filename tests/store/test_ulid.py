"""Message ids: ULIDs that sort in the order they were made, even within one millisecond."""

from __future__ import annotations

import re
import time

from relayd.ulid import is_ulid, new_ulid, ulid_time_ms

CROCKFORD = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


def test_ids_made_in_a_burst_strictly_increase() -> None:
    ids = [new_ulid() for _ in range(20_000)]  # many share a millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(CROCKFORD.fullmatch(i) and is_ulid(i) for i in ids[:100])


def test_id_carries_its_creation_time() -> None:
    before = time.time_ns() // 1_000_000
    made = new_ulid()
    after = time.time_ns() // 1_000_000
    assert before <= ulid_time_ms(made) <= after


def test_a_clock_stepping_back_does_not_reorder_ids() -> None:
    first = new_ulid()
    earlier = new_ulid(now_ms=ulid_time_ms(first) - 5_000)
    assert earlier > first


def test_encoding_matches_the_ulid_spec_for_known_values() -> None:
    # The spec's example time and the extremes of the 80 random bits: other ULID tools
    # must read our ids (IGNITE interop, bridges), so the alphabet and bit layout are fixed.
    from relayd.ulid import _encode

    assert _encode(1469918176385 << 80)[:10] == "01ARYZ6S41"
    assert _encode((1 << 128) - 1) == "7" + "Z" * 25
    assert _encode(0) == "0" * 26
    assert _encode(1) == "0" * 25 + "1"
    assert _encode(31 << 5) == "0" * 24 + "Z0"
