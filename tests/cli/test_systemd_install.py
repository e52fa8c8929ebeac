"""relayctl systemd install/uninstall: the units it writes load cleanly (systemd-analyze
verify) and name this installation; without a user bus it warns instead of failing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = ("relayd.socket", "relayd.service", "relay-wake.path", "relay-wake.service")
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt install systemd)")


@pytest.fixture
def no_bus(relay_env: dict[str, str], short_tmp: Path) -> dict[str, str]:
    """A temp XDG_CONFIG_HOME and no user session bus (as over ssh, or here)."""
    env = {k: v for k, v in relay_env.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    env["XDG_CONFIG_HOME"] = str(short_tmp / "config")
    env.pop("RELAY_SOCKET")  # the units use the runtime-dir socket, as relayctl does in a login session
    return env


def _relayctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relayctl", *args], env=env, capture_output=True, text=True, timeout=120)


def _unit_dir(env: dict[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"


@needs_systemd
def test_install_writes_units_that_verify_and_name_this_installation(no_bus: dict[str, str], short_tmp: Path) -> None:
    proc = _relayctl(no_bus, "systemd", "install")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    [warning] = proc.stderr.strip().splitlines()
    assert warning.startswith("warning: systemctl --user daemon-reload failed") and "units are written" in warning
    folder = _unit_dir(no_bus)
    assert sorted(p.name for p in folder.iterdir()) == sorted(UNITS)

    runtime = short_tmp / "runtime"
    runtime.mkdir(mode=0o700)
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--user", *(str(folder / name) for name in UNITS)],
        env=dict(os.environ, XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_LEVEL="warning"),
        capture_output=True, text=True, timeout=60,
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr

    bindir = os.path.dirname(sys.executable)
    service = (folder / "relayd.service").read_text()
    assert f"ExecStart={bindir}/relayd --socket %t/relay/relayd-" in service
    assert f"Environment=RELAY_DIR={no_bus['RELAY_DIR']}" in service and "Type=notify" in service
    assert "SocketMode=0600" in (folder / "relayd.socket").read_text()
    assert f"PathModified={no_bus['RELAY_DIR']}/wake/trigger" in (folder / "relay-wake.path").read_text()
    assert f"ExecStart={bindir}/relayctl wake --forward" in (folder / "relay-wake.service").read_text()


def test_install_now_without_a_bus_is_one_error_line_and_the_units_stay(no_bus: dict[str, str]) -> None:
    proc = _relayctl(no_bus, "systemd", "install", "--now")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: the units are written") and "systemctl --user enable --now relayd.socket relay-wake.path" in line
    assert sorted(p.name for p in _unit_dir(no_bus).iterdir()) == sorted(UNITS)


def test_uninstall_removes_only_what_install_wrote(no_bus: dict[str, str]) -> None:
    folder = _unit_dir(no_bus)
    folder.mkdir(parents=True)
    (folder / "relayd.service").write_text("[Service]\nExecStart=/usr/local/bin/my-own-relayd\n")
    refused = _relayctl(no_bus, "systemd", "install")
    assert refused.returncode == 1 and "relayd.service" in refused.stderr and "--force" in refused.stderr
    assert not (folder / "relayd.socket").exists()  # nothing written when refusing

    (folder / "relayd.service").unlink()
    assert _relayctl(no_bus, "systemd", "install").returncode == 0
    (folder / "relayd.service").write_text("[Service]\nExecStart=/usr/local/bin/my-own-relayd\n")  # the user replaced one
    proc = _relayctl(no_bus, "systemd", "uninstall")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "left" in proc.stderr and "relayd.service" in proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["relayd.service"]
