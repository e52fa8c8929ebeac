"""A store deep in a directory tree with no XDG_RUNTIME_DIR (containers, ssh sessions, CI)
puts the default socket path past what AF_UNIX allows. No daemon can listen there, so
clients work on the store directly; relayd itself says how to give it a shorter path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli_processes import RelayCtl
from relayd import layout
from support.relayd_proc import Daemon


def _deep_store_env(short_tmp: Path) -> dict[str, str]:
    store = short_tmp / ("d" * 120) / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "OVLD_")) and k != "XDG_RUNTIME_DIR"}
    env["RELAY_DIR"] = str(store)
    assert not layout.socket_path_fits(layout.default_socket_path(str(store), env))
    return env


@pytest.mark.slow
def test_every_command_works_directly_when_no_daemon_could_listen_at_the_socket_path(short_tmp: Path) -> None:
    relayctl = RelayCtl(_deep_store_env(short_tmp))
    assert relayctl("init").stdout.startswith("store ready at ")
    assert relayctl("version").stdout.startswith("relay ")
    relayctl("register", "alice")
    relayctl("register", "bob")
    sent = json.loads(relayctl("--json", "send", "bob", "hello from a deep store", agent="alice").stdout)
    [got] = json.loads(relayctl("--json", "read", "--unread", "--mark-read", agent="bob").stdout)
    assert got["id"] == sent["id"] and got["body"] == "hello from a deep store"
    assert relayctl("status").stdout.startswith("relayd: not running (direct mode)")
    # the library client (relay-mcp, the web view) takes the same path
    script = "import os\nfrom relayd.client.full import Client\nwith Client(os.environ['RELAY_DIR']) as c: print(c.call('version', {})['version'], c.mode)"
    out = subprocess.run([sys.executable, "-c", script], env=relayctl.env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.split()[1] == "direct", out.stderr


@pytest.mark.slow
def test_relayd_refuses_such_a_path_in_one_line_naming_the_way_out(short_tmp: Path) -> None:
    env = _deep_store_env(short_tmp)
    RelayCtl(env)("init")
    proc = subprocess.run([sys.executable, "-m", "relayd.daemon"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "too long" in line]
    assert "--socket" in line and "RELAY_SOCKET" in line
    # and the way out works: a short socket, which clients given the same one use
    env["RELAY_SOCKET"] = str(short_tmp / "relayd.sock")
    daemon = Daemon(env).start()
    try:
        assert RelayCtl(env)("status").stdout.startswith("relayd: running")
    finally:
        daemon.kill()


def _relayd_refusal(env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "relayd.daemon"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    return proc.stderr


@pytest.mark.slow
def test_a_socket_in_a_sticky_directory_anyone_may_write_is_served_when_the_name_is_ours(short_tmp: Path, relay_env: dict[str, str]) -> None:
    RelayCtl(relay_env)("init")
    # the seed's own spelling: /tmp itself (sticky, root's, writable by all)
    env = dict(relay_env, RELAY_SOCKET=f"/tmp/relay-{os.getpid()}-{short_tmp.name}.sock")
    daemon = Daemon(env).start()
    try:
        assert os.stat(env["RELAY_SOCKET"]).st_mode & 0o777 == 0o600
        assert RelayCtl(env)("status").stdout.startswith("relayd: running")
    finally:
        daemon.stop()
    assert not os.path.exists(env["RELAY_SOCKET"])  # removed on the way out

    shared = short_tmp / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "relay.sock").symlink_to(short_tmp / "elsewhere.sock")  # someone's trap
    refused = _relayd_refusal(dict(relay_env, RELAY_SOCKET=str(shared / "relay.sock")))
    assert f"{shared / 'relay.sock'} is a symbolic link in a directory others can write to" in refused
    os.chmod(shared, 0o777)  # not sticky: anyone may replace the socket, so no
    refused = _relayd_refusal(dict(relay_env, RELAY_SOCKET=str(shared / "other.sock")))
    assert f"socket directory {shared} is writable by others or not yours" in refused
