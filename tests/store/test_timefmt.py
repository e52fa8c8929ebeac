"""Stored timestamps: ISO-8601 UTC with milliseconds and a Z, whichever way they are made."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

import pytest

from relayd import timefmt

STORED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.mark.slow
def test_now_iso_is_the_stored_form_of_the_current_time_across_second_boundaries() -> None:
    seen_seconds = set()
    deadline = time.monotonic() + 5
    while len(seen_seconds) < 3 and time.monotonic() < deadline:
        before = datetime.now(timezone.utc)
        stamp = timefmt.now_iso()
        after = datetime.now(timezone.utc)
        assert STORED.fullmatch(stamp), stamp
        moment = timefmt.parse_iso(stamp)
        # Truncated to the millisecond, never rounded up past the moment it was made.
        assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= moment <= after
        assert timefmt.to_iso(moment) == stamp
        seen_seconds.add(stamp[:19])
        time.sleep(0.05)
    assert len(seen_seconds) >= 3  # the cached date text was remade as seconds passed


def test_iso_seconds_reads_the_stored_form_as_datetime_does_and_anything_else_through_it() -> None:
    import random
    from datetime import datetime, timezone

    from relayd.timefmt import iso_seconds, to_iso

    rng = random.Random(20261202)
    for _ in range(2000):
        moment = datetime.fromtimestamp(rng.uniform(-2e9, 7e9), timezone.utc)  # 1906 to 2191, leap years and all
        stored = to_iso(moment)
        assert abs(iso_seconds(stored) - datetime.fromisoformat(stored[:-1] + "+00:00").timestamp()) < 1e-6, stored
    assert iso_seconds("2026-02-16") == datetime(2026, 2, 16, tzinfo=timezone.utc).timestamp()  # not the stored form: parse_iso
    assert iso_seconds("2026-02-16T06:08:00+01:00") == datetime(2026, 2, 16, 5, 8, tzinfo=timezone.utc).timestamp()
