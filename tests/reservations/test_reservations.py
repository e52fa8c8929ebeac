"""File reservations through the real CLI, and races between real processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relayd import ops
from relayd.errors import Conflict
from relayd.reservations.reserve import reservation_key
from relayd.store import Store
from support import inproc
from support.ack_team import Clock


@pytest.fixture
def repo(short_tmp: Path) -> str:
    path = short_tmp / "repo"
    path.mkdir()
    return str(path)


@pytest.fixture
def team(relayctl) -> None:
    relayctl.setup("init", preset="overlord")


@pytest.mark.slow
def test_reserve_conflict_lists_holder_pattern_and_expiry(relayctl, team, repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", repo, "--reason", "bd-42", agent="inferno")
    refused = relayctl("reserve", "src/auth/login.go", "--repo", repo, agent="glacier", check=False)
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in line
    assert "inferno holds src/auth/**" in line and "expires 20" in line
    # Nothing was created for the refused agent.
    listed = json.loads(relayctl("--json", "reservations").stdout)
    assert [(r["agent"], r["pattern"]) for r in listed] == [("inferno", "src/auth/**")]


@pytest.mark.slow
def test_no_conflict_between_disjoint_patterns_or_repos(relayctl, team, repo, short_tmp) -> None:
    relayctl("reserve", "src/a/*", "--repo", repo, agent="inferno")
    relayctl("reserve", "src/b/*", "--repo", repo, agent="glacier")
    other = short_tmp / "other"
    other.mkdir()
    relayctl("reserve", "src/a/*", "--repo", str(other), agent="glacier")
    listed = json.loads(relayctl("--json", "reservations", "--repo", repo).stdout)
    assert sorted(r["pattern"] for r in listed) == ["src/a/*", "src/b/*"]


@pytest.mark.slow
def test_absolute_paths_inside_the_repo_meet_relative_reservations(relayctl, team, repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", repo, agent="inferno")
    refused = relayctl("reserve", f"{repo}/src/auth/login.go", "--repo", repo, agent="glacier", check=False)
    assert refused.returncode == 1 and "inferno holds src/auth/**" in refused.stderr
    held = json.loads(relayctl("--json", "reserve", f"{repo}/docs/intro.md", "--repo", repo, agent="glacier").stdout)
    assert held["reservation"]["pattern"] == "docs/intro.md"
    relayctl("release", f"{repo}/docs/intro.md", "--repo", repo, agent="glacier")
    outside = relayctl("reserve", "/etc/passwd", "--repo", repo, agent="glacier", check=False)
    assert outside.returncode == 2 and "outside the repository" in outside.stderr
    listed = json.loads(relayctl("--json", "reservations", "--repo", repo).stdout)
    assert [(r["agent"], r["pattern"]) for r in listed] == [("inferno", "src/auth/**")]


@pytest.mark.slow
def test_repo_defaults_to_the_current_directory(relayctl, relay_env, team, repo) -> None:
    link = Path(repo).parent / "via-link"
    link.symlink_to(repo)
    proc = subprocess.run(
        [sys.executable, "-m", "relayctl", "--agent", "inferno", "--json", "reserve", "docs/**"],
        cwd=link, env=relay_env, capture_output=True, text=True, check=True,
    )
    assert json.loads(proc.stdout)["reservation"]["repo"] == os.path.realpath(repo)


@pytest.mark.slow
def test_shared_and_exclusive(relayctl, team, repo) -> None:
    relayctl("reserve", "*.go", "--shared", "--repo", repo, agent="inferno")
    relayctl("reserve", "*.go", "--shared", "--repo", repo, agent="glacier")  # shared + shared: fine
    refused = relayctl("reserve", "main.go", "--repo", repo, agent="storm", check=False)
    assert refused.returncode == 1 and "inferno holds **/*.go" in refused.stderr and "glacier holds **/*.go" in refused.stderr
    listed = json.loads(relayctl("--json", "reservations", "--repo", repo).stdout)
    assert sorted((r["agent"], r["exclusive"]) for r in listed) == [("glacier", False), ("inferno", False)]


@pytest.mark.slow
def test_check_reports_without_reserving(relayctl, team, repo) -> None:
    relayctl("reserve", "src/*.py", "--repo", repo, agent="inferno")
    checked = relayctl("--json", "reserve", "src/a*", "--check", "--repo", repo, agent="glacier", check=False)
    assert checked.returncode == 1
    result = json.loads(checked.stdout)
    assert result["reserved"] is False and [c["agent"] for c in result["conflicts"]] == ["inferno"]
    free = relayctl("reserve", "tests/**", "--check", "--repo", repo, agent="glacier")
    assert "free" in free.stdout
    assert len(json.loads(relayctl("--json", "reservations").stdout)) == 1


@pytest.mark.slow
def test_a_pattern_without_a_slash_takes_every_depth_for_reserve_check_and_release(relayctl, team, repo) -> None:
    # seed 004 US-012 and .gitignore: `*.go` is every Go file, `/*.go` the top directory's
    held = relayctl("--json", "reserve", "*.go", "--repo", repo, agent="inferno")
    assert json.loads(held.stdout)["reservation"]["pattern"] == "**/*.go" and held.stderr == ""
    checked = relayctl("reserve", "src/main.go", "--repo", repo, "--check", agent="glacier", check=False)
    assert checked.returncode == 1 and checked.stdout.startswith("src/main.go in ") and "inferno holds **/*.go" in checked.stdout
    refused = relayctl("reserve", "src/main.go", "--repo", repo, agent="glacier", check=False)
    assert refused.returncode == 1 and "inferno holds **/*.go" in refused.stderr
    relayctl("release", "*.go", "--repo", repo, agent="inferno")
    relayctl("reserve", "/*.go", "--repo", repo, agent="inferno")
    assert relayctl("reserve", "src/main.go", "--repo", repo, "--check", agent="glacier").stdout.startswith("free")
    taken = relayctl("reserve", "main.go", "--repo", repo, "--check", agent="glacier", check=False)  # main.go at any depth
    assert taken.returncode == 1 and "inferno holds /*.go" in taken.stdout
    listed = json.loads(relayctl("--json", "reservations", "--repo", repo).stdout)
    assert [r["pattern"] for r in listed] == ["/*.go"]


@pytest.mark.slow
def test_a_reservation_stored_before_the_any_depth_reading_is_read_with_it_and_released(relayctl, team, repo, store_dir) -> None:
    """A file written by the earlier version: `*.go` in normal form, then meant the top
    directory only. It is read as written: every Go file; `release *.go` finds it."""
    from relayd import layout
    from relayd.reservations.reserve import reservation_key

    stored = {"id": "01JMHF3XYZ0000000000000000", "agent": "inferno", "pattern": "*.go", "repo": repo, "exclusive": True, "created_at": "2026-01-01T00:00:00.000Z", "expires_at": "2099-01-01T00:00:00.000Z"}
    (Path(store_dir) / layout.RESERVATIONS / reservation_key(repo, "*.go")).write_text(json.dumps(stored))
    checked = relayctl("reserve", "src/main.go", "--repo", repo, "--check", agent="glacier", check=False)
    assert checked.returncode == 1 and "inferno holds *.go" in checked.stdout
    released = json.loads(relayctl("--json", "release", "*.go", "--repo", repo, agent="inferno").stdout)
    assert [r["pattern"] for r in released["released"]] == ["*.go"]
    assert relayctl("reserve", "src/main.go", "--repo", repo, agent="glacier").returncode == 0


def test_expired_reservations_never_conflict(relayctl, team, repo, relay_env, store_dir: Path) -> None:
    """Through relayd (its server in this process, its store on a clock the test moves on)."""
    clock = Clock(time.time())
    with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], clock=clock):
        relayctl("reserve", "README.md", "--ttl", "1s", "--repo", repo, agent="inferno")
        refused = relayctl("reserve", "README.md", "--repo", repo, agent="glacier", check=False)
        assert refused.returncode == 1 and "inferno holds **/README.md" in refused.stderr  # (while it holds)
        clock.now += 1.001  # its second has passed
        relayctl("reserve", "README.md", "--repo", repo, agent="glacier")
        listed = json.loads(relayctl("--json", "reservations", "--repo", repo).stdout)
    assert [r["agent"] for r in listed] == ["glacier"]


@pytest.mark.slow
def test_only_the_owner_releases(relayctl, team, repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", repo, agent="inferno")
    refused = relayctl("release", "src/auth/**", "--repo", repo, agent="glacier", check=False)
    assert refused.returncode == 1 and "held by inferno" in refused.stderr
    assert len(json.loads(relayctl("--json", "reservations").stdout)) == 1
    missing = relayctl("release", "nothing/**", "--repo", repo, agent="inferno", check=False)
    assert missing.returncode == 1 and "no reservation" in missing.stderr
    relayctl("release", "src/auth/**", "--repo", repo, agent="inferno")
    assert json.loads(relayctl("--json", "reservations").stdout) == []


@pytest.mark.slow
def test_force_overrides_and_release_all(relayctl, team, repo) -> None:
    relayctl("reserve", "src/**", "--repo", repo, agent="inferno")
    forced = relayctl("reserve", "src/x.go", "--force", "--repo", repo, agent="glacier")
    assert "overriding" in forced.stderr
    relayctl("reserve", "docs/**", "--repo", repo, agent="glacier")
    released = json.loads(relayctl("--json", "release", "--all", agent="glacier").stdout)["released"]
    assert sorted(r["pattern"] for r in released) == ["docs/**", "src/x.go"]
    assert [r["agent"] for r in json.loads(relayctl("--json", "reservations").stdout)] == ["inferno"]


@pytest.mark.slow
def test_renewing_your_own_reservation(relayctl, team, repo) -> None:
    first = json.loads(relayctl("--json", "reserve", "src/**", "--ttl", "10m", "--repo", repo, agent="inferno").stdout)
    again = json.loads(relayctl("--json", "reserve", "src/**", "--ttl", "2h", "--repo", repo, agent="inferno").stdout)
    assert again["renewed"] and again["reservation"]["id"] == first["reservation"]["id"]
    assert again["reservation"]["expires_at"] > first["reservation"]["expires_at"]


@pytest.mark.slow
def test_file_format_and_key(relayctl, team, repo, store_dir) -> None:
    relayctl("reserve", "./src/auth/", "--repo", repo, "--reason", "bd-42", agent="inferno")
    files = [p for p in (store_dir / "reservations").iterdir() if p.suffix == ".json"]
    assert [p.name for p in files] == [reservation_key(repo, "src/auth/**")]
    record = json.loads(files[0].read_text())
    assert set(record) == {"id", "agent", "pattern", "repo", "exclusive", "reason", "created_at", "expires_at"}
    assert record["pattern"] == "src/auth/**" and record["exclusive"] is True
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["src/[ab", "../outside/**", ""])
def test_bad_patterns_get_one_error_line(relayctl, team, repo, bad) -> None:
    proc = relayctl("reserve", bad, "--repo", repo, agent="inferno", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_status_shows_reservations(relayctl, team, repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", repo, agent="inferno")
    relayctl("reserve", "tests/**", "--shared", "--repo", repo, agent="inferno")
    out = relayctl("status", "--reservations").stdout
    assert "RESERVATIONS (2 active, 0 expired)" in out
    assert "src/auth/**" in out and "exclusive" in out and "shared" in out and "repo" in out


# -- races between processes ------------------------------------------------------------


@pytest.mark.slow
def test_two_cli_processes_racing_for_one_pattern(relayctl, relay_env, team, repo) -> None:
    for round_ in range(5):
        pattern = f"race{round_}/**"
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "relayctl", "--agent", agent, "reserve", pattern, "--repo", repo],
                env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for agent in ("inferno", "glacier")
        ]
        for p in procs:
            p.communicate(timeout=60)
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 1], round_
    listed = json.loads(relayctl("--json", "reservations").stdout)
    assert len(listed) == 5


def _racer(store_dir: str, agent: str, pattern: str, repo: str, start, results) -> None:
    store = Store(store_dir)
    start.wait()
    try:
        ops.call(store, "reserve", {"agent": agent, "pattern": pattern, "repo": repo})
        results.put((agent, True))
    except Conflict:
        results.put((agent, False))


@pytest.mark.slow
def test_overlapping_patterns_raced_by_many_processes(store_dir, repo) -> None:
    """Different but overlapping patterns, reserved at the same instant: one winner a round."""
    Store(str(store_dir)).root_dir()
    ctx = multiprocessing.get_context("spawn")
    patterns = ["src/**", "src/*.py", "src/a*", "**/a.py", "src/[a-c].py", "src/?.py"]
    for round_ in range(4):
        repo_round = f"{repo}/r{round_}"
        start = ctx.Event()
        results = ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(str(store_dir), f"agent-{i}", pattern, repo_round, start, results)) for i, pattern in enumerate(patterns)]
        for p in procs:
            p.start()
        time.sleep(0.3)  # let them all reach the start line
        start.set()
        outcomes = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert sum(won for _, won in outcomes) == 1, outcomes


def _next_tick() -> None:
    """Return once the coarse clock file times come from has moved on (at most a tick, a
    few ms): a change made after this cannot carry the times of one made before."""
    coarse = 5  # CLOCK_REALTIME_COARSE (Linux), the kernel's clock for file times; Python names it not
    start = time.clock_gettime_ns(coarse)
    while time.clock_gettime_ns(coarse) == start:
        pass


def test_a_settled_reservations_directory_is_read_once_and_every_change_is_seen(store_dir, repo) -> None:
    """relayd keeps the records of a reservations directory that had settled; a change by
    another process (direct mode) is seen at the next check."""
    from relayd import ops
    from relayd.store import Store

    def holders(store, path: str) -> list[str]:
        return [c["agent"] for c in ops.call(store, "reserve", {"agent": "newcomer", "pattern": path, "repo": repo, "check": True})["conflicts"]]

    later = lambda: time.time() + 60  # noqa: E731  (relayd's view: the directory settled long ago)
    with Store(str(store_dir), clock=later) as daemon_side, Store(str(store_dir)) as other:
        ops.call(other, "reserve", {"agent": "inferno", "pattern": "src/a/**", "repo": repo})
        assert holders(daemon_side, "src/a/x.py") == ["inferno"]
        reads = []
        records = daemon_side.records
        daemon_side.records = lambda *a: reads.append(a) or records(*a)  # type: ignore[method-assign]
        assert holders(daemon_side, "src/a/y.py") == ["inferno"] and reads == []  # kept, not read again
        _next_tick()
        ops.call(other, "reserve", {"agent": "glacier", "pattern": "src/b/**", "repo": repo})
        assert holders(daemon_side, "src/b/x.py") == ["glacier"] and len(reads) == 1
        _next_tick()
        ops.call(other, "release", {"agent": "inferno", "pattern": "src/a/**", "repo": repo})
        assert holders(daemon_side, "src/a/x.py") == [] and len(reads) == 2
    with Store(str(store_dir)) as fresh:  # a directory changed just now is read every time
        reads = []
        records = fresh.records
        fresh.records = lambda *a: reads.append(a) or records(*a)  # type: ignore[method-assign]
        holders(fresh, "src/b/x.py")
        holders(fresh, "src/b/x.py")
        assert len(reads) == 2


@pytest.mark.slow
@pytest.mark.parametrize("pattern, ttl", [("**", "1h"), ("*", "1h"), ("**/*", "30m"), ("src/**", "366d"), ("src/**", "25h")])
def test_a_reservation_of_everything_or_longer_than_a_day_needs_force(relayctl, team, repo, pattern: str, ttl: str) -> None:
    refused = relayctl("reserve", pattern, "--ttl", ttl, "--repo", repo, agent="inferno", check=False)
    assert refused.returncode != 0 and len(refused.stderr.splitlines()) == 1 and "--force" in refused.stderr
    assert ("covers every file in" in refused.stderr) if pattern != "src/**" else ("longer than a day" in refused.stderr)
    assert json.loads(relayctl("--json", "reservations").stdout) == []  # nothing held
    forced = relayctl("reserve", pattern, "--ttl", ttl, "--repo", repo, "--force", agent="inferno")
    stored = {"*": "**/*"}.get(pattern, pattern)  # kept in the form that reads the same everywhere (a bare * is any depth)
    assert [r["pattern"] for r in json.loads(relayctl("--json", "reservations").stdout)] == [stored]
    if pattern != "src/**":
        assert f"holds every file in {os.path.realpath(repo)} until 20" in forced.stderr


@pytest.mark.slow
def test_a_day_and_a_narrow_pattern_need_no_force(relayctl, team, repo) -> None:
    relayctl("reserve", "src/*.py", "--ttl", "1d", "--repo", repo, agent="inferno")
    relayctl("reserve", "docs/**", "--repo", repo, agent="inferno")
