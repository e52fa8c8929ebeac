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
