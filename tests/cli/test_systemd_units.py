"""The systemd user units in contrib/systemd load cleanly (systemd-analyze verify)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import ROOT

UNITS = ROOT / "contrib" / "systemd"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt install systemd)")
@pytest.mark.parametrize("scope", ["--user", "--system"])
def test_units_verify_without_warnings(short_tmp, scope):
    runtime = short_tmp / "runtime"
    runtime.mkdir(mode=0o700)
    for unit in ("relayd.service", "relayd.socket"):
        shutil.copy(UNITS / unit, short_tmp / unit)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_LEVEL="warning")
    proc = subprocess.run(
        ["systemd-analyze", "verify", scope, str(short_tmp / "relayd.service"), str(short_tmp / "relayd.socket")],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # verify only warns about unknown keys and bad values


def test_service_is_type_notify_with_a_watchdog_and_the_socket_is_private():
    service = (UNITS / "relayd.service").read_text()
    socket_unit = (UNITS / "relayd.socket").read_text()
    assert "Type=notify" in service and "WatchdogSec=" in service
    assert "SocketMode=0600" in socket_unit and "DirectoryMode=0700" in socket_unit
