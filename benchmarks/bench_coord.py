"""Coordination: checking a reservation against 1000 active ones (DESIGN §6: <= 1 ms).

Rows:
* the conflict check itself (one new pattern against 1000 held in the same repo, the
  decoded records in memory, compiled patterns cached as in a running daemon) -- the
  DESIGN target; once with globs new to the process (cold) and once warm;
* the whole `reserve --check` operation in-process, which also lists the reservations
  (the older goal, seed 004: checking reservations in < 5 ms): as relayd runs it, against
  a directory that has settled (its records kept, relayd.reservations.reserve.load_all), and
  right after a change, when all 1000 files are read;
* the same as a `relayctl` process, for reference.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

from relayd import ops
from relayd.reservations import globs, guard_index
from relayd.records import Reservation
from relayd.reservations.reserve import find_conflicts
from relayd.store import Store
from relayd.timefmt import now, to_iso

from .common import PYTHON, Row, child_env, median_ms, scratch_dir, time_calls, time_process

REPO = tempfile.gettempdir()  # a directory that exists: relayctl reserve refuses a --repo that does not
ACTIVE = 1000


def held_patterns(count: int) -> list[str]:
    """A realistic mix: directories, globs inside a package, single files, deep test trees."""
    shapes = ("src/mod{i}/**", "pkg/p{i}/*.go", "docs/d{i}.md", "tests/t{i}/**/*_test.py", "web/c{i}/[a-m]*.ts")
    return [shapes[i % len(shapes)].format(i=i) for i in range(count)]


CANDIDATES = [
    "src/mod500/handler.go",  # conflicts with src/mod500/**
    "pkg/p7/*.go",
    "src/new/**",
    "**/*.md",  # wildcard at the front: the literal-prefix filter cannot help
    "web/c4/[k-z]*.ts",
]


def _reservations(count: int) -> list[Reservation]:
    stamp = now()
    return [
        Reservation(
            id=f"{i:026d}", agent=f"agent-{i % 7}", pattern=pattern, repo=REPO,
            created_at=to_iso(stamp), expires_at=to_iso(stamp.replace(year=stamp.year + 1)),
        )
        for i, pattern in enumerate(held_patterns(count))
    ]


def _candidate(pattern: str) -> Reservation:
    stamp = to_iso(now())
    return Reservation(id="x", agent="newcomer", pattern=pattern, repo=REPO, created_at=stamp, expires_at=stamp)


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    held = _reservations(ACTIVE)
    candidates = [_candidate(p) for p in CANDIDATES]

    # Cold: every compiled glob and every pair decision is new, as in a fresh relayctl process.
    cold = []
    for candidate in candidates:
        for cache in (globs.compile_glob, globs.normalize, globs._ends, globs._live_at_segment_start, globs._intersect):
            cache.cache_clear()
        globs._overlap_cache.clear()
        start = time.perf_counter()
        find_conflicts(candidate, held)
        cold.append(time.perf_counter() - start)
    rows.append(Row("coord", f"conflict check vs {ACTIVE} active, cold (median of {len(CANDIDATES)} patterns)", median_ms(cold), "ms", note=f"max {max(cold) * 1000:.2f} ms"))

    rounds = 20 if quick else 200
    warm = []
    for candidate in candidates:
        warm += time_calls(lambda c=candidate: find_conflicts(c, held), rounds)
    per_pattern = {p: statistics.median(time_calls(lambda c=c: find_conflicts(c, held), rounds)) * 1000 for p, c in zip(CANDIDATES, candidates)}
    worst = max(per_pattern, key=per_pattern.get)
    ok = median_ms(warm) <= 1.0
    rows.append(Row("coord", f"conflict check vs {ACTIVE} active, warm", median_ms(warm), "ms", "<= 1 ms", ok, note=f"slowest pattern {worst}: {per_pattern[worst]:.3f} ms"))

    # The whole operation, files included.
    base = scratch_dir()
    try:
        store_dir = os.path.join(base, "store")
        with Store(store_dir, fsync=False) as store:
            for i, pattern in enumerate(held_patterns(ACTIVE)):
                ops.call(store, "reserve", {"agent": f"agent-{i % 7}", "pattern": pattern, "repo": REPO, "ttl": "1d"})
        check = {"agent": "newcomer", "pattern": "src/mod500/handler.go", "repo": REPO, "check": True}
        with Store(store_dir) as store:
            changed = time_calls(lambda: ops.call(store, "reserve", check), 10 if quick else 50)
        time.sleep(guard_index.SETTLED_NS / 1e9)  # relayd's usual case: nothing changed for a while
        with Store(store_dir) as store:
            samples = time_calls(lambda: ops.call(store, "reserve", check), 10 if quick else 50)
        rows.append(Row("coord", f"reserve --check op vs {ACTIVE} reservations, settled directory (relayd)", median_ms(samples), "ms", "< 5 ms", median_ms(samples) < 5.0))
        rows.append(Row("coord", f"reserve --check op, {ACTIVE} reservation files read (just changed)", median_ms(changed), "ms", note="every file read: the first check after a change"))
        argv = [PYTHON, "-m", "relayctl", "--agent", "newcomer", "reserve", "src/new/**", "--repo", REPO, "--check"]
        proc = time_process(argv, env=child_env(store_dir), count=3 if quick else 10)
        rows.append(Row("coord", f"relayctl reserve --check process, {ACTIVE} reservations", median_ms(proc), "ms", note="whole process, for reference"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows
