"""relayctl handoff: an agent's reservations move to another agent in one step, with a brief;
the pre-commit guard then refuses the old owner's commits there, naming the handoff, and
accepts the new owner's (real git commits, the real guard hook)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relayd.reservations.handoff import HANDED
from support.git_repo import Repo


@pytest.fixture
def repo(relayctl, relay_env: dict[str, str], short_tmp: Path) -> Repo:
    relayctl.setup("init")
    for name in ("inferno", "coder", "storm"):
        relayctl.setup("register", name=name)
    return Repo(short_tmp / "repo", relay_env)


def held(relayctl, repo: Repo) -> dict[str, dict]:
    return {r["pattern"]: r for r in json.loads(relayctl("--json", "reservations", "--repo", str(repo.path)).stdout)}


@pytest.mark.slow
def test_a_handoff_moves_the_reservations_so_the_guard_refuses_the_old_owner_and_takes_the_new(relayctl, repo: Repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), "--reason", "auth refactor", "--ttl", "2h", agent="inferno")
    relayctl("reserve", "docs/**", "--repo", str(repo.path), agent="inferno")
    relayctl("guard", "install", "--repo", str(repo.path))
    before = held(relayctl, repo)["src/auth/**"]
    assert repo.commit("src/auth/login.py", agent="inferno").returncode == 0

    done = relayctl("handoff", "coder", "src/auth/**", "Auth is yours: login works, logout is half done", "--repo", str(repo.path), "--thread", "auth", agent="inferno")
    assert done.stdout.splitlines()[0] == f"handed 1 reservation in {repo.path} to coder: src/auth/**"
    brief_id = done.stdout.split("brief sent as ")[1].split()[0]

    now_held = held(relayctl, repo)
    moved = now_held["src/auth/**"]
    assert moved["agent"] == "coder" and moved["expires_at"] == before["expires_at"] and moved["exclusive"]
    assert moved["reason"].startswith(f"{HANDED} inferno at ") and moved["reason"].endswith(", thread auth — auth refactor")
    assert now_held["docs/**"]["agent"] == "inferno"  # not named: stays

    refused = repo.commit("src/auth/logout.py", agent="inferno")
    assert refused.returncode != 0
    assert "coder holds src/auth/**" in refused.stderr and "handed over by inferno" in refused.stderr and "thread auth" in refused.stderr
    assert repo.commit("src/auth/logout.py", agent="coder").returncode == 0

    # The brief reached coder, listing what it now holds; its sender's track shows it read.
    [brief] = json.loads(relayctl("--json", "read", "--unread", "--mark-read", agent="coder").stdout)
    assert brief["id"] == brief_id and brief["thread"] == "auth" and "handoff" in brief["tags"]
    assert brief["body"].startswith("Auth is yours: login works, logout is half done\n") and "  src/auth/** (exclusive, until" in brief["body"]
    tracked = json.loads(relayctl("--json", "track", brief_id, agent="inferno").stdout)
    assert [r["read"] for r in tracked["recipients"]] == [True]


@pytest.mark.slow
def test_handoff_all_and_a_new_ttl(relayctl, repo: Repo) -> None:
    for pattern in ("src/**", "docs/**"):
        relayctl("reserve", pattern, "--repo", str(repo.path), "--shared", agent="inferno")
    relayctl("handoff", "coder", "--all", "everything here is yours", "--repo", str(repo.path), "--ttl", "10m", agent="inferno")
    now_held = held(relayctl, repo)
    assert {p: (r["agent"], r["exclusive"]) for p, r in now_held.items()} == {"src/**": ("coder", False), "docs/**": ("coder", False)}
    assert all(r["created_at"] < r["expires_at"] for r in now_held.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "status", "error"),
    [
        (("nobody", "src/auth/**", "go"), 1, "error: unknown agent 'nobody'; known agents: coder, inferno, storm"),
        (("inferno", "src/auth/**", "go"), 2, "error: inferno cannot hand work over to itself"),
        (("coder", "docs/**", "go"), 1, "does not hold docs/** in"),
        (("coder", "go"), 2, "error: name the patterns to hand over before the message, or --all"),
        (("coder", "src/auth/**", "--all", "go"), 2, "error: give the patterns to hand over, or --all (not both)"),
    ],
)
def test_a_refused_handoff_moves_nothing(relayctl, repo: Repo, argv, status: int, error: str) -> None:
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="inferno")
    done = relayctl("handoff", *argv, "--repo", str(repo.path), agent="inferno", check=False)
    assert done.returncode == status and error in done.stderr
    assert held(relayctl, repo)["src/auth/**"]["agent"] == "inferno"
    assert json.loads(relayctl("--json", "read", agent="coder").stdout) == []


@pytest.mark.slow
def test_an_archived_agent_is_refused(relayctl, repo: Repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="inferno")
    relayctl.setup("program_state", agent="coder", state="stopped")  # what `relayctl down` records: archived
    done = relayctl("handoff", "coder", "src/auth/**", "go", "--repo", str(repo.path), agent="inferno", check=False)
    assert done.returncode == 2 and "coder is archived" in done.stderr
    assert held(relayctl, repo)["src/auth/**"]["agent"] == "inferno"
