"""Installing relay as the README and the error messages say: every `pip install` hint
names the distribution pyproject.toml builds (the name "relay" on PyPI is someone else's
project), and the README's install and test commands are the ones .ci/run executes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.paths import PACKAGES, ROOT
from support.waiting import wait_for

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = PROJECT["name"]
EXTRAS = set(PROJECT["optional-dependencies"])
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = [p for d in (*PACKAGES, "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]

# A requirement with an extra as prose and code write it: pip install 'relay-bus[web]',
# `relay-bus[bridge]`, the extra relay-bus[bridge], pip install -e '.[test]'
_WITH_EXTRA = re.compile(r"(?:pip install (?:-e )?['\"]?|['`]|extra )([\w.-]+)\[([a-z,]+)\]")


def _requirements_with_extras(text: str) -> list[tuple[str, str]]:
    lines = [line for line in text.splitlines() if "pip install" in line or "extra" in line]
    return [(m.group(1), m.group(2)) for line in lines for m in _WITH_EXTRA.finditer(line)]


def test_the_name_is_free_of_the_pypi_namesake() -> None:
    from relayd import DISTRIBUTION

    assert NAME == DISTRIBUTION != "relay"


@pytest.mark.parametrize("path", DOCS + SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_install_hint_names_this_distribution(path: Path) -> None:
    for name, extras in _requirements_with_extras(path.read_text()):
        assert name in (NAME, "."), f"{path.name}: install hint names {name}[{extras}], not {NAME}[{extras}]"
        assert set(extras.split(",")) <= EXTRAS, f"{path.name}: {name}[{extras}] names an extra pyproject.toml does not define"


def test_relayctl_version_reads_the_installed_distribution() -> None:
    proc = subprocess.run([str(BIN / "relayctl"), "--version"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout == f"relayctl {PROJECT['version']}\n", proc.stderr


@pytest.fixture
def without(tmp_path: Path):
    """An environment in which importing the given top-level modules fails, as when an
    optional extra is not installed."""

    def env(*modules: str) -> dict[str, str]:
        for module in modules:
            (tmp_path / module).mkdir()
            (tmp_path / module / "__init__.py").write_text("raise ImportError('not installed')\n")
        return dict(os.environ, PYTHONPATH=str(tmp_path), RELAY_DIR=str(tmp_path / "store"), RELAY_SOCKET=str(tmp_path / "none.sock"))

    return env


def _assert_hint(proc: subprocess.CompletedProcess[str], sentence: str, extra: str) -> None:
    """One line naming the interpreter that runs relay (so the extra lands where relay is,
    whichever pip comes first on PATH) and this distribution with the extra."""
    assert proc.returncode == 2, proc.stderr
    match = re.fullmatch(re.escape(sentence) + rf"(\S+) -m pip install '{re.escape(NAME)}\[{extra}\]'\n", proc.stderr)
    assert match, proc.stderr
    assert os.path.samefile(match.group(1), sys.executable)


def test_a_missing_web_extra_says_how_to_install_it(without) -> None:
    proc = subprocess.run([str(BIN / "relayctl"), "web"], env=without("starlette", "uvicorn"), capture_output=True, text=True, timeout=30)
    _assert_hint(proc, "error: relayctl web needs the web extra (Starlette and uvicorn): ", "web")
    help_text = subprocess.run([str(BIN / "relayctl"), "web", "--help"], capture_output=True, text=True, timeout=30).stdout
    assert f"pip install '{NAME}[web]'" in help_text


def test_a_missing_bridge_extra_says_how_to_install_it(without) -> None:
    proc = subprocess.run([str(BIN / "relayd"), "--bridge", "nats://127.0.0.1:4222"], env=without("nats"), capture_output=True, text=True, timeout=30)
    _assert_hint(proc, "error: relayd --bridge needs the bridge extra (nats-py, nkeys): ", "bridge")


def test_ci_runs_the_readme_commands_as_written() -> None:
    """.ci/run reads both commands out of README.md (its own function, run here) and runs
    them unchanged; each makes its virtual environment, as Debian's python3 requires."""
    ci = (ROOT / ".ci" / "run").read_text()
    function = re.search(r"^readme_command\(\) \{\n.*?^\}\n", ci, re.M | re.S)
    assert function, ".ci/run has no readme_command function"
    calls = dict(re.findall(r'^(\w+_COMMAND)=\$\(readme_command "([^"]+)"\)$', ci, re.M))
    assert set(calls) == {"DAEMON_COMMAND", "TEST_COMMAND"}
    read = {name: subprocess.run(["bash", "-c", function.group(0) + f'readme_command "{lead}"'], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip() for name, lead in calls.items()}
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```\n(.*?)\n```", readme, re.M | re.S)
    assert blocks[:2] == [read["DAEMON_COMMAND"], read["TEST_COMMAND"]]  # the first two blocks
    for command in read.values():
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ")
    assert 'bash -c "$DAEMON_COMMAND"' in ci and 'eval "$TEST_COMMAND"' in ci


@pytest.mark.slow
def test_a_machine_without_the_test_programs_stops_at_once_naming_the_packages(tmp_path: Path) -> None:
    """The README's test command on a fresh Debian: the session stops before any test runs,
    with one line naming the packages to install, instead of failing tests halfway."""
    from support.needed_programs import missing_programs

    bare = tmp_path / "bin"  # a PATH with the interpreter and a shell, none of the programs
    bare.mkdir()
    for program in ("bash", "env"):
        (bare / program).symlink_to(shutil.which(program))
    path = f"{bare}:{BIN}"
    expected = missing_programs(path)
    assert {"socat", "w3m", "chromium", "tmux", "nodejs", "npm"} <= set(expected)
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/store/test_ulid.py", "-q", "-p", "no:cacheprovider"], cwd=ROOT, env=dict(os.environ, PATH=path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert lines == [f"ERROR: the tests need programs that are not installed; on Debian or Ubuntu: sudo apt-get install {' '.join(expected)}"]
    assert "passed" not in proc.stdout


def test_ci_installs_every_package_the_suite_checks_for() -> None:
    from support.needed_programs import PROGRAMS

    ci = (ROOT / ".ci" / "run").read_text()
    installed = {word for line in re.findall(r"apt_install ([^|]+)", ci) for word in line.split()}
    assert set(PROGRAMS.values()) <= installed, set(PROGRAMS.values()) - installed


# -- the test command's first run: the agent programs install once, for every worker ----------

_GATE_PREINSTALL = ("const fs = require('fs'), gate = process.env.RELAY_TEST_GATE;"
                    " fs.writeFileSync(gate + '/waiting', '');"
                    " while (!fs.existsSync(gate + '/open')) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);")
_INSTALLER = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from support.npm_kit import NpmKit
print(NpmKit(Path(sys.argv[2]), ["semver"], ["semver", "gate"]).command("gate"))
"""


def _waiting_on_a_lock(pid: int) -> bool:
    return any(line.split()[1] == "->" and line.split()[5] == str(pid) for line in Path("/proc/locks").read_text().splitlines())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_second_worker_waits_for_the_first_workers_whole_npm_install(tmp_path: Path) -> None:
    """A fresh clone's `pytest -n 4`: the first worker that needs an agent program installs
    them all; another one that needs one meanwhile must not take the pinned package.json
    that npm already wrote for a finished install while `.bin/` is still being linked.
    A stand-in folder like tests/agents: a small registry package and a local one whose
    preinstall script holds npm at that moment until the test lets it go."""
    import tarfile

    from support.paths import TESTS

    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "package.json").write_text(json.dumps({"name": "gate", "version": "1.0.0", "bin": {"gate": "gate.js"},
                                                   "scripts": {"preinstall": f"node -e {json.dumps(_GATE_PREINSTALL)}"}}))
    (gate / "gate.js").write_text("#!/usr/bin/env node\n")
    with tarfile.open(tmp_path / "gate-1.0.0.tgz", "w:gz") as tar:
        tar.add(gate, arcname="package")
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "package.json").write_text(json.dumps({"private": True, "dependencies": {"semver": "7.6.3", "gate": f"file:{tmp_path / 'gate-1.0.0.tgz'}"}}))
    env = dict(os.environ, RELAY_TEST_GATE=str(tmp_path))

    def installer() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _INSTALLER, str(TESTS), str(kit)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = installer()
    second = None
    try:
        wait_for("npm to reach the gate's preinstall", lambda: (tmp_path / "waiting").exists() or first.poll() is not None, timeout=120)
        assert first.poll() is None, first.communicate()
        assert json.loads((kit / "node_modules" / "semver" / "package.json").read_text())["version"] == "7.6.3"
        assert not (kit / "node_modules" / ".bin" / "gate").exists()  # the moment a worker used to take for done
        second = installer()
        wait_for("the second installer to wait or end", lambda: second.poll() is not None or _waiting_on_a_lock(second.pid))
        assert second.poll() is None, second.communicate()
        (tmp_path / "open").touch()
        for proc in (first, second):
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert out.splitlines()[-1] == str(kit / "node_modules" / ".bin" / "gate")
    finally:
        (tmp_path / "open").touch()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_npm_line_in_the_readme_and_team_md_installs_the_versions_the_suite_runs() -> None:
    """The README's and docs/team.md's `npm install -g` line name each program at the version
    tests/agents/package.json pins, the one `up` compares what it finds with."""
    from relayd.programs.registry import PROGRAMS

    pinned = json.loads((ROOT / "tests" / "agents" / "package.json").read_text())["dependencies"]
    assert {p.package: p.tested for p in PROGRAMS.values()} == pinned
    expected = "npm install -g " + " ".join(f"{package}@{version}" for package, version in pinned.items())
    for doc in (ROOT / "README.md", ROOT / "docs" / "team.md"):
        lines = [line.strip() for line in doc.read_text().splitlines() if line.strip().startswith("npm install -g @anthropic-ai/claude-code@")]
        assert lines == [expected], doc
