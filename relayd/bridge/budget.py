"""What each other host may make this one store: mail per clock hour, counted per sending host.

A bridged host with valid credentials can send valid mail from its own agents as fast as
NATS carries it, and this host would drain it as fast into its inboxes (and, unread, into
`dead_letter/`). So every message a host's mail brings is charged to that host, by count
and by bytes (the message as it came), in windows of one clock hour (UTC). A message over
the host's budget is not stored and not acknowledged: the receiver leaves it in JetStream
(a negative acknowledgement, redelivered when the next hour starts), where the stream's
cap per pair of hosts (`relayctl bridge provision --max-queued`) then refuses more from that
host. Mail of the other hosts, and local mail, goes on as before.

The same window bounds the records of refused mail each host can make this one write
(`refusals`): past `refusals_per_hour` they are only counted.

The clock is injected (wall seconds): the windows are tested without waiting an hour.
Counts live in memory; a restarted relayd starts a fresh window for every host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from relayd.config import BudgetConfig

HOUR = 3600.0


@dataclass
class HostCounts:
    """What one sending host made this host do: in the current hour and since relayd started."""

    window: int = -1  # the hour (seconds since the epoch // 3600) the `hour_*` counts are of
    hour_messages: int = 0
    hour_bytes: int = 0
    hour_refusals: int = 0  # refusal records written this hour
    stored: int = 0
    stored_bytes: int = 0
    held: int = 0  # deliveries left in JetStream over the budget (one message may count again next hour)
    refused: int = 0
    refused_unrecorded: int = 0  # refused beyond refusals_per_hour: counted, not written
    told: set[str] = field(default_factory=set)  # what was logged of this host in this hour ("held", "refused")
    over: set[str] = field(default_factory=set)  # "held": the host met its budget in this hour


class Budget:
    def __init__(self, limits: BudgetConfig | None = None, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits or BudgetConfig()
        self.clock = clock
        self.hosts: dict[str, HostCounts] = {}

    def _counts(self, host: str) -> HostCounts:
        counts = self.hosts.setdefault(host, HostCounts())
        window = int(self.clock() // HOUR)
        if counts.window != window:
            counts.window, counts.hour_messages, counts.hour_bytes, counts.hour_refusals = window, 0, 0, 0
            counts.told.clear()
            counts.over.clear()
        return counts

    def take(self, host: str, size: int) -> bool:
        """Charge one message of `size` bytes to `host`; False (nothing charged, `held`
        counted) when it would pass the host's budget for this hour."""
        counts = self._counts(host)
        # Once one message waits, so does every later one of this hour, even one small
        # enough to fit: a host's mail is stored in the order it came.
        if "held" in counts.over or counts.hour_messages + 1 > self.limits.messages_per_hour or counts.hour_bytes + size > self.limits.bytes_per_hour:
            counts.over.add("held")
            counts.held += 1
            return False
        counts.hour_messages += 1
        counts.hour_bytes += size
        counts.stored += 1
        counts.stored_bytes += size
        return True

    def refund(self, host: str, size: int) -> None:
        """Take back a charge whose message was not stored after all (the append failed)."""
        counts = self._counts(host)
        counts.hour_messages = max(0, counts.hour_messages - 1)
        counts.hour_bytes = max(0, counts.hour_bytes - size)
        counts.stored = max(0, counts.stored - 1)
        counts.stored_bytes = max(0, counts.stored_bytes - size)

    def first(self, host: str, what: str) -> bool:
        """True the first time in this hour that `what` ("held", "refused") happened to
        `host`'s mail: it is logged then, and only counted after."""
        counts = self._counts(host)
        if what in counts.told:
            return False
        counts.told.add(what)
        return True

    def refusal(self, host: str) -> bool:
        """Count one refused message of `host`; True when its record is to be written (within
        `refusals_per_hour`), False when it is only counted."""
        counts = self._counts(host)
        counts.refused += 1
        if counts.hour_refusals >= self.limits.refusals_per_hour:
            counts.refused_unrecorded += 1
            return False
        counts.hour_refusals += 1
        return True

    def wait(self) -> float:
        """Seconds until the next hour begins (when held mail is tried again), at least 1."""
        now = self.clock()
        return max(1.0, (now // HOUR + 1) * HOUR - now)

    def status(self) -> dict:
        """Per sending host, for `relayctl status --json` (bridge `from_hosts`)."""
        shown = {}
        for host in sorted(self.hosts):
            c = self._counts(host)
            shown[host] = {
                "this_hour": {"messages": c.hour_messages, "bytes": c.hour_bytes, "refusals_recorded": c.hour_refusals},
                "stored": c.stored,
                "stored_bytes": c.stored_bytes,
                "held": c.held,
                "refused": c.refused,
                "refused_unrecorded": c.refused_unrecorded,
            }
        return shown
