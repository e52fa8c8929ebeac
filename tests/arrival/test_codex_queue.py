"""relay's Codex queue door without Codex: what the hooks report, what relay keeps, and why
status says it is not used (relayd.arrival.codex_queue). The door in the real Codex is
test_codex_queue_real.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.cli_processes import RelayCtl

AGENT = "inferno"
THREAD = "01a233e0-5aba-7592-8d9d-ac6873d3e043"


def _team(relayctl: RelayCtl) -> None:
    relayctl.setup("init")
    relayctl.setup("register", name=AGENT, notify="tmux:%1")


def _agent_status(relayctl: RelayCtl) -> dict:
    return next(a for a in json.loads(relayctl("--json", "status").stdout)["agents"] if a["name"] == AGENT)


def _door(store_dir: Path) -> dict:
    return json.loads((store_dir / "agents" / AGENT / "codex-queue").read_text())


def test_a_hook_outside_codex_reports_the_thread_and_status_says_why_the_queue_is_not_used(relayctl: RelayCtl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    _team(relayctl)
    event = {"hook_event_name": "UserPromptSubmit", "session_id": THREAD, "prompt": "hello", "cwd": str(short_tmp)}
    env = {**relay_env, "RELAY_AGENT": AGENT, "CODEX_HOME": str(short_tmp / "codex-home")}
    hook = subprocess.run([sys.executable, "-m", "relayctl", "hook", "codex"], env=env, input=json.dumps(event), capture_output=True, text=True, timeout=60)
    assert hook.returncode == 0 and hook.stderr == ""
    door = _door(store_dir)
    assert door["thread"] == THREAD and door["codex_home"] == str(short_tmp / "codex-home")
    assert door["unusable"] == "relay's hook found no Codex process above it"
    status = _agent_status(relayctl)
    assert status["arrives_by"].startswith("tmux") and status["door_unusable"] == f"Codex queue: {door['unusable']}"
    assert "not its Codex queue: relay's hook found no Codex process above it" in relayctl("status").stdout


def test_a_process_that_is_not_codex_or_is_gone_is_never_queued_into(relayctl: RelayCtl, store_dir: Path) -> None:
    _team(relayctl)
    relayctl.setup("codex_queue", agent=AGENT, thread=THREAD, pid=os.getpid(), codex_home="/nowhere")
    assert "not Codex" in _door(store_dir)["unusable"]
    gone = subprocess.Popen(["true"])
    gone.wait()
    relayctl.setup("codex_queue", agent=AGENT, thread=THREAD, pid=gone.pid, codex_home="/nowhere")
    assert _door(store_dir)["unusable"] == f"no Codex process {gone.pid}"
    relayctl.setup("codex_queue", agent=AGENT, thread="", pid=0, codex_home="/nowhere", missing="its hook event carried no session_id")
    assert _agent_status(relayctl)["door_unusable"] == "Codex queue: its hook event carried no session_id"
