"""The guard's per-repository index (relayd.reservations.guard_index) is a cache: it never changes an answer.

Real git repositories and a real store, reservations made by the store's own operations;
the check is the hook's (relayd.guard.check). `moment` stands in for now where the test
needs the index written at once: a directory changed in the last two seconds is never
indexed (file times tick coarsely), and the tests do not sleep through that.
"""

from __future__ import annotations

import binascii
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from relayd import guard, layout, ops
from relayd.reservations.guard_index import MAGIC, index_name
from relayd.jsonline import dumps, loads
from relayd.store import Store
from support.ack_team import Clock

LATER = timedelta(seconds=10)  # past the settling time of a directory changed just now


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=60)


@pytest.fixture
def repo(short_tmp: Path) -> Path:
    path = short_tmp / "repo"
    path.mkdir()
    git(path, "init", "-q")
    return Path(os.path.realpath(path))


@pytest.fixture
def store(store_dir: Path):
    with Store(str(store_dir)) as opened:
        yield opened


def stage(repo: Path, *names: str) -> None:
    git(repo, "reset", "-q")
    for name in names:
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(name)
        git(repo, "add", name)


def reserve(store: Store, repo: Path, agent: str, pattern: str, ttl: str = "1h") -> None:
    ops.call(store, "reserve", {"agent": agent, "pattern": pattern, "repo": str(repo), "ttl": ttl})


def release(store: Store, repo: Path, agent: str, pattern: str) -> None:
    ops.call(store, "release", {"agent": agent, "pattern": pattern, "repo": str(repo)})


def index_file(store_dir: Path, repo: Path) -> Path:
    return store_dir / layout.GUARD_INDEX / index_name(str(repo))


def next_tick(store_dir: Path) -> None:
    """Return once the file system's clock has moved past the reservations directory's
    last change, so a change made now gives it a new ctime. The index is only ever built
    after that (SETTLED_NS); `moment` lets a test build it sooner, so the test waits here
    for the tick the real clock would have waited for (a few milliseconds)."""
    changed = os.stat(store_dir / layout.RESERVATIONS).st_ctime_ns
    probe = store_dir / ".tick"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        probe.write_bytes(b"")
        if os.stat(probe).st_ctime_ns > changed:
            probe.unlink()
            return
    raise AssertionError("the file system's clock did not move in 5 s")


def check(repo: Path, store_dir: Path, committer: str = "inferno", after: timedelta = LATER) -> str | None:
    return guard.check(str(repo), str(store_dir), committer, datetime.now(timezone.utc) + after)


def test_every_change_relay_makes_after_the_index_is_built_is_seen(repo: Path, store: Store, store_dir: Path) -> None:
    reserve(store, repo, "glacier", "src/auth/**")
    stage(repo, "src/auth/login.py", "docs/guide.md")
    assert "glacier holds src/auth/**" in check(repo, store_dir)
    built = index_file(store_dir, repo)
    assert built.read_bytes().startswith(MAGIC)

    next_tick(store_dir)
    reserve(store, repo, "storm", "docs/**")  # a new reservation
    refused = check(repo, store_dir)
    assert "glacier holds src/auth/**" in refused and "storm holds docs/**" in refused

    next_tick(store_dir)
    release(store, repo, "glacier", "src/auth/**")  # a release
    refused = check(repo, store_dir)
    assert "glacier" not in refused and "storm holds docs/**" in refused

    next_tick(store_dir)
    ops.call(store, "reserve", {"agent": "storm", "pattern": "docs/**", "repo": str(repo), "ttl": "1h", "shared": True})
    assert check(repo, store_dir) is None  # exclusive turned shared: holds nothing at commit

    next_tick(store_dir)
    reserve(store, repo, "storm", "docs/**", ttl="2h")  # shared turned exclusive again
    assert "storm holds docs/**" in check(repo, store_dir)
    assert check(repo, store_dir, committer="storm") is None  # the holder's own commit


def test_expiry_is_decided_at_each_commit_not_when_the_index_was_built(repo: Path, store: Store, store_dir: Path) -> None:
    reserve(store, repo, "glacier", "src/**", ttl="1h")
    stage(repo, "src/main.py")
    assert "glacier holds src/**" in check(repo, store_dir)
    built = index_file(store_dir, repo).read_bytes()
    assert check(repo, store_dir, after=timedelta(hours=2)) is None  # expired by then
    assert index_file(store_dir, repo).read_bytes() == built  # answered by the same index


def test_the_index_answers_when_it_is_current(repo: Path, store: Store, store_dir: Path) -> None:
    """Proof that the commit is decided by the index, not by reading every file again: an
    index naming the directory as it is, whose body says otherwise, is believed."""
    reserve(store, repo, "glacier", "src/**")
    stage(repo, "src/main.py")
    assert check(repo, store_dir) is not None
    path = index_file(store_dir, repo)
    path.write_bytes(_rewritten(path.read_bytes(), held=[["shadow", "src/main.py", str(repo), "2999-01-01T00:00:00.000Z", "told by the index"]]))
    assert "shadow holds src/main.py" in check(repo, store_dir)


def _rewritten(index: bytes, **changes: object) -> bytes:
    """The index with fields of its body replaced and a header that matches them."""
    body = loads(index.split(b"\n", 1)[1])
    body.update(changes)
    data = dumps(body).encode()
    return MAGIC + b" %d %d\n" % (len(data), binascii.crc32(data)) + data


@pytest.mark.slow
@pytest.mark.parametrize("truth", ["reserved", "free"])
def test_a_torn_or_foreign_index_is_never_an_answer(repo: Path, store: Store, store_dir: Path, short_tmp: Path, truth: str) -> None:
    """Each damaged version of an index that would say the opposite of the files is a miss:
    the answer comes from the files, and the index is rebuilt whole."""
    if truth == "reserved":
        reserve(store, repo, "glacier", "src/**")
    else:
        reserve(store, repo, "glacier", "lib/**")  # the store has reservations, none on src/
    stage(repo, "src/main.py")
    expected = check(repo, store_dir)
    assert (expected is not None) == (truth == "reserved")
    path = index_file(store_dir, repo)
    honest = path.read_bytes()
    lie = _rewritten(honest, held=[["shadow", "lib/**" if truth == "reserved" else "src/**", str(repo), "2999-01-01T00:00:00.000Z", None]])
    head_end = lie.index(b"\n") + 1

    other = short_tmp / "other"
    damaged = {
        "empty": b"",
        "garbage": os.urandom(len(lie)),
        "zeros in the body": lie[:head_end] + b"\0" * (len(lie) - head_end),
        "one bit flipped": lie[:-5] + bytes([lie[-5] ^ 1]) + lie[-4:],
        "a character changed, still JSON": lie.replace(b"2999-", b"2998-"),
        "header of the honest body": honest.split(b"\n", 1)[0] + b"\n" + lie[head_end:],
        "another repository's": _rewritten(lie, repo=str(other)),
        "an older directory": _rewritten(lie, dir=[1, 2, 3, 4]),
        "an older format": lie.replace(MAGIC, MAGIC[:-1] + b"0", 1),
        "not a list of rows": _rewritten(lie, held={"a": 1}),
        "rows of the wrong shape": _rewritten(lie, held=[["shadow", "src/**"]]),
        "rows with numbers": _rewritten(lie, held=[["shadow", "src/**", str(repo), 5, None]]),
        **{f"cut at {n}": lie[:n] for n in range(1, len(lie), max(1, len(lie) // 40))},
    }
    for what, data in damaged.items():
        path.write_bytes(data)
        assert check(repo, store_dir) == expected, what
        assert path.read_bytes() == honest, f"{what}: the index was not rebuilt"

    path.unlink()
    path.symlink_to(other)  # a planted symlink is not followed, not written through
    other.write_bytes(lie)
    assert check(repo, store_dir) == expected
    assert other.read_bytes() == lie


def test_a_directory_changed_moments_ago_is_not_indexed(repo: Path, store: Store, store_dir: Path) -> None:
    """A change in the same tick of the file system's clock as the build would leave the
    directory's time as the index records it: the index waits until the directory settles."""
    reserve(store, repo, "glacier", "src/**")
    stage(repo, "src/main.py")
    assert "glacier holds src/**" in guard.check(str(repo), str(store_dir), "inferno")  # now: just changed
    assert not index_file(store_dir, repo).exists()
    assert "glacier holds src/**" in check(repo, store_dir)
    assert index_file(store_dir, repo).exists()


def test_other_repositories_do_not_share_an_index(repo: Path, store: Store, store_dir: Path, short_tmp: Path) -> None:
    other = short_tmp / "repo2"
    other.mkdir()
    git(other, "init", "-q")
    other = Path(os.path.realpath(other))
    reserve(store, repo, "glacier", "src/**")
    reserve(store, other, "storm", "docs/**")
    stage(repo, "src/a.py", "docs/b.md")
    stage(other, "src/a.py", "docs/b.md")
    mine, theirs = check(repo, store_dir), check(other, store_dir)
    assert "glacier holds src/**" in mine and "storm" not in mine
    assert "storm holds docs/**" in theirs and "glacier" not in theirs
    assert index_file(store_dir, repo) != index_file(store_dir, other)


def test_the_hook_with_a_current_index_loads_only_what_it_needs(repo: Path, store: Store, store_dir: Path, relay_env: dict[str, str]) -> None:
    """The hook's start-up, checked by module name (python -X importtime), not by the clock:
    none of the store's records (msgspec), json or re, subprocess, or the modules that
    contextlib and functools.lru_cache bring, nor datetime (the refusal alone needs it)."""
    reserve(store, repo, "glacier", "src/**")
    stage(repo, "src/main.py", "lib/x.py")
    timed = repo.parent / "python-importtime"  # the hook's own command line, with -X importtime added
    timed.write_text(f'#!/bin/sh\nexec {sys.executable} -X importtime "$@"\n')
    timed.chmod(0o755)
    guard.install(str(repo), str(store_dir), python=str(timed))
    assert check(repo, store_dir) is not None  # builds the index
    stage(repo, "lib/x.py")
    env = dict(relay_env, RELAY_AGENT="inferno", GIT_INDEX_FILE=".git/index")
    hook = repo / ".git" / "hooks" / "pre-commit"
    done = subprocess.run([str(hook)], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line}
    assert "relayd.reservations.guard_index" in names
    assert not names & {"msgspec", "json", "re", "subprocess", "contextlib", "functools", "collections", "datetime", "relayd.store", "relayd.records"}


def test_a_repository_spelled_with_json_escapes_is_still_found(short_tmp: Path, store: Store, store_dir: Path) -> None:
    """Files that cannot concern the repository are skipped before decoding, by a byte search
    for its path; a file written by another JSON encoder (`\\u00e9` for `é`) still counts."""
    import json

    from relayd.reservations.reserve import reservation_key

    repo = short_tmp / "répo"
    repo.mkdir()
    git(repo, "init", "-q")
    repo = Path(os.path.realpath(repo))
    record = {"id": "01J0000000000000000000000A", "agent": "glacier", "pattern": "src/**", "repo": str(repo), "exclusive": True,
              "reason": None, "created_at": "2026-01-01T00:00:00.000Z", "expires_at": "2999-01-01T00:00:00.000Z"}
    raw = json.dumps(record, ensure_ascii=True).encode()
    assert "é".encode() not in raw
    store.top(layout.RESERVATIONS).replace(reservation_key(str(repo), "src/**"), raw + b"\n", store.sync)
    stage(repo, "src/main.py")
    assert "glacier holds src/**" in check(repo, store_dir)


def _current(store_dir: Path, repo: Path) -> bool:
    from relayd.fsio import Dir
    from relayd.reservations.guard_index import _load, directory_stamp

    with Dir.open_root(str(store_dir)) as root:
        return _load(root, str(repo), directory_stamp(str(store_dir))) is not None


def test_refresh_brings_the_indexes_commits_made_up_to_date(repo: Path, store: Store, store_dir: Path, short_tmp: Path) -> None:
    """What relayd runs once reservations/ has settled after a change outside relay: each
    repository with an index gets it rebuilt, with the same answer a commit reading the
    files would get; a repository no commit has checked gets none."""
    from relayd.reservations.guard_index import refresh

    other = short_tmp / "other"
    other.mkdir()
    git(other, "init", "-q")
    reserve(store, repo, "glacier", "src/**")
    reserve(store, repo, "storm", "docs/**")
    reserve(store, other, "storm", "lib/**")
    stage(repo, "src/a.py", "docs/b.md")
    assert "storm holds docs/**" in check(repo, store_dir)  # the commit's check builds the index
    next_tick(store_dir)
    [docs] = [p for p in (store_dir / layout.RESERVATIONS).iterdir() if b"docs/**" in p.read_bytes()]
    docs.unlink()  # by hand: relay does not write the index through
    assert not _current(store_dir, repo)

    later = lambda: time.time_ns() + 10 * 1_000_000_000  # noqa: E731  the directory has settled
    assert refresh(str(store_dir), later) == [str(repo)]
    assert _current(store_dir, repo) and not index_file(store_dir, other.resolve()).exists()
    refused = check(repo, store_dir)
    assert "glacier holds src/**" in refused and "docs/**" not in refused


def test_relay_writes_the_index_through_on_every_reservation_change(repo: Path, store: Store, store_dir: Path) -> None:
    """Reserve, release and gc rebuild the indexes under the reservations lock: the next
    commit finds its index current at once, relayd running or not (here it is not)."""
    reserve(store, repo, "glacier", "src/**")
    stage(repo, "src/a.py", "docs/b.md", "lib/c.py")
    assert "glacier holds src/**" in check(repo, store_dir)  # builds the index
    next_tick(store_dir)
    reserve(store, repo, "storm", "docs/**")
    assert _current(store_dir, repo) and "storm holds docs/**" in check(repo, store_dir)
    next_tick(store_dir)
    release(store, repo, "glacier", "src/**")
    assert _current(store_dir, repo) and "glacier" not in check(repo, store_dir)
    next_tick(store_dir)
    clock = Clock(time.time())
    with Store(str(store_dir), clock=clock) as timed:
        reserve(timed, repo, "storm", "lib/**", ttl="1s")
        clock.now += 1.001  # the reservation's own 1 s life, by the store's clock
        ops.call(timed, "gc", {})
    assert _current(store_dir, repo)
    assert "lib/**" not in (check(repo, store_dir, after=timedelta(0)) or "")


@pytest.mark.slow
def test_relayd_rebuilds_an_index_a_change_outside_relay_left_behind(repo: Path, store_dir: Path, daemon, relayctl) -> None:
    """A reservation file removed by hand (not through relay) leaves the index naming an old
    state; relayd rebuilds it once the directory has settled, so commits need not."""
    relayctl("register", "glacier")
    relayctl("reserve", "src/**", "--repo", str(repo), agent="glacier")
    relayctl("reserve", "docs/**", "--repo", str(repo), agent="glacier")
    stage(repo, "src/a.py", "docs/b.md")
    assert "glacier holds docs/**" in check(repo, store_dir)
    next_tick(store_dir)
    [docs] = [p for p in (store_dir / layout.RESERVATIONS).iterdir() if b"docs/**" in p.read_bytes()]
    docs.unlink()
    assert not _current(store_dir, repo)
    from support.waiting import wait_for

    wait_for("relayd to rebuild the index", lambda: _current(store_dir, repo), timeout=20)
    refused = check(repo, store_dir)
    assert "glacier holds src/**" in refused and "docs/**" not in refused


def test_the_written_through_index_is_always_what_the_files_say(repo: Path, store: Store, store_dir: Path, short_tmp: Path) -> None:
    """A run of reserves (exclusive, shared, forced over another's, renewed, switched between
    the two), releases and gc in two repositories and a subdirectory of one: after each,
    both indexes are current and hold exactly what reading every file gives."""
    import random

    from relayd.fsio import Dir
    from relayd.reservations.guard_index import _load, _read_files, directory_stamp

    other = short_tmp / "other"
    other.mkdir()
    git(other, "init", "-q")
    other = other.resolve()
    sub = repo / "pkg"
    sub.mkdir()
    for top in (repo, other):
        reserve(store, top, "glacier", "seed/**")
        stage(top, "seed/x.py")
        check(top, store_dir)  # builds both indexes
    rng = random.Random(7)
    for step in range(40):
        next_tick(store_dir)
        where = rng.choice([repo, other, sub])
        agent = rng.choice(["glacier", "storm"])
        pattern = rng.choice(["src/**", "docs/*.md", "lib/a.py"])
        action = rng.choice(["exclusive", "shared", "force", "release", "gc"])
        try:
            if action == "release":
                release(store, where, agent, pattern)
            elif action == "gc":
                ops.call(store, "gc", {})
            else:
                ops.call(store, "reserve", {"agent": agent, "pattern": pattern, "repo": str(where), "ttl": "1h",
                                            "shared": action == "shared", "force": action == "force"})
        except Exception as exc:  # a conflict, or a release of what is not held: nothing changed
            assert type(exc).__name__ in ("Conflict", "NotFound", "NotOwner"), exc
        stamp = directory_stamp(str(store_dir))
        with Dir.open_root(str(store_dir)) as root, root.subdir(layout.RESERVATIONS) as folder:
            for top in (repo, other):
                indexed = _load(root, str(top), stamp)
                assert indexed is not None, (step, action, top)
                assert sorted(h.row() for h in indexed) == sorted(h.row() for h in _read_files(folder, str(top))), (step, action, top)
