"""wake finds the OpenClaw gateway in ~/.openclaw/openclaw.json when config.json names none.

The gateway's HTTP wake hook is played by a real HTTP server on 127.0.0.1 that records
what it receives (an OpenClaw gateway needs Node, a model provider and onboarding); the
`openclaw` command by a recording script on PATH, for the same reason.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest


class Hook:
    """POST /hooks/wake with the right bearer token answers 200; anything else 401."""

    def __init__(self, token: str) -> None:
        self.requests: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (the http.server API)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(body)})
                ok = self.headers.get("Authorization") == f"Bearer {token}"
                self.send_response(200 if ok else 401)
                self.end_headers()
                self.wfile.write(b'{"ok":true}' if ok else b"unauthorized")

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    served = Hook("s3cret")
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def home(short_tmp: Path, relay_env: dict[str, str], relayctl: Any) -> Path:
    """A temp HOME (where ~/.openclaw lives) and PATH without any openclaw command."""
    path = short_tmp / "home"
    (path / ".openclaw").mkdir(parents=True)
    relay_env["HOME"] = str(path)
    relay_env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    relay_env.pop("OPENCLAW_CONFIG_PATH", None)
    relayctl("init")
    return path


def _openclaw_json(home: Path, port: int, token: str = "${HOOK_TOKEN}") -> None:
    # JSON5 as OpenClaw writes and people edit it: comments, unquoted keys, trailing commas.
    (home / ".openclaw" / "openclaw.json").write_text(
        f"""// OpenClaw configuration
{{
  gateway: {{ mode: "local", bind: "loopback", port: {port}, }},
  /* wake-ups from outside */
  hooks: {{ enabled: true, token: '{token}', path: "/hooks", }},
}}
"""
    )


@pytest.mark.slow
def test_wake_uses_the_openclaw_hook_named_in_openclaw_json(home: Path, hook: Hook, relayctl: Any, relay_env: dict[str, str]) -> None:
    _openclaw_json(home, hook.port)
    relay_env["HOOK_TOKEN"] = "s3cret"  # OpenClaw's ${VAR} substitution
    proc = relayctl("--json", "wake", "Agent bd-42 completed", agent="agent-bd-42")
    result = json.loads(proc.stdout)
    assert result["method"] == "socket"
    assert "no openclaw command on PATH" in result["tried"][0]["error"]
    assert hook.requests == [{"path": "/hooks/wake", "auth": "Bearer s3cret", "body": {"text": "Agent bd-42 completed", "mode": "now"}}]


@pytest.mark.slow
def test_a_refused_hook_falls_through_to_the_file_trigger(home: Path, hook: Hook, relayctl: Any, store_dir: Path) -> None:
    _openclaw_json(home, hook.port, token="wrong")
    proc = relayctl("wake", "still delivered")
    assert "woke via file" in proc.stdout and f"127.0.0.1:{hook.port}/hooks/wake answered 401" in proc.stdout
    assert (store_dir / "wake" / "last-message").read_text() == "still delivered\n"


@pytest.mark.slow
def test_the_openclaw_command_is_the_gateway_layer(home: Path, hook: Hook, relayctl: Any, relay_env: dict[str, str], short_tmp: Path) -> None:
    _openclaw_json(home, hook.port)
    bindir = short_tmp / "bin"
    bindir.mkdir()
    record = short_tmp / "openclaw-argv.json"
    script = bindir / "openclaw"
    script.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    relay_env["PATH"] = f"{bindir}{os.pathsep}{relay_env['PATH']}"
    proc = relayctl("wake", "check results")
    assert "woke via gateway" in proc.stdout
    assert json.loads(record.read_text()) == ["system", "event", "--mode", "now", "--text", "check results"]
    assert hook.requests == []


@pytest.mark.slow
def test_config_json_wins_and_openclaw_json_is_then_not_read(home: Path, hook: Hook, relayctl: Any, store_dir: Path) -> None:
    _openclaw_json(home, hook.port)
    (store_dir / "config.json").write_text(json.dumps({"wake": {"gateway_socket": str(store_dir / "no-such.sock")}}))
    proc = relayctl("wake", "configured")
    assert "woke via file" in proc.stdout and "no such socket" in proc.stdout
    assert hook.requests == []


@pytest.mark.slow
def test_a_broken_openclaw_json_is_reported_and_wake_still_works(home: Path, relayctl: Any) -> None:
    (home / ".openclaw" / "openclaw.json").write_text('{ gateway: { port: "not a port" } }')
    proc = relayctl("wake", "anyway")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "woke via file" in proc.stdout and "gateway.port is not a port number" in proc.stdout
