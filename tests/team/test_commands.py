"""Slash commands: post, claim exactly once, done, --wait; through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relayd import ops
from relayd.store import Store

SESSION = "agent:main:main"


@pytest.mark.slow
def test_post_consume_done(relayctl, store_dir: Path) -> None:
    posted = json.loads(relayctl("--json", "cmd", SESSION, "/verify", "oathkeeper", "bd-42", agent="athena").stdout)
    assert posted["status"] == "pending" and posted["command"] == "/verify" and posted["args"] == "oathkeeper bd-42"
    on_disk = json.loads((store_dir / "commands" / f"{posted['id']}.json").read_text())
    assert {k: on_disk[k] for k in ("id", "from", "target_session", "command", "args", "status")} == {
        "id": posted["id"], "from": "athena", "target_session": SESSION, "command": "/verify", "args": "oathkeeper bd-42", "status": "pending",
    }
    # A quoted "COMMAND ARGS" is split the same way.
    second = json.loads(relayctl("--json", "cmd", SESSION, "/status now", agent="athena").stdout)
    assert (second["command"], second["args"]) == ("/status", "now")
    assert "PENDING COMMANDS (2)" in relayctl("status", "--commands").stdout

    other = json.loads(relayctl("--json", "cmd", "consume", "--session", "elsewhere", agent="glacier").stdout)
    assert other == []
    claimed = json.loads(relayctl("--json", "cmd", "consume", "--session", SESSION, agent="glacier").stdout)
    assert [c["id"] for c in claimed] == [posted["id"], second["id"]]
    assert all(c["status"] == "consumed" and c["consumed_by"] == "glacier" for c in claimed)
    assert json.loads(relayctl("--json", "cmd", "consume", "--session", SESSION, agent="storm").stdout) == []

    relayctl("cmd", "done", posted["id"], agent="glacier")
    shown = json.loads(relayctl("--json", "cmd", "show", posted["id"]).stdout)
    assert shown["status"] == "done" and shown["done_at"]
    assert json.loads((store_dir / "commands" / f"{posted['id']}.json").read_text())["status"] == "done"
    assert "PENDING COMMANDS (0)" in relayctl("status", "--commands").stdout


@pytest.mark.slow
def test_done_on_pending_and_unknown_ids_are_refused(relayctl) -> None:
    posted = json.loads(relayctl("--json", "cmd", SESSION, "/x", agent="athena").stdout)
    early = relayctl("cmd", "done", posted["id"], check=False)
    assert early.returncode == 1 and "still pending" in early.stderr
    unknown = relayctl("cmd", "done", "01JMHF5DEF0000000000000000", check=False)
    assert unknown.returncode == 1 and "no command" in unknown.stderr
    hostile = relayctl("cmd", "show", "../../etc/passwd", check=False)
    assert hostile.returncode == 2 and hostile.stderr.startswith("error: not a command id")


@pytest.mark.slow
def test_wait_returns_once_consumed(relayctl, relay_env) -> None:
    waiter = subprocess.Popen(
        [sys.executable, "-m", "relayctl", "--agent", "athena", "--json", "cmd", SESSION, "/verify", "--wait", "60s"],
        env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    claimed: list = []
    for _ in range(600):
        claimed = json.loads(relayctl("--json", "cmd", "consume", "--session", SESSION, agent="glacier").stdout)
        if claimed:
            break
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert json.loads(out)["status"] == "consumed" and json.loads(out)["id"] == claimed[0]["id"]


@pytest.mark.slow
def test_wait_times_out_with_exit_1(relayctl) -> None:
    proc = relayctl("cmd", SESSION, "/verify", "--wait", "0.2s", agent="athena", check=False)
    assert proc.returncode == 1 and "not consumed within 0.2s" in proc.stderr
    assert json.loads(relayctl("--json", "cmd", "list", "--status", "pending").stdout)[0]["command"] == "/verify"


@pytest.mark.slow
def test_four_consumers_over_a_thousand_commands(relay_env, store_dir: Path) -> None:
    with Store(str(store_dir), fsync=False) as store:
        posted = {ops.call(store, "cmd", {"agent": "athena", "session": SESSION, "command": f"/job {i}"})["id"] for i in range(1000)}
    consumers = [
        subprocess.Popen(
            [sys.executable, "-m", "relayctl", "--agent", f"consumer-{n}", "--json", "cmd", "consume", "--session", SESSION],
            env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for n in range(4)
    ]
    claims: dict[str, str] = {}
    per_consumer = []
    for n, proc in enumerate(consumers):
        out, err = proc.communicate(timeout=110)
        assert proc.returncode == 0, err
        got = json.loads(out)
        per_consumer.append(len(got))
        for command in got:
            assert command["id"] not in claims, f"{command['id']} claimed twice"
            claims[command["id"]] = f"consumer-{n}"
    assert set(claims) == posted
    # The files agree with what each consumer reported.
    for command_id, consumer in claims.items():
        record = json.loads((store_dir / "commands" / f"{command_id}.json").read_text())
        assert record["status"] == "consumed" and record["consumed_by"] == consumer
    assert sum(per_consumer) == 1000
    print("claims per consumer", per_consumer)


@pytest.mark.slow
def test_gc_reoffers_a_command_whose_consumer_died_mid_claim(relayctl, store_dir: Path) -> None:
    posted = json.loads(relayctl("--json", "cmd", SESSION, "/verify", agent="athena").stdout)
    marker = store_dir / "commands" / f"{posted['id']}.claim"
    marker.write_text("crashed-consumer\n")  # claimed, but the status was never rewritten
    assert json.loads(relayctl("--json", "cmd", "consume", "--session", SESSION, agent="glacier").stdout) == []
    relayctl("gc")
    assert marker.exists()  # a fresh claim is left alone
    os.utime(marker, (time.time() - 120, time.time() - 120))
    relayctl("gc")
    claimed = json.loads(relayctl("--json", "cmd", "consume", "--session", SESSION, agent="glacier").stdout)
    assert [c["id"] for c in claimed] == [posted["id"]]
