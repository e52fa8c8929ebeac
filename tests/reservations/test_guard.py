"""The pre-commit guard (relayctl guard) with real git commits and no relayd."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from relayd import layout
from relayd.records import Reservation, json_encoder
from relayd.reservations.reserve import reservation_key
from relayd.store import Store
from support.git_repo import Repo
from support.throwaway import throwaway_install


@pytest.fixture
def repo(relayctl, relay_env: dict[str, str], short_tmp: Path) -> Repo:
    relayctl.setup("init")
    for name in ("glacier", "inferno", "storm"):
        relayctl.setup("register", name=name)
    return Repo(short_tmp / "repo", relay_env)


@pytest.mark.slow
def test_a_commit_into_another_agents_reservation_is_refused_and_ones_own_goes_through(relayctl, repo: Repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), "--reason", "auth refactor", agent="glacier")
    relayctl("guard", "install", "--repo", str(repo.path))

    refused = repo.commit("src/auth/login.py", "README.md", agent="inferno")
    assert refused.returncode != 0
    [holder] = [line for line in refused.stderr.splitlines() if "glacier holds" in line]
    assert "src/auth/**" in holder and "exclusive, until 20" in holder and "auth refactor" in holder and "src/auth/login.py" in holder
    assert "you are inferno" in refused.stderr and "git commit --no-verify" in refused.stderr
    assert repo.git("rev-list", "--count", "HEAD").stdout.strip() == "1"  # nothing was committed

    assert repo.commit("src/auth/login.py", agent="glacier").returncode == 0  # the holder's own
    assert "src/auth/login.py" in repo.head_files()
    assert repo.commit("README.md", "src/api/new.py", agent="inferno").returncode == 0  # outside it
    assert "src/api/new.py" in repo.head_files()

    no_one = repo.commit("src/auth/session.py")  # no RELAY_AGENT: every holder is someone else
    assert no_one.returncode != 0 and "no RELAY_AGENT is set" in no_one.stderr

    bypass = repo.git("commit", "-qm", "anyway", "--no-verify", agent="inferno")
    assert bypass.returncode == 0 and "src/auth/session.py" in repo.head_files()


@pytest.mark.slow
def test_deleting_or_moving_a_reserved_file_is_touching_it(relayctl, repo: Repo) -> None:
    relayctl("reserve", "src/auth/login.py", "--repo", str(repo.path), agent="glacier")
    relayctl("guard", "install", "--repo", str(repo.path))
    repo.git("mv", "src/auth/login.py", "src/login.py")
    moved = repo.git("commit", "-qm", "move", agent="inferno", check=False)
    assert moved.returncode != 0 and "glacier holds src/auth/login.py" in moved.stderr
    repo.git("mv", "src/login.py", "src/auth/login.py")
    repo.git("rm", "-q", "src/auth/login.py")
    deleted = repo.git("commit", "-qm", "delete", agent="inferno", check=False)
    assert deleted.returncode != 0 and "src/auth/login.py" in deleted.stderr


@pytest.mark.slow
def test_only_active_exclusive_reservations_in_this_repository_hold(relayctl, repo: Repo, store_dir: Path, short_tmp: Path) -> None:
    other_repo = short_tmp / "elsewhere"
    other_repo.mkdir()
    relayctl("reserve", "README.md", "--repo", str(repo.path), "--shared", agent="storm")
    relayctl("reserve", "src/**", "--repo", str(other_repo), agent="storm")
    with Store(str(store_dir)) as store:  # an exclusive one that expired a minute ago
        gone = Reservation(id="01J0000000000000000000000A", agent="storm", pattern="docs/**", repo=str(repo.path),
                           created_at="2020-01-01T00:00:00.000Z", expires_at="2020-01-01T01:00:00.000Z")
        store.top(layout.RESERVATIONS).replace(reservation_key(str(repo.path), "docs/**"), json_encoder.encode(gone) + b"\n", store.sync)
    relayctl("guard", "install", "--repo", str(repo.path))
    assert repo.commit("README.md", "src/auth/login.py", "docs/a.md", agent="inferno").returncode == 0


@pytest.mark.slow
def test_a_reservation_made_from_a_subdirectory_holds_paths_below_it(relayctl, repo: Repo) -> None:
    (repo.path / "src").mkdir(exist_ok=True)
    relayctl("reserve", "auth/*.py", "--repo", str(repo.path / "src"), agent="glacier")
    relayctl("guard", "install", "--repo", str(repo.path / "src"))  # any directory in the work tree
    refused = repo.commit("src/auth/login.py", agent="inferno")
    assert refused.returncode != 0 and "glacier holds auth/*.py" in refused.stderr and "src/auth/login.py" in refused.stderr
    repo.git("reset", "-q", "--hard")
    assert repo.commit("auth/login.py", agent="inferno").returncode == 0  # auth/ at the top is not src/auth/


@pytest.mark.slow
def test_patterns_are_read_as_gitignore_reads_them(relayctl, repo: Repo, store_dir: Path) -> None:
    relayctl("reserve", "*.py", "--repo", str(repo.path), agent="glacier")  # every Python file
    relayctl("reserve", "/README.md", "--repo", str(repo.path), agent="storm")  # the top one only
    relayctl("guard", "install", "--repo", str(repo.path))
    deep = repo.commit("src/auth/login.py", agent="inferno")
    assert deep.returncode != 0 and "glacier holds **/*.py" in deep.stderr and "src/auth/login.py" in deep.stderr
    repo.git("reset", "-q", "--hard")
    assert repo.commit("docs/README.md", agent="inferno").returncode == 0
    top = repo.commit("README.md", agent="inferno")
    assert top.returncode != 0 and "storm holds /README.md" in top.stderr
    repo.git("reset", "-q", "--hard")
    # A reservation stored before this reading (`*.sh`, then the top directory only) is read with it.
    with Store(str(store_dir)) as store:
        old = Reservation(id="01J0000000000000000000000B", agent="storm", pattern="*.sh", repo=str(repo.path),
                          created_at="2026-01-01T00:00:00.000Z", expires_at="2099-01-01T00:00:00.000Z")
        store.top(layout.RESERVATIONS).replace(reservation_key(str(repo.path), "*.sh"), json_encoder.encode(old) + b"\n", store.sync)
    stored = repo.commit("tools/build.sh", agent="inferno")
    assert stored.returncode != 0 and "storm holds *.sh" in stored.stderr and "tools/build.sh" in stored.stderr


@pytest.mark.slow
def test_odd_file_names_are_matched_as_names(relayctl, repo: Repo) -> None:
    relayctl("reserve", "data/[a-c]*.csv", "--repo", str(repo.path), agent="glacier")
    relayctl("guard", "install", "--repo", str(repo.path))
    assert repo.commit("data/[x]*.csv", agent="inferno").returncode == 0  # a file really named so
    assert repo.commit("data/b 1.csv", agent="inferno").returncode != 0


@pytest.mark.slow
def test_an_existing_hook_is_chained_and_restored(relayctl, repo: Repo, short_tmp: Path) -> None:
    ran = short_tmp / "ran"
    original = f"#!/bin/sh\necho ran >> {ran}\ntest ! -e {short_tmp / 'block'}\n"
    hook = repo.hooks() / "pre-commit"
    hook.write_text(original)
    hook.chmod(0o755)
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="glacier")
    installed = relayctl("guard", "install", "--repo", str(repo.path))
    assert "runs first" in installed.stdout
    relayctl("guard", "install", "--repo", str(repo.path))  # twice: still one chained hook

    assert repo.commit("README.md", agent="inferno").returncode == 0
    assert ran.read_text() == "ran\n"
    assert repo.commit("src/auth/login.py", agent="inferno").returncode != 0
    assert ran.read_text() == "ran\nran\n"
    (short_tmp / "block").touch()  # the chained hook's own refusal still counts
    assert repo.commit("docs/x.md", agent="inferno").returncode != 0

    relayctl("guard", "uninstall", "--repo", str(repo.path))
    assert hook.read_text() == original and os.access(hook, os.X_OK)
    assert sorted(p.name for p in repo.hooks().iterdir() if not p.name.endswith(".sample")) == ["pre-commit"]
    (short_tmp / "block").unlink()
    assert repo.commit("src/auth/login.py", agent="inferno").returncode == 0  # no guard any more


@pytest.mark.slow
def test_mistakes_are_one_line_errors(relayctl, repo: Repo, short_tmp: Path) -> None:
    missing = relayctl("guard", "uninstall", "--repo", str(repo.path), check=False)
    assert missing.returncode != 0 and missing.stderr.startswith("error: no relay guard") and len(missing.stderr.splitlines()) == 1
    (short_tmp / "plain").mkdir()
    not_git = relayctl("guard", "install", "--repo", str(short_tmp / "plain"), check=False)
    assert not_git.returncode != 0 and "Traceback" not in not_git.stderr and len(not_git.stderr.splitlines()) == 1
    foreign = repo.hooks() / "pre-commit"
    foreign.write_text("#!/bin/sh\nexit 0\n")
    refused = relayctl("guard", "uninstall", "--repo", str(repo.path), check=False)
    assert refused.returncode != 0 and "not relay's guard" in refused.stderr and foreign.read_text() == "#!/bin/sh\nexit 0\n"


@pytest.mark.slow
def test_guard_check_says_what_the_hook_would(relayctl, repo: Repo) -> None:
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="glacier")
    repo.write("src/auth/login.py", "x\n")
    repo.git("add", "-A")
    would = relayctl("guard", "check", "--repo", str(repo.path), agent="inferno", check=False)
    assert would.returncode == 1 and "glacier holds src/auth/**" in would.stderr
    assert relayctl("guard", "check", "--repo", str(repo.path), agent="glacier").returncode == 0


@pytest.mark.slow
def test_a_refusal_over_many_reservations_lists_twenty_and_counts_the_rest(relayctl, repo: Repo, store_dir: Path) -> None:
    from relayd import ops
    from relayd.store import Store

    with Store(str(store_dir)) as store:
        for i in range(25):
            ops.call(store, "reserve", {"agent": "glacier", "pattern": f"mod{i:02d}/**", "repo": str(repo.path), "ttl": "1h"})
    relayctl("guard", "install", "--repo", str(repo.path))
    refused = repo.commit(*(f"mod{i:02d}/a.py" for i in range(25)), "mod03/b.py", agent="inferno")
    assert refused.returncode != 0
    held = [line for line in refused.stderr.splitlines() if "glacier holds" in line]
    assert len(held) == 20 and "mod00/**" in held[0] and "mod19/**" in held[-1]
    assert "and 5 more reservations of other agents, over 5 more staged files" in refused.stderr


# -- the hook outlives relay, and chains the hook managers where they live ---------------------


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.mark.slow
def test_after_the_venv_relay_was_installed_in_is_deleted_commits_go_through_with_one_warning(relay_env, repo: Repo, short_tmp: Path) -> None:
    import shutil

    venv = short_tmp / "venv"
    python = throwaway_install(venv)
    block = short_tmp / "block"
    original = f"#!/bin/sh\ntest ! -e {block} || {{ echo 'lint: refused' >&2; exit 1; }}\n"
    _executable(repo.hooks() / "pre-commit", original)
    subprocess.run([str(python), "-m", "relayctl", "reserve", "src/auth/**", "--repo", str(repo.path)], env=dict(relay_env, RELAY_AGENT="glacier"), check=True, capture_output=True)
    subprocess.run([str(python), "-m", "relayctl", "guard", "install", "--repo", str(repo.path)], env=relay_env, check=True, capture_output=True)
    assert repo.commit("src/auth/login.py", agent="inferno").returncode != 0  # the guard works while relay is there

    shutil.rmtree(venv)
    repo.git("reset", "-q", "--hard")
    done = repo.commit("src/auth/login.py", agent="inferno")
    assert done.returncode == 0, done.stderr
    assert "src/auth/login.py" in repo.head_files()
    [line] = done.stderr.splitlines()
    hook, chained = repo.hooks() / "pre-commit", repo.hooks() / "pre-commit.relay-chained"
    assert line.startswith("relay guard: not active") and f"mv {chained} {hook}" in line

    block.touch()  # the user's own hook still runs first and still refuses
    refused = repo.commit("README.md", agent="inferno")
    assert refused.returncode != 0 and "lint: refused" in refused.stderr and "relay guard" not in refused.stderr
    subprocess.run(["mv", str(chained), str(hook)], check=True)  # what the line says to do
    assert hook.read_text() == original


def _husky_repo(repo: Repo, short_tmp: Path) -> Path:
    """husky 9 set up for real in `repo` (core.hooksPath=.husky/_, its dispatcher there), with
    the user's committed .husky/pre-commit that refuses while `block` exists."""
    from support.git_tools import husky

    subprocess.run(["node", str(husky())], cwd=repo.path, env=repo.env, check=True, capture_output=True, timeout=60)
    assert repo.git("config", "core.hooksPath").stdout.strip() == ".husky/_"
    block = short_tmp / "block"
    (repo.path / ".husky" / "pre-commit").write_text(f"echo lint ran >> {short_tmp / 'ran'}\ntest ! -e {block} || {{ echo 'lint: refused' >&2; exit 1; }}\n")
    repo.git("add", ".husky/pre-commit")
    repo.git("commit", "-qm", "husky", "--no-verify")
    return block


@pytest.mark.slow
def test_husky_9s_hook_keeps_running_first_and_refusing(relayctl, repo: Repo, short_tmp: Path) -> None:
    block = _husky_repo(repo, short_tmp)
    tracked = repo.git("ls-files", ".husky").stdout
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="glacier")
    installed = relayctl("guard", "install", "--repo", str(repo.path))
    assert str(repo.path / ".husky" / "_" / "pre-commit") in installed.stdout

    block.touch()
    refused = repo.commit("README.md", agent="inferno")
    assert refused.returncode != 0 and "lint: refused" in refused.stderr  # husky's hook refused it
    block.unlink()
    guarded = repo.commit("src/auth/login.py", agent="inferno")
    assert guarded.returncode != 0 and "glacier holds src/auth/**" in guarded.stderr
    repo.git("reset", "-q", "--hard")
    assert repo.commit("README.md", agent="inferno").returncode == 0
    assert (short_tmp / "ran").read_text().count("lint ran") == 3
    assert repo.git("status", "--porcelain").stdout == "" and repo.git("ls-files", ".husky").stdout == tracked  # nothing for git to pick up

    relayctl("guard", "uninstall", "--repo", str(repo.path))
    assert (repo.path / ".husky" / "_" / "pre-commit").read_text() == '#!/usr/bin/env sh\n. "$(dirname "$0")/h"'


@pytest.mark.slow
def test_a_committed_hook_in_core_hooks_path_is_never_rewritten(relayctl, repo: Repo) -> None:
    """husky 5-8: core.hooksPath=.husky, whose pre-commit is committed for the whole team."""
    ours = "#!/bin/sh\n. \"$(dirname \"$0\")/_/husky.sh\"\nnpm test\n"
    _executable(repo.path / ".husky" / "pre-commit", ours)
    repo.git("add", ".husky")
    repo.git("commit", "-qm", "hooks", "--no-verify")
    repo.git("config", "core.hooksPath", ".husky")
    refused = relayctl("guard", "install", "--repo", str(repo.path), check=False)
    assert refused.returncode != 0 and len(refused.stderr.splitlines()) == 1
    assert "relay never rewrites a file git tracks" in refused.stderr and "no guard installed" in refused.stderr
    assert (repo.path / ".husky" / "pre-commit").read_text() == ours
    assert repo.git("status", "--porcelain").stdout == ""
    [line] = refused.stderr.split("; to guard commits here, add this line to .husky/pre-commit and commit it: ")[1:]

    (repo.path / ".husky" / "pre-commit").unlink()  # no hook there yet: one relay wrote could be committed
    repo.git("commit", "-qam", "no hook", "--no-verify")
    untracked = relayctl("guard", "install", "--repo", str(repo.path), check=False)
    assert untracked.returncode != 0 and "could be committed" in untracked.stderr and untracked.stderr.endswith(f"commit it: {line}")
    assert not (repo.path / ".husky" / "pre-commit").exists()

    # What the refusal says to do instead works: the team's committed hook with that line.
    _executable(repo.path / ".husky" / "pre-commit", f"#!/bin/sh\n{line.strip()}\n")
    repo.git("add", ".husky")
    repo.git("commit", "-qm", "the guard in the team's hook", "--no-verify")
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="glacier")
    repo.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{repo.env['PATH']}"  # relayctl on PATH, as where it is installed
    refused_commit = repo.commit("src/auth/login.py", agent="inferno")
    assert refused_commit.returncode != 0 and "glacier holds" in refused_commit.stderr
    assert repo.commit("src/auth/login.py", agent="glacier").returncode == 0
    repo.env["PATH"] = os.pathsep.join(p for p in repo.env["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(p, "relayctl")))
    assert repo.commit("README.md", agent="inferno").returncode == 0  # without relayctl the line does nothing


@pytest.mark.slow
def test_a_hooks_path_shared_with_other_repositories_is_left_alone(relayctl, repo: Repo, short_tmp: Path) -> None:
    shared = short_tmp / "global-hooks"
    shared.mkdir()
    repo.git("config", "core.hooksPath", str(shared))
    refused = relayctl("guard", "install", "--repo", str(repo.path), check=False)
    assert refused.returncode != 0 and "outside this repository" in refused.stderr
    assert list(shared.iterdir()) == []


def _lint(short_tmp: Path) -> tuple[Path, Path]:
    """A lint script that refuses while `block` exists: (script, block)."""
    block = short_tmp / "block"
    script = short_tmp / "lint.sh"
    _executable(script, f"#!/bin/sh\ntest ! -e {block} || {{ echo 'lint: refused' >&2; exit 1; }}\n")
    return script, block


@pytest.mark.slow
def test_the_pre_commit_frameworks_hook_keeps_running_first_and_refusing(relayctl, repo: Repo, short_tmp: Path) -> None:
    """pre-commit (pre-commit.com) writes .git/hooks/pre-commit; the guard chains it."""
    import sys

    lint, block = _lint(short_tmp)
    (repo.path / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: local\n  hooks:\n  - id: no-block\n    name: no-block\n    language: system\n    pass_filenames: false\n"
        f"    always_run: true\n    entry: {lint}\n")
    repo.git("add", ".pre-commit-config.yaml")
    repo.git("commit", "-qm", "pre-commit config", "--no-verify")
    repo.env["PRE_COMMIT_HOME"] = str(short_tmp / "pre-commit-home")
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo.path, env=repo.env, check=True, capture_output=True, timeout=120)
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="glacier")
    relayctl("guard", "install", "--repo", str(repo.path))

    block.touch()
    refused = repo.commit("README.md", agent="inferno")
    assert refused.returncode != 0 and "lint: refused" in refused.stderr
    block.unlink()
    assert "glacier holds src/auth/**" in repo.commit("src/auth/login.py", agent="inferno").stderr
    repo.git("reset", "-q", "--hard")
    done = repo.commit("README.md", agent="inferno")
    assert done.returncode == 0 and "no-block" in done.stdout + done.stderr  # pre-commit ran its hook


@pytest.mark.slow
def test_lefthooks_hook_keeps_running_first_and_refusing(relayctl, repo: Repo, short_tmp: Path) -> None:
    from support.git_tools import lefthook

    lint, block = _lint(short_tmp)
    (repo.path / "lefthook.yml").write_text(f"pre-commit:\n  commands:\n    no-block:\n      run: {lint}\n")
    repo.git("add", "lefthook.yml")
    repo.git("commit", "-qm", "lefthook", "--no-verify")
    subprocess.run([str(lefthook()), "install"], cwd=repo.path, env=repo.env, check=True, capture_output=True, timeout=60)
    relayctl("reserve", "src/auth/**", "--repo", str(repo.path), agent="glacier")
    relayctl("guard", "install", "--repo", str(repo.path))

    block.touch()
    refused = repo.commit("README.md", agent="inferno")
    assert refused.returncode != 0 and "lint: refused" in refused.stderr + refused.stdout
    block.unlink()
    assert "glacier holds src/auth/**" in repo.commit("src/auth/login.py", agent="inferno").stderr
    repo.git("reset", "-q", "--hard")
    assert repo.commit("README.md", agent="inferno").returncode == 0
