"""Shared fixtures: a fresh store in a short temp dir and a way to run the real CLI.

Sockets live in short paths (AF_UNIX paths are limited to 108 bytes, and pytest's
tmp_path can exceed that), so every store here sits in its own `tempfile` directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from support.cli_processes import RelayCtl
from support.program_slots import program_slot

# pytest keeps each test module as it rewrote its asserts in __pycache__ only where bytecode
# may be written; under PYTHONDONTWRITEBYTECODE (as on the machines CI runs on) it rewrote all
# of them on every run, most of the quick loop's collection (7 s of 8 here). This process
# writes them; the processes the tests start still follow the variable.
sys.dont_write_bytecode = False


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _state_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """relay keeps the originals of settings files it writes into under $XDG_STATE_HOME
    (relayctl.originals): never the developer's own, in this process or its children."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test marked `real_program` waits for one of the few slots (support.program_slots)
    before anything else of it runs, so the wait is not counted against its timeout."""
    if item.get_closest_marker("real_program") is None:
        yield
        return
    with program_slot():
        yield


@pytest.fixture
def store_dir(short_tmp: Path) -> Path:
    return short_tmp / "store"


@pytest.fixture
def relay_env(store_dir: Path, short_tmp: Path) -> dict[str, str]:
    """Environment for child processes: this store, a socket nobody listens on unless a
    test starts relayd, and no identity leaking in from the developer's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "OVLD_"))}
    env["RELAY_DIR"] = str(store_dir)
    env["RELAY_SOCKET"] = str(short_tmp / "relayd.sock")
    env.pop("XDG_RUNTIME_DIR", None)
    return env


@pytest.fixture
def relayctl(relay_env: dict[str, str]) -> RelayCtl:
    return RelayCtl(relay_env)


def pytest_sessionstart(session: pytest.Session) -> None:
    from support.needed_programs import missing_programs

    missing = missing_programs()
    if missing:
        raise pytest.UsageError(f"the tests need programs that are not installed; on Debian or Ubuntu: sudo apt-get install {' '.join(missing)}")
    if not hasattr(session.config, "workerinput"):  # once, before xdist starts its workers
        _write_bytecode()


def _write_bytecode() -> None:
    """Compile relay's packages (and the tests' helpers) into __pycache__ before a test starts
    a relay process. An editable install ships no bytecode, and where PYTHONDONTWRITEBYTECODE
    is set (as on the machines CI runs on) no process writes it either: every relayctl,
    relayd, relay-mcp and hook process the suite starts compiled relay's modules from source
    again, half the CPU of a direct-mode `relayctl send` (82 ms against 40). A user's first
    run writes the same files; reading them is allowed whatever that variable says."""
    import compileall

    from support.paths import PACKAGES, ROOT, SUPPORT

    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)
    compileall.compile_dir(SUPPORT, quiet=1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="torture suite (tests/torture): many more rounds of each scenario [env: RELAY_TORTURE_LONG=1]")


@pytest.fixture(autouse=True)
def _close_raw_clients() -> Iterator[None]:
    """Raw protocol clients a test left open are closed after it (relayd_proc.RawClient)."""
    yield
    from support.relayd_proc import RawClient

    RawClient.close_all()


@pytest.fixture
def daemon(relay_env: dict[str, str], relayctl: RelayCtl):
    """relayd serving a store with the overlord preset's agents; killed afterwards."""
    from support.relayd_proc import Daemon

    relayctl.setup("init", preset="overlord")
    started = Daemon(relay_env).start()
    yield started
    started.kill()
