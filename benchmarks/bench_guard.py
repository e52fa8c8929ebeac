"""The git pre-commit guard (relayd.guard): time it adds to a commit (DESIGN §6: <= 50 ms).

A real git repository with 1,000 staged paths and a store with 1,000 active reservations in
it (bench_coord's mix of directories, globs, single files); the hook that `relayctl guard
install` writes is run as git runs it (cwd at the top level, the index staged), whole
process, twice:
* clean: no staged path lies in another agent's reservation, though every one shares a
  literal prefix with one (`src/mod12x/...` beside `src/mod12/**`), so each is matched;
* refused: every path lies in a reservation, 6 in 7 of them someone else's.
Next to it, this interpreter's `python -c pass` and the check alone, in-process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from relayd import guard, layout
from relayd.records import Reservation, json_encoder, reservation_decoder
from relayd.reservations import reservation_key
from relayd.store import Store
from relayd.timefmt import now, to_iso

from .bench_coord import held_patterns
from .common import PYTHON, Row, child_env, median_ms, scratch_dir, time_calls

COUNT = 1000
COMMITTER = "agent-0"


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


def _interleaved(argvs: dict[str, tuple[list[str], str]], env: dict[str, str], runs: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Whole processes, round by round (so drift on a busy machine hits all alike); the
    first round fills the bytecode caches and is not counted."""
    samples: dict[str, list[float]] = {name: [] for name in argvs}
    status: dict[str, int] = {}
    for round_ in range(runs + 1):
        for name, (argv, cwd) in argvs.items():
            start = time.perf_counter()
            status[name] = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
            if round_:
                samples[name].append(time.perf_counter() - start)
    return samples, status


def run(quick: bool) -> list[Row]:
    runs = 5 if quick else 21
    base = scratch_dir("rb-guard-")
    try:
        store_dir = os.path.join(base, "store")
        clean, refused = _repo(base, "clean", True), _repo(base, "refused", False)
        _reserve(store_dir, [clean, refused])
        for repo in (clean, refused):
            guard.install(repo, store_dir, PYTHON)
        env = child_env(store_dir, RELAY_AGENT=COMMITTER)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        hook = os.path.join(".git", "hooks", "pre-commit")
        samples, status = _interleaved({
            "python": ([PYTHON, "-c", "pass"], base),
            "clean": ([hook], clean),
            "refused": ([hook], refused),
        }, env, runs)
        reference = median_ms(samples["python"])
        rows = [Row("guard", "python -c pass, this venv's interpreter (reference)", round(reference, 1), "ms", note="interleaved with the hook runs below")]
        for name, expect in (("clean", 0), ("refused", 1)):
            if status[name] != expect:
                raise RuntimeError(f"the guard hook exited {status[name]} for the {name} commit, not {expect}")
            took = median_ms(samples[name])
            rows.append(Row("guard", f"pre-commit hook, {COUNT} reservations x {COUNT} staged paths, {name}", round(took, 1), "ms", "<= 50 ms", took <= 50.0, note=f"median of {runs}, whole hook process; {took / reference:.2f}x python -c pass"))
        with Store(store_dir) as store:
            held = [r for _, r in store.records(layout.RESERVATIONS, reservation_decoder)]
        paths = guard.staged_paths(clean)
        check = time_calls(lambda: guard.blocking(clean, paths, held, COMMITTER), runs)
        rows.append(Row("guard", f"  the matching alone, in-process ({len(held)} reservations read, {COUNT} of them in this repo)", round(median_ms(check), 2), "ms"))
        return rows
    finally:
        shutil.rmtree(base, ignore_errors=True)
