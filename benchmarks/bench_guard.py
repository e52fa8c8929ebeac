"""The git pre-commit guard (relayd.guard): time it adds to a commit (DESIGN §6: <= 50 ms).

A real git repository with 1,000 staged paths and a store with 2,000 active reservations,
1,000 of them in it (bench_coord's mix of directories, globs, single files) and 1,000 in
another repository. The hook is the one a user gets: written by `relayctl guard install`
of a regular install (`pip install .` into a scratch venv, bytecode compiled by pip), run
whole as `git commit` runs it (cwd at the top level, GIT_INDEX_FILE and the rest of git's
environment for hooks), so the whole process is what it adds to a commit:
* clean, index current: no staged path lies in another agent's reservation, though every
  one shares a literal prefix with one (`src/mod12x/...` beside `src/mod12/**`), so each
  is matched; the repository's index (relayd.reservations.guard_index) describes the reservations as
  they are, as on every commit but the first after a reservation changed;
* clean, index rebuilt: the same with the index removed before each run, as on the first
  commit after a change: every reservation file is read, and the index written;
* refused: every path lies in a reservation, 6 in 7 of them someone else's.
Next to it, that interpreter's `python -c pass` and `python -IS -c pass` (the hook's own
flags: isolated, no site), interleaved; and the matching alone, in-process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from relayd import guard, layout
from relayd.reservations.guard_index import SETTLED_NS, held_in, index_name
from relayd.records import Reservation, json_encoder
from relayd.reservations.reserve import reservation_key
from relayd.store import Store
from relayd.timefmt import now, to_iso

from .bench_coord import held_patterns
from .common import Row, bytecode_cached, child_env, median_ms, plain_install, scratch_dir, time_calls

COUNT = 1000
COMMITTER = "agent-0"
TARGET_MS = 50.0
# What `git commit` puts in a pre-commit hook's environment (besides the author's name,
# email and date): with GIT_INDEX_FILE set the hook need not ask git for the top level.
GIT_HOOK_ENV = {"GIT_INDEX_FILE": ".git/index", "GIT_PREFIX": "", "GIT_EDITOR": ":"}


def staged(i: int, clean: bool) -> str:
    """A path inside reservation i's pattern (held_patterns), or beside it when clean."""
    x = "x" if clean else ""
    return ("src/mod{i}{x}/main.py", "pkg/p{i}{x}/x.go", "docs/d{i}{x}.md", "tests/t{i}{x}/a/b_test.py", "web/c{i}{x}/b.ts")[i % 5].format(i=i, x=x)


def _git(repo: str, *args: str) -> None:
    subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)


def _repo(base: str, name: str, clean: bool) -> str:
    repo = os.path.join(base, name)
    _git(base, "init", "-q", name)
    for i in range(COUNT):
        path = os.path.join(repo, staged(i, clean))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(f"{i}\n")
    _git(repo, "add", "-A")
    return os.path.realpath(repo)


def _reserve(store_dir: str, repos: list[str]) -> None:
    stamp = now()
    with Store(store_dir, fsync=False) as store:
        folder = store.top(layout.RESERVATIONS)
        for repo in repos:
            for i, pattern in enumerate(held_patterns(COUNT)):
                r = Reservation(id=f"{i:026d}", agent=f"agent-{i % 7}", pattern=pattern, repo=repo,
                                created_at=to_iso(stamp), expires_at=to_iso(stamp.replace(year=stamp.year + 1)))
                folder.replace(reservation_key(repo, pattern), json_encoder.encode(r) + b"\n", store.sync)


def _settle(store_dir: str) -> None:
    """Wait until the reservations directory is old enough to be indexed (guard_index:
    a directory changed in the last SETTLED_NS is read from its files every time)."""
    changed = os.stat(os.path.join(store_dir, layout.RESERVATIONS)).st_ctime_ns
    time.sleep(max(0.0, (changed + SETTLED_NS - time.time_ns()) / 1e9 + 0.05))


def _interleaved(argvs: dict[str, tuple[list[str], str]], env: dict[str, str], runs: int, before: dict) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
    """Whole processes, round by round (so drift on a busy machine hits all alike); the
    first round fills the bytecode caches and is not counted. `before[name]` runs untimed
    before each of that name's runs. Wall time, and CPU time (user + system, the process's
    own and its children's: the hook's git), which other work on the machine moves less."""
    walls: dict[str, list[float]] = {name: [] for name in argvs}
    cpus: dict[str, list[float]] = {name: [] for name in argvs}
    status: dict[str, int] = {}
    for round_ in range(runs + 1):
        for name, (argv, cwd) in argvs.items():
            if name in before:
                before[name]()
            start = time.perf_counter()
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, waited, usage = os.wait4(proc.pid, 0)
            took = time.perf_counter() - start
            proc.returncode = status[name] = os.waitstatus_to_exitcode(waited)
            if round_:
                walls[name].append(took)
                cpus[name].append(usage.ru_utime + usage.ru_stime)
    return walls, cpus, status


def _reserve_cost(store_dir: str, repo: str, runs: int) -> list[Row]:
    """What writing the index through costs a reserve + release in this store (2,000
    reservations): with the guard in use (its index kept current under the lock) and
    without (no guard/ in the store), interleaved."""
    from relayd import ops

    index_dir = os.path.join(store_dir, layout.GUARD_INDEX)
    parked = index_dir + ".parked"
    samples: dict[bool, list[float]] = {True: [], False: []}
    with Store(store_dir) as store:
        def cycle() -> None:
            ops.call(store, "reserve", {"agent": COMMITTER, "pattern": "bench/extra/**", "repo": repo, "ttl": "1h"})
            ops.call(store, "release", {"agent": COMMITTER, "pattern": "bench/extra/**", "repo": repo})

        for _ in range(runs):
            for guarded in (True, False):
                if not guarded:
                    os.rename(index_dir, parked)
                try:
                    samples[guarded] += time_calls(cycle, 1)
                finally:
                    if not guarded:
                        os.rename(parked, index_dir)
    with_guard, without = median_ms(samples[True]), median_ms(samples[False])
    return [
        Row("guard", f"reserve + release in this store, durable, without the guard (median of {runs})", round(without, 1), "ms"),
        Row("guard", "reserve + release, the guard in use: its index written through under the lock", round(with_guard, 1), "ms", note=f"{with_guard / without:.2f}x without"),
    ]


def run(quick: bool) -> list[Row]:
    runs = 5 if quick else 21
    base = scratch_dir("rb-guard-")
    try:
        store_dir = os.path.join(base, "store")
        clean, refused = _repo(base, "clean", True), _repo(base, "refused", False)
        _reserve(store_dir, [clean, refused])
        python, installed = plain_install()
        relayctl = os.path.join(os.path.dirname(python), "relayctl")
        for repo in (clean, refused):
            subprocess.run([relayctl, "--dir", store_dir, "guard", "install", "--repo", repo], check=True, capture_output=True)
        index = os.path.join(store_dir, layout.GUARD_INDEX, index_name(clean))

        def drop_index() -> None:
            if os.path.exists(index):
                os.unlink(index)

        _settle(store_dir)
        hook = os.path.join(".git", "hooks", "pre-commit")
        with bytecode_cached(child_env(store_dir, RELAY_AGENT=COMMITTER, **GIT_HOOK_ENV)) as env:
            samples, cpu, status = _interleaved({
                "python": ([python, "-c", "pass"], base),
                "python -IS": ([python, "-IS", "-c", "pass"], base),
                "clean": ([hook], clean),
                "clean, index rebuilt": ([hook], clean),
                "refused": ([hook], refused),
            }, env, runs, {"clean, index rebuilt": drop_index})
        if not os.path.exists(index):
            raise RuntimeError("the guard hook wrote no index: the 'index current' rows would measure a rebuild")
        reference, bare = median_ms(samples["python"]), median_ms(samples["python -IS"])
        rows = [
            Row("guard", f"python -c pass (reference: the interpreter of {installed})", round(reference, 1), "ms", note=f"median of {runs}, interleaved with the hook runs below; CPU {median_ms(cpu['python']):.1f} ms"),
            Row("guard", "python -IS -c pass (reference: the same, with the hook's flags)", round(bare, 1), "ms", note=f"CPU {median_ms(cpu['python -IS']):.1f} ms"),
        ]
        for name, expect, situation in (
            ("clean", 0, "clean, index current (every reserve, release and gc rewrites it)"),
            ("clean, index rebuilt", 0, "clean, no index yet (the first commit checked in a repository, or the first within 2 s of a change made outside relay)"),
            ("refused", 1, "refused, index current"),
        ):
            if status[name] != expect:
                raise RuntimeError(f"the guard hook exited {status[name]} for the {name} commit, not {expect}")
            took = median_ms(samples[name])
            rows.append(Row("guard", f"pre-commit hook, {COUNT} reservations x {COUNT} staged paths, {situation}: whole hook process", round(took, 1), "ms", f"<= {TARGET_MS:g} ms", took <= TARGET_MS,
                            note=f"median of {runs}, fastest {min(samples[name]) * 1000:.1f} ms, CPU {median_ms(cpu[name]):.1f} ms; {took / reference:.2f}x python -c pass, {took - bare:.1f} ms over python -IS -c pass"))
        rows += _reserve_cost(store_dir, clean, runs)
        held = held_in(store_dir, clean)
        paths = guard.staged_paths(clean)
        check = time_calls(lambda: guard.blocking(clean, paths, held, COMMITTER), runs)
        rows.append(Row("guard", f"  the matching alone, in-process, warm ({len(held)} reservations in this repo of {2 * COUNT} in the store)", round(median_ms(check), 2), "ms"))
        return rows
    finally:
        shutil.rmtree(base, ignore_errors=True)
