"""The one client handshake (relayd.wire.handshake): every client checks relayd's protocol
version and says which side to restart, against a real relayd and against a relayd of
another version (a socket answering hello as that relayd would)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Iterator

import pytest

from relayd.client import watch
from relayd.wire import handshake
from relayd.client.full import Client
from relayd.errors import VersionMismatch
from support.rawclient import RawClient
from support.unix_server import UnixServer


class OtherRelayd:
    """A Unix socket answering hello as a relayd speaking protocol `version` does, for
    every connection; what each client sent first is kept in `hellos`."""

    def __init__(self, path: str, store_dir: str, version: int) -> None:
        self.store_dir, self.version = store_dir, version
        self.hellos: list[dict] = []
        self.server = UnixServer(path, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            line = stream.readline()
            if not line:
                return
            self.hellos.append(json.loads(line))
            answer = {"type": "hello", "version": self.version, "server": "relayd 0.0.9", "store": self.store_dir}
            stream.write(json.dumps(answer).encode() + b"\n")
            stream.flush()
            stream.readline()  # until the client hangs up

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def other_relayd(relay_env: dict[str, str], relayctl) -> Iterator[callable]:
    relayctl("init", "--preset", "overlord")
    started: list[OtherRelayd] = []

    def start(version: int) -> OtherRelayd:
        server = OtherRelayd(relay_env["RELAY_SOCKET"], os.path.abspath(relay_env["RELAY_DIR"]), version)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_newer_client_against_real_relayd_is_told_to_restart_relayd(daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(daemon.store_dir, daemon.socket_path) as client:
        assert client.call("heartbeat", {"agent": "storm"}) is not None
        assert client.mode == "daemon"
    monkeypatch.setattr(handshake, "VERSION", handshake.VERSION + 1)  # this process: a newer install
    with Client(daemon.store_dir, daemon.socket_path) as client:
        with pytest.raises(VersionMismatch) as caught:
            client.call("heartbeat", {"agent": "storm"})
    assert str(caught.value) == f"relayd speaks protocol {handshake.VERSION - 1}, this relayctl {handshake.VERSION}: restart relayd"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_relayd_answers_an_older_client_in_its_own_version(daemon) -> None:
    """A relayd serves every client from protocol OLDEST on (each version only adds), so it
    answers an older client's hello with that client's version, which the client accepts;
    a newer client (or a hello without a usable version) is answered with relayd's own."""
    client = RawClient(daemon.socket_path)
    try:
        for theirs, answered in [(1, 1), (2, 2), (handshake.VERSION, handshake.VERSION), (handshake.VERSION + 1, handshake.VERSION), (0, handshake.VERSION)]:
            client.send_line({"type": "hello", "version": theirs, "client": "relay-mcp 0.0.9"})
            answer = client.line()
            assert answer["version"] == answered, theirs
        assert handshake.VERSION == 3  # (docs/protocol.md: version 3 added the session fields)
    finally:
        client.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [["--agent", "storm", "heartbeat"], ["reservations"]], ids=["fast path", "full CLI"])
def test_relayctl_against_an_older_relayd_says_restart_relayd(other_relayd, relayctl, argv: list[str], store_dir: Path) -> None:
    server = other_relayd(handshake.VERSION - 1)
    before = sorted(p.name for p in (store_dir / "agents" / "storm").iterdir())
    proc = relayctl(*argv, check=False)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip().endswith(f"relayd speaks protocol {handshake.VERSION - 1}, this relayctl {handshake.VERSION}: restart relayd")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert server.hellos[0]["version"] == handshake.VERSION and server.hellos[0]["client"].startswith("relayctl ")
    # nothing was done behind the mismatched relayd's back in direct mode
    assert sorted(p.name for p in (store_dir / "agents" / "storm").iterdir()) == before


@pytest.mark.timeout(60)
def test_relayctl_against_a_newer_relayd_says_restart_relayctl(other_relayd, relayctl) -> None:
    other_relayd(handshake.VERSION + 1)
    proc = relayctl("--agent", "storm", "read", "--unread", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(
        f"relayd speaks protocol {handshake.VERSION + 1}, this relayctl {handshake.VERSION}: "
        "this relayctl is older than relayd: restart relayctl (or run the one installed with relayd)"
    )


@pytest.mark.timeout(60)
def test_relay_mcp_names_itself(other_relayd, relay_env: dict[str, str]) -> None:
    other_relayd(handshake.VERSION - 1)
    with Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"], name="relay-mcp") as client:
        with pytest.raises(VersionMismatch, match=rf"this relay-mcp {handshake.VERSION}: restart relayd$"):
            client.call("status", {})


@pytest.mark.timeout(60)
def test_watch_falls_back_to_the_files_with_a_relayd_of_another_version(other_relayd, relay_env: dict[str, str]) -> None:
    """A follower keeps working on inotify; the requests beside it report the mismatch."""
    server = other_relayd(handshake.VERSION - 1)
    store_dir = os.path.abspath(relay_env["RELAY_DIR"])
    target = watch.inbox(store_dir, "storm")
    assert watch._DaemonLink.open(relay_env["RELAY_SOCKET"], store_dir, target, "relayctl") is None
    assert server.hellos and server.hellos[0]["type"] == "hello"


def test_ours_judges_the_answer() -> None:
    store = "/tmp/some-store"
    assert handshake.ours({"type": "hello", "version": handshake.VERSION, "store": store}, store, "relayctl") is True
    assert handshake.ours({"type": "hello", "version": handshake.VERSION, "store": "/tmp/other"}, store, "relayctl") is False
    assert handshake.ours({"type": "hello", "version": handshake.VERSION}, store, "relayctl") is False
    with pytest.raises(VersionMismatch):
        handshake.ours({"type": "hello", "store": store}, store, "relayctl")  # a relayd from before versions
