"""wake (gateway, socket, file layers), the systemd units, and gc."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from relayd.timefmt import now, to_iso
from support import inproc
from support.ack_team import Clock
from support.paths import ROOT



def _config(store_dir: Path, **wake: object) -> None:
    (store_dir / "config.json").write_text(json.dumps({"wake": wake}))


def _gateway(short_tmp: Path, exit_code: int = 0) -> tuple[list[str], Path]:
    record = short_tmp / f"gateway-{exit_code}.json"
    script = short_tmp / f"wake-gateway-{exit_code}.py"
    script.write_text(f"import json, sys\nopen({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.exit({exit_code})\n")
    return [sys.executable, str(script)], record


class GatewaySocket:
    """A Unix socket that accepts one wake line and answers ok."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.received: list[dict] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            self.received.append(json.loads(data))
            conn.sendall(b'{"ok": true}\n')

    def close(self) -> None:
        self.thread.join(timeout=30)
        self.server.close()


@pytest.mark.slow
def test_wake_falls_back_to_the_file_trigger(relayctl, store_dir: Path) -> None:
    relayctl("init")
    proc = relayctl("wake", "Agent bd-42 completed. Check results.", agent="athena")
    assert "woke via file" in proc.stdout
    assert (store_dir / "wake" / "last-message").read_text() == "Agent bd-42 completed. Check results.\n"
    assert "athena" in (store_dir / "wake" / "trigger").read_text()
    events = [json.loads(line) for line in (store_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["topic"] == "wake" and e["agent"] == "athena" for e in events)


def test_wake_by_gateway_command(relayctl, store_dir: Path, short_tmp: Path) -> None:
    relayctl("init")
    argv, record = _gateway(short_tmp)
    _config(store_dir, gateway_command=argv)
    result = json.loads(relayctl("--json", "wake", "done with bd-42").stdout)
    assert result["method"] == "gateway" and json.loads(record.read_text()) == ["done with bd-42"]
    assert not (store_dir / "wake" / "trigger").exists()


@pytest.mark.slow
def test_failed_gateway_falls_through_to_the_socket(relayctl, store_dir: Path, short_tmp: Path) -> None:
    relayctl("init")
    argv, _ = _gateway(short_tmp, exit_code=3)
    gateway = GatewaySocket(short_tmp / "gw.sock")
    try:
        _config(store_dir, gateway_command=argv, gateway_socket=gateway.path)
        proc = relayctl("wake", "review please", agent="athena")
    finally:
        gateway.close()
    assert "woke via socket" in proc.stdout and "gateway:" in proc.stdout and "exited 3" in proc.stdout
    assert gateway.received[0]["type"] == "wake" and gateway.received[0]["text"] == "review please"
    assert gateway.received[0]["from"] == "athena"


@pytest.mark.slow
def test_a_forced_method_that_fails_exits_1(relayctl, store_dir: Path, short_tmp: Path) -> None:
    relayctl("init")
    _config(store_dir, gateway_socket=str(short_tmp / "nobody.sock"))
    proc = relayctl("wake", "--method", "socket", "x", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: wake failed") and "no such socket" in proc.stderr
    assert not (store_dir / "wake" / "trigger").exists()


@pytest.mark.slow
def test_send_and_cmd_wake(relayctl, store_dir: Path) -> None:
    relayctl("init", "--preset", "overlord")
    sent = relayctl("send", "overlord", "Bead bd-42 complete", "--wake", agent="inferno")
    assert "woke via file" in sent.stdout
    assert "Bead bd-42 complete" in (store_dir / "wake" / "last-message").read_text()
    posted = relayctl("cmd", "agent:main:main", "/verify", "bd-42", "--wake", agent="inferno")
    assert "woke via file" in posted.stdout and "/verify" in (store_dir / "wake" / "last-message").read_text()


@pytest.mark.slow
def test_forward_hands_the_file_wake_to_the_gateway(relayctl, store_dir: Path, short_tmp: Path) -> None:
    relayctl("init")
    relayctl("wake", "--method", "file", "from the trigger")
    argv, record = _gateway(short_tmp)
    _config(store_dir, gateway_command=argv)
    assert "forwarded via gateway" in relayctl("wake", "--forward").stdout
    assert json.loads(record.read_text()) == ["from the trigger"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_units_verify(short_tmp: Path) -> None:
    runtime = short_tmp / "runtime"
    runtime.mkdir(mode=0o700)
    units = [str(ROOT / "contrib" / "systemd" / name) for name in ("relay-wake.path", "relay-wake.service")]
    proc = subprocess.run(
        ["systemd-analyze", "--user", "verify", *units],
        env=dict(os.environ, XDG_RUNTIME_DIR=str(runtime)), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


# -- gc -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gc_expired_reservations_stale_agents_old_commands(relayctl, relay_env: dict[str, str], store_dir: Path, short_tmp: Path) -> None:
    """Through relayd (its server in this process, its store on a clock the test moves on)."""
    relayctl("init", "--preset", "overlord")
    clock = Clock(time.time())
    with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], clock=clock):
        repo = str(short_tmp)
        relayctl("reserve", "old/**", "--ttl", "1s", "--repo", repo, agent="inferno")
        relayctl("reserve", "live/**", "--ttl", "1h", "--repo", repo, agent="inferno")
        old = json.loads(relayctl("--json", "cmd", "s", "/old", agent="overlord").stdout)
        recent = json.loads(relayctl("--json", "cmd", "s", "/recent", agent="overlord").stdout)
        waiting = json.loads(relayctl("--json", "cmd", "other", "/waiting", agent="overlord").stdout)
        relayctl("cmd", "consume", "--session", "s", agent="glacier")
        relayctl("cmd", "done", old["id"], agent="glacier")
        # Pretend the first command finished two hours ago.
        path = store_dir / "commands" / f"{old['id']}.json"
        record = json.loads(path.read_text())
        record["done_at"] = to_iso(now() - timedelta(hours=2))
        path.write_text(json.dumps(record))
        clock.now += 1.001  # the 1 s reservation expires, by the store's clock

        dry = json.loads(relayctl("--json", "gc", "--dry-run", "--stale", "1h").stdout)
        assert [r["pattern"] for r in dry["reservations"]] == ["old/**"] and dry["commands"] == [old["id"]]
        assert len(json.loads(relayctl("--json", "reservations", "--expired").stdout)) == 2  # nothing removed

        only = json.loads(relayctl("--json", "gc", "--expired-only", "--stale", "0s").stdout)
        assert [r["pattern"] for r in only["reservations"]] == ["old/**"] and only["agents"] == [] and only["commands"] == []
        assert [r["pattern"] for r in json.loads(relayctl("--json", "reservations", "--expired").stdout)] == ["live/**"]

        relayctl("heartbeat", agent="glacier")
        full = json.loads(relayctl("--json", "gc", "--stale", "0s").stdout)
        assert "glacier" in full["agents"] and full["commands"] == [old["id"]]
        assert not path.exists() and not (store_dir / "commands" / f"{old['id']}.claim").exists()
        left = {c["id"] for c in json.loads(relayctl("--json", "cmd", "list").stdout)}
        assert left == {recent["id"], waiting["id"]}
        glacier = store_dir / "agents" / "glacier"
        assert (glacier / "heartbeat.stale").exists() and not (glacier / "heartbeat").exists()
        assert "ARCHIVED" in relayctl("status", "--agents").stdout
        relayctl("heartbeat", agent="glacier")  # back again
        assert (glacier / "heartbeat").exists() and not (glacier / "heartbeat.stale").exists()
