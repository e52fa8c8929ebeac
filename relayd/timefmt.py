"""Timestamps (ISO-8601 UTC with a `Z`), durations such as `90s`, `5m`, `1h30m`, `2d`, and
the short relative forms (`12s ago`, `in 42m`) the human output uses."""

from __future__ import annotations

import time

from .errors import UsageError

# datetime is imported in the functions that use it: the pre-commit guard's check needs
# only passed_test, and the import (datetime.py runs whole before its C half replaces it)
# was a tenth of the hook's start-up. None of these functions is on relayd's hot path
# (messages and events are stamped by now_iso).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime, timedelta

_DURATION = r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)"
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def now() -> datetime:
    # deferred imports: relayctl's fast path loads this module: datetime and re only for the
    # functions that need them
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def to_iso(moment: datetime) -> str:
    from datetime import timezone

    # isoformat truncates to milliseconds as the stored form wants, at half strftime's cost
    # (every message and event is stamped: it showed in relayd's profile).
    return moment.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


_second: tuple[int, str] = (-1, "")  # the last whole second stamped, and its text


def now_iso() -> str:
    """Now, as stored. Every message and event is stamped, many within one second: the
    date and time text is made once a second, the milliseconds each time."""
    global _second
    ms = time.time_ns() // 1_000_000
    second, fraction = divmod(ms, 1000)
    cached, text = _second
    if cached != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second = (second, text)
    return f"{text}.{fraction:03d}Z"


def shown(ts: str) -> str:
    """A stored time as every human-facing output prints it (read, dlq list, hooks, the web
    view): to the minute, with its date, labelled: `2026-11-21 11:52 UTC`."""
    return ts[:16].replace("T", " ") + " UTC" if ts else ""


def iso_seconds(text: str) -> float:
    """Seconds since the epoch of a timestamp; the stored form (`2026-02-16T06:08:00.000Z`)
    is read without datetime, whose import a reserve's one line of output would pay for."""
    if len(text) >= 20 and text[4] == "-" and text[10] == "T" and text[13] == ":" and text.endswith("Z"):
        try:
            year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
            clock = int(text[11:13]) * 3600 + int(text[14:16]) * 60 + float(text[17:-1])
        except ValueError:
            pass
        else:
            if 1 <= month <= 12 and 1 <= day <= 31:
                # Days from 1970-01-01 in the proleptic Gregorian calendar, years counted from March.
                year -= month <= 2
                era, of_era = divmod(year, 400)
                of_year = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
                days = era * 146097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719468
                return days * 86400 + clock
    return parse_iso(text).timestamp()


def parse_iso(text: str) -> datetime:
    """Parse a stored or user-given timestamp; a date alone means its midnight UTC."""
    from datetime import datetime, timezone

    raw = text.strip()
    try:
        moment = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise UsageError(f"not a date or time: {text!r} (use e.g. 2026-02-16 or 2026-02-16T06:08:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def parse_duration(text: str) -> timedelta:
    """`90s`, `5m`, `1h30m`, `2d`; a bare number is seconds."""
    from datetime import timedelta
    import re  # here: `status` and `read` show times through this module, and re costs
    # more start-up than the rest of their imports (tests/client/test_startup_imports.py)

    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        total = float(raw)
    else:
        pos, total = 0, 0.0
        for match in re.finditer(_DURATION, raw):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if not raw or pos != len(raw):
            raise UsageError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h30m, 2d)")
    try:
        return timedelta(seconds=total)
    except OverflowError:
        raise UsageError(f"duration {text!r} is too long") from None


def parse_since(text: str) -> datetime:
    """A duration back from now (`1h`) or an absolute date/time (`2026-02-16`)."""
    try:
        return now() - parse_duration(text)
    except UsageError:
        pass
    try:
        return parse_iso(text)
    except UsageError:
        raise UsageError(f"--since takes a duration (30m, 1h) or a date (2026-02-16), not {text!r}") from None


def short_span(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        hours, rest = divmod(int(seconds), 3600)
        return f"{hours}h{rest // 60}m" if rest >= 60 and hours < 10 else f"{hours}h"
    return f"{int(seconds // 86400)}d"


def ago(moment: datetime, reference: datetime | None = None) -> str:
    return f"{short_span(((reference or now()) - moment).total_seconds())} ago"


def until(moment: datetime, reference: datetime | None = None) -> str:
    return f"in {short_span((moment - (reference or now())).total_seconds())}"


_ISO_LEN = len("2026-02-16T06:08:00.000Z")


def passed_test(reference: datetime | None = None):
    """A test for many stamps against one moment (default now): has this stamp passed?
    relay's own fixed-width stamps compare as text against the moment formatted once; an
    unreadable stamp counts as passed (an expiry nobody can read holds nothing)."""
    text = to_iso(reference) if reference is not None else now_iso()

    def passed(stamp: str) -> bool:
        if len(stamp) == _ISO_LEN and stamp.endswith("Z"):
            return stamp <= text
        try:
            return parse_iso(stamp) <= (reference or parse_iso(text))
        except UsageError:
            return True

    return passed
