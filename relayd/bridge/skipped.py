"""Entries of the team's buckets this host ignores: counted, and logged once.

Any host may write what it likes under its own keys, so a damaged entry, or one about
another host than the one whose key it is under, is ignored where it is read. A host that
writes thousands of them must not fill every other host's log either: each (writing
host, reason) is logged the first time only, with the key it was first seen under, and
counted from then on (`counts`, shown by `relayctl status --json` under the bridge).
"""

from __future__ import annotations

import structlog

log = structlog.get_logger()


class Skipped:
    def __init__(self, what: str) -> None:
        self.what = what  # "directory entry", "reservation entry"
        self.counts: dict[str, int] = {}  # "<host>: <reason>" -> entries skipped
        self._logged: set[str] = set()

    def note(self, host: str, reason: str, key: str, counts: dict[str, int] | None = None) -> None:
        """Count one skipped entry (into `counts`, for a tally of one whole read that
        replaces `self.counts`), logging its kind the first time."""
        label = f"{host}: {reason}"
        into = self.counts if counts is None else counts
        into[label] = into.get(label, 0) + 1
        if label not in self._logged:
            self._logged.add(label)
            log.warning(f"skipped a {self.what}; more like it from this host are only counted", host=host, reason=reason, key=key)
