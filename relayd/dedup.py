"""Idempotent sends: a message id already in the recipient's inbox is not appended again.

A client chooses a send's id (a ULID) before the first attempt and repeats it when it
retries, so a send interrupted by a crash is done once, whatever the crash cut short.
The check is per recipient inbox, within a window (`config.json` key `dedup.window`,
default 10 minutes), under the inbox lock, so two retries racing each other append once.

Where an id is looked up:
* direct mode reads the inbox backwards from its end and stops at the first line older
  than the window or older than the id itself (a ULID carries the time it was made, and
  no copy of a message is written before its id exists), so a fresh send looks at the
  last few lines only;
* relayd keeps `RecentIds`, the ids appended within the window (seeded from the inbox
  tails at start), and reads the inbox only for an id it holds: a retry, or for an id
  made more than `LATE_MS` before: a request that waited (in a stopped relayd's socket,
  say) while its client, getting no answer, stored it directly -- an append relayd may
  not have seen in the event log yet.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from datetime import datetime, timezone

import msgspec

from . import layout
from .errors import RelayError, UsageError
from .fsio import Dir, Syncer, lines_backward, regions_holding
from .records import Message, first_line_ts, message_decoder
from .timefmt import to_iso
from .ulid import is_ulid, ulid_time_ms

REMEMBER = 50_000  # ids relayd keeps (~10 MiB); past that it reads the inbox for an id made before the last one forgotten
# A copy's `ts` is stamped from the same wall clock a little after its id was made (by the
# client, on this machine), so nothing older than the id needs to be looked at; the slack
# covers millisecond rounding and a small clock step back. It bounds what a fresh send
# scans: at 10 000 sends a second, about a hundred lines.
_CLOCK_SLACK_MS = 10
# A send is "late" when its id is older than this: a client gives up waiting for relayd no
# sooner than this (layout.ANSWER_WAIT is far longer), so a younger id cannot have been
# stored by another route yet. Fresh sends, nearly all of them, skip the inbox read.
LATE_MS = 200


def check_id(text: str) -> str:
    """A client-chosen message id: a ULID (normalised to upper case)."""
    if not is_ulid(text):
        raise UsageError(f"id {text[:40]!r} is not a ULID (26 characters of Crockford base32, e.g. 01JMHF3XYZ0000000000000000)")
    return text.upper()


def not_before_iso(message_id: str, now_ms: int, window: float) -> str:
    """The oldest write time at which a copy of `message_id` can count as a duplicate."""
    oldest = max(ulid_time_ms(message_id) - _CLOCK_SLACK_MS, now_ms - int(window * 1000))
    return ms_to_iso(oldest)


def ms_to_iso(ms: int) -> str:
    return to_iso(datetime.fromtimestamp(ms / 1000, timezone.utc))


def find_recent(agent: Dir, message_id: str, not_before_iso: str, sync: Syncer) -> Message | None:
    """The message with this id in the agent's inbox files, looking back no further than
    `not_before_iso` (messages are appended in time order). Call under the inbox lock.

    A copy found is made durable before it is reported: the attempt that wrote it may
    have died before its fsync."""
    for name in (layout.INBOX, layout.INBOX_ROTATED):
        try:
            fd = agent.open(name, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            found, older = _scan_back(fd, message_id.encode(), not_before_iso)
            if found is not None:
                sync.file(fd)
        finally:
            os.close(fd)
        if found is not None or older:
            return found
    return None


def _scan_back(fd: int, needle: bytes, not_before: str) -> tuple[Message | None, bool]:
    """(the message, or None; whether a line older than `not_before` was reached).
    Complete lines only: a torn tail is cut away by the next append, so a copy there is no
    copy (counting it would drop the retry that should replace it)."""
    message_id = needle.decode()
    for region, hits in regions_holding(fd, needle):
        for _, line in hits:
            try:
                message = message_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # a corrupt line is not a message
            if message.id == message_id:
                if message.ts < not_before:
                    return None, True  # a copy from before the window: not a duplicate
                return message, True
        if first_line_ts(region) < not_before:
            return None, True
    return None, False


class RecentIds:
    """relayd's memory of the (recipient, id) pairs appended within the window.

    `may_hold` answers False only when a duplicate is impossible: the pair is not here
    and nothing appended within the window was forgotten (evicted to stay under `limit`).
    """

    def __init__(self, window: float, limit: int = REMEMBER) -> None:
        self.window_ms = int(window * 1000)
        self.limit = limit
        self._seen: OrderedDict[str, int] = OrderedDict()  # "agent/id" -> write time, ms
        self.complete_since_ms = 0  # every append at or after this time is remembered
        # Events of messages this process appended, until the event log echoes them back;
        # any other inbox event is a write by another process (direct mode) to remember.
        self._own_events: set[str] = set()

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, agent: str, message_id: str, when_ms: int) -> None:
        key = f"{agent}/{message_id}"
        self._seen[key] = when_ms
        self._seen.move_to_end(key)
        self._prune(when_ms)

    def wrote(self, event_ids: list[str]) -> None:
        if len(self._own_events) > self.limit:
            self._own_events.clear()  # echoes lost (the log was reset): start over
        self._own_events.update(event_ids)

    def observed(self, event_id: str, agent: str, message_id: str, now_ms: int) -> None:
        """An inbox message event from the log: remember it unless this process wrote it."""
        if event_id in self._own_events:
            self._own_events.discard(event_id)
        else:
            self.add(agent, message_id, now_ms)

    def may_hold(self, agent: str, message_id: str, now_ms: int) -> bool:
        if f"{agent}/{message_id}" in self._seen:
            return True
        made_ms = ulid_time_ms(message_id)
        if now_ms - made_ms > LATE_MS:
            return True  # late: its client may have stored it itself meanwhile
        # No copy is written before its id is made: one made since the last forgotten
        # append would be remembered. (Past `limit` ids, a busy pipelining client's sends
        # would otherwise each read the inbox back to their id's time.)
        return self.complete_since_ms > max(now_ms - self.window_ms, made_ms - _CLOCK_SLACK_MS)

    def _prune(self, now_ms: int) -> None:
        horizon = now_ms - self.window_ms
        seen = self._seen
        while seen:
            key, when = next(iter(seen.items()))
            if when >= horizon and len(seen) <= self.limit:
                break
            del seen[key]
            if when >= horizon:
                self.complete_since_ms = max(self.complete_since_ms, when + 1)

    def seed(self, agents: list[tuple[str, Dir]], now_ms: int, since_iso: str) -> None:
        """Remember what the inboxes received within the window (relayd start)."""
        self.complete_since_ms = now_ms - self.window_ms
        found: list[str] = []
        for name, agent in agents:
            for file_name in (layout.INBOX, layout.INBOX_ROTATED):
                try:
                    fd = agent.open(file_name, os.O_RDONLY)
                except (FileNotFoundError, RelayError):
                    continue  # absent, or planted: the send path refuses it as well
                try:
                    older = _recent_lines(fd, since_iso.encode(), lambda m: found.append(f"{name}/{m.id}"))
                finally:
                    os.close(fd)
                if older:
                    break
        for key in found:
            self._seen[key] = now_ms  # kept a little longer than needed: harmless
        self._prune(now_ms)


def _recent_lines(fd: int, not_before: bytes, add) -> bool:
    """Pass each message written at or after `not_before` to `add`; True when an older
    line was reached (so an older file need not be read)."""
    for _, line in lines_backward(fd):
        try:
            message = message_decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if message.ts.encode() < not_before:
            return True
        add(message)
    return False
