"""Receipts (relayd.delivery.receipts): per recipient, stored / announced how / read / acknowledged,
shown by `relayctl track`, waited on by `send --wait`, and a failed announcement bounced to
the sender once. Real relayctl processes and a real relayd; `cmd:false` is an arrival
mechanism that always fails, `cmd:true` one that always works.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relayd.arrival.notify import notify_new_messages
from relayd.store import Store
from support.relayd_proc import Daemon


@pytest.fixture
def team(relayctl):
    relayctl.setup("init")
    relayctl.setup("register", name="alice")
    relayctl.setup("register", name="bob", notify="cmd:false")
    relayctl.setup("register", name="carol", notify="cmd:true")
    return relayctl


def sent_id(proc) -> str:
    out = json.loads(proc.stdout)
    return (out[0] if isinstance(out, list) else out)["id"]


def bounces(relayctl, agent: str = "alice") -> list[dict]:
    return [m for m in json.loads(relayctl("--json", "read", "--last", "0", agent=agent).stdout) if m["from"] == "relay"]


def until(what: str, check, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


@pytest.mark.slow
def test_track_shows_who_was_announced_how_and_a_failure_bounces_once(team, store_dir: Path) -> None:
    first = sent_id(team("--json", "send", "bob,carol", "deploy at 14:00", agent="alice"))
    tracked = json.loads(team("--json", "track", first).stdout)
    assert tracked["from"] == "alice" and tracked["subject"] == "deploy at 14:00"
    ways = {w["to"]: w for w in tracked["recipients"]}
    assert set(ways) == {"bob", "carol"}
    assert ways["bob"]["announced"]["how"] == "cmd" and ways["bob"]["announced"]["ok"] is False
    assert "false exited 1" in ways["bob"]["announced"]["error"] and ways["bob"]["bounced"] is True
    assert ways["carol"]["announced"]["how"] == "cmd" and ways["carol"]["announced"]["ok"] is True and "bounced" not in ways["carol"]
    assert not ways["bob"]["read"] and not ways["carol"]["read"]

    [bounce] = bounces(team)
    assert first in bounce["body"] and "bob" in bounce["subject"] and "bounce" in bounce["tags"]
    with Store(str(store_dir)) as store:  # the failing announcement is tried again (relayd retries it): no second bounce
        assert notify_new_messages(store, ["bob"])[0]["ok"] is False
    second = sent_id(team("--json", "send", "bob", "and again", agent="alice"))
    assert [b["body"].count(first) + 2 * b["body"].count(second) for b in bounces(team)] == [1, 2]  # each message bounced once

    human = team("track", first).stdout
    assert "announcing by cmd failed" in human and "bounced to the sender" in human and "announced by cmd" in human


@pytest.mark.slow
def test_track_shows_read_and_acknowledged(team) -> None:
    message_id = sent_id(team("--json", "send", "carol", "owed one", "--ack", agent="alice"))
    [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
    assert (way["read"], way["ack"]) == (False, "owed")
    team("read", "--unread", "--mark-read", agent="carol")
    [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
    assert (way["read"], way["ack"]) == (True, "owed")
    team("ack", message_id, agent="carol")
    [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
    assert way["ack"] == "acked" and way["acked_at"]


@pytest.mark.slow
@pytest.mark.parametrize("with_relayd", [False, True])
def test_track_shows_when_each_recipient_read_it(team, relay_env: dict[str, str], with_relayd: bool) -> None:
    """The read time is when the recipient's cursor passed the message: a later read of newer
    mail does not move it, and a recipient that has not read it has none."""
    from datetime import datetime, timezone

    def now() -> str:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] + "Z"

    daemon = Daemon(relay_env).start() if with_relayd else None
    try:
        message_id = sent_id(team("--json", "send", "bob,carol", "read me", agent="alice"))
        time.sleep(0.01)
        before = now()
        team("read", "--unread", "--mark-read", agent="carol")
        after = now()
        team("send", "carol", "newer mail", agent="alice")
        team("read", "--unread", "--mark-read", agent="carol")  # passes only the newer one
        tracked = json.loads(team("--json", "track", message_id).stdout)
        ways = {w["to"]: w for w in tracked["recipients"]}
        assert ways["carol"]["read"] and before <= ways["carol"]["read_at"] <= after
        assert not ways["bob"]["read"] and "read_at" not in ways["bob"]
        assert f"read {ways['carol']['read_at']}" in team("track", message_id).stdout
    finally:
        if daemon is not None:
            daemon.stop()


@pytest.mark.slow
def test_track_of_an_unknown_id_is_one_line(team) -> None:
    proc = team("track", "01ARZ3NDEKTSV4RRFFQ69G5FAV", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: no message 01ARZ3NDEKTSV4RRFFQ69G5FAV") and proc.stderr.count("\n") == 1
    proc = team("track", "nope", check=False)
    assert proc.returncode != 0 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("with_relayd", [False, True])
def test_send_wait_read_returns_when_every_recipient_read_it(team, relay_env: dict[str, str], with_relayd: bool) -> None:
    daemon = Daemon(relay_env).start() if with_relayd else None
    try:
        late = subprocess.Popen(
            [sys.executable, "-m", "relayctl", "--agent", "alice", "send", "carol,bob", "nobody reads this", "--wait", "read", "--timeout", "2s"],
            env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        with late.stdout, late.stderr:
            stderr = late.stderr.read()
        _, status, usage = os.wait4(late.pid, 0)  # (its own CPU time, as Popen does not keep it)
        late.returncode = os.waitstatus_to_exitcode(status)
        assert late.returncode == 1
        assert "not read after 2s by 2 of 2" in stderr and "carol" in stderr and "bob" in stderr
        # Waiting is sleeping: a start-up's worth of CPU (~0.1 s, loaded or not), not a wake-up
        # loop's (2.1 s without relayd, 0.55 s beside a relayd that takes its share).
        assert usage.ru_utime + usage.ru_stime < 0.3, f"the waiting relayctl used {usage.ru_utime + usage.ru_stime:.2f} CPU-seconds in 2 s"

        waiting = subprocess.Popen(
            [sys.executable, "-m", "relayctl", "--agent", "alice", "send", "carol", "read me", "--wait", "read", "--timeout", "60s"],
            env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        until("the message", lambda: "read me" in team("read", "--last", "0", agent="carol").stdout)
        assert waiting.poll() is None  # still waiting: carol has not read it
        team("read", "--unread", "--mark-read", agent="carol")
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
    finally:
        if daemon is not None:
            daemon.kill()


@pytest.mark.slow
def test_send_wait_ack_needs_ack_and_returns_on_the_ack(team, relay_env: dict[str, str]) -> None:
    refused = team("send", "carol", "hi", "--wait", "ack", agent="alice", check=False)
    assert refused.returncode == 2 and refused.stderr.strip() == "error: --wait ack needs --ack (only a message sent with --ack is acknowledged)"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "relayctl", "--agent", "alice", "--json", "send", "carol", "ack me", "--ack", "--wait", "ack", "--timeout", "60s"],
        env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    message = until("the message", lambda: [m for m in json.loads(team("--json", "read", "--last", "0", agent="carol").stdout) if m["body"] == "ack me"])[0]
    team("read", "--unread", "--mark-read", agent="carol")
    assert waiting.poll() is None  # read, not yet acknowledged
    team("ack", message["id"], agent="carol")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err


@pytest.mark.slow
def test_relayd_bounces_a_failed_announcement_to_the_sender(team, relay_env: dict[str, str]) -> None:
    daemon = Daemon(relay_env).start()
    try:
        message_id = sent_id(team("--json", "send", "bob", "through relayd", agent="alice"))
        [bounce] = until("the bounce", lambda: bounces(team))
        assert message_id in bounce["body"]
        [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
        assert way["announced"]["ok"] is False and way["bounced"] is True
    finally:
        daemon.kill()


@pytest.mark.slow
def test_a_hook_handing_mail_to_the_model_is_its_announcement(team, relay_env: dict[str, str]) -> None:
    team("register", "dave", "--notify", "hook")
    message_id = sent_id(team("--json", "send", "dave", "review bd-7", agent="alice"))
    [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
    assert way["mechanism"] == "hook" and "announced" not in way and not way["read"]
    hook = subprocess.run(
        [sys.executable, "-m", "relayctl", "--agent", "dave", "hook", "claude"],
        input=json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s"}), env=relay_env, capture_output=True, text=True, timeout=60,
    )
    assert hook.returncode == 0 and "review bd-7" in hook.stdout, hook.stderr
    [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
    assert way["announced"]["how"] == "hook" and way["announced"]["ok"] is True and way["read"]


def test_a_door_that_started_the_turn_is_shown_as_the_announcement_though_the_turns_hook_wrote_first(team, store_dir: Path) -> None:
    """A door's receipt is written once the program took the message (`codex queue` returns
    after Codex began the turn), stamped when relay began to hand it over; the turn's prompt
    hook may write its own in between. `track` names the door: it told the agent first."""
    from relayd.delivery.receipts import announced
    from relayd.timefmt import now_iso

    team("register", "erin", "--notify", "hook")
    message_id = sent_id(team("--json", "send", "erin", "the brief", agent="alice"))
    began = now_iso()
    time.sleep(0.002)  # (the hook's stamp is a later millisecond)
    hook = team("--json", "hook", "claude", agent="erin", input=json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s"}))
    assert "the brief" in hook.stdout
    with Store(str(store_dir)) as store:
        announced(store, [{"agent": "erin", "method": "codex-queue", "ok": True}], started={"erin": began})
    [way] = json.loads(team("--json", "track", message_id).stdout)["recipients"]
    assert (way["announced"]["how"], way["announced"]["at"]) == ("codex-queue", began) and way["read"]


def agent_status(team, name: str) -> dict:
    return next(a for a in json.loads(team("--json", "status", "--agents").stdout)["agents"] if a["name"] == name)


@pytest.mark.slow
def test_status_says_when_announcements_keep_failing_and_when_they_work_again_relayd_up(team, relay_env: dict[str, str]) -> None:
    """relayd retries a failing trigger; `status` (text and --json) says it fails, since
    when, how many times and why, until a fixed target makes an announcement work."""
    daemon = Daemon(relay_env, "--retry-interval", "0.2s").start()
    try:
        team("send", "bob,carol", "through relayd", agent="alice")
        failing = until("retried failures", lambda: (a := agent_status(team, "bob")["announced"]) and a["failures"] >= 3 and a)
        assert failing["ok"] is False and failing["how"] == "cmd" and "false exited 1" in failing["error"]
        assert failing["failing_since"] < failing["at"] and "earlier" not in failing
        assert agent_status(team, "carol")["announced"]["ok"] is True and agent_status(team, "bob")["arrives_by"] == "cmd:false"
        text = team("status", "--agents").stdout
        assert "MAIL ARRIVAL (1 failing)" in text
        assert re.search(r"^  bob +cmd:false +FAILING since 20\d\d-\d\d-\d\d \d\d:\d\d UTC, \d+ times in a row, last \d+s ago: false exited 1$", text, re.M), text
        assert re.search(r"^  carol +cmd:true +told \d+s ago$", text, re.M) and re.search(r"^  alice +channel +never told$", text, re.M), text
        team("register", "bob", "--notify", "cmd:true")  # the fix; relayd's next retry tells bob of its unread mail
        healthy = until("a working announcement", lambda: (a := agent_status(team, "bob")["announced"]) and a["ok"] and a)
        assert "failures" not in healthy and "error" not in healthy and healthy["how"] == "cmd"
        text = team("status", "--agents").stdout
        assert "MAIL ARRIVAL (0 failing)" in text and re.search(r"^  bob +cmd:true +told \d+s ago$", text, re.M), text
    finally:
        daemon.stop()


@pytest.mark.slow
def test_status_says_when_announcements_keep_failing_relayd_down(team) -> None:
    """In direct mode each send notifies; status reads the same record from the store."""
    assert agent_status(team, "bob")["announced"] is None
    assert re.search(r"^  bob +cmd:false +never told$", team("status", "--agents").stdout, re.M)
    for subject in ("first", "second"):
        team("send", "bob", subject, agent="alice")
    failing = agent_status(team, "bob")["announced"]
    assert failing["failures"] == 2 and failing["failing_since"] < failing["at"] and "false exited 1" in failing["error"]
    text = team("status", "--agents").stdout
    assert "relayd: not running" in text and re.search(r"^  bob +cmd:false +FAILING since .* UTC, 2 times in a row, last \d+s ago: false exited 1$", text, re.M), text
    team("register", "bob", "--notify", "cmd:true")
    team("send", "bob", "third", agent="alice")
    healthy = agent_status(team, "bob")["announced"]
    assert healthy["ok"] is True and "failures" not in healthy
    assert "FAILING" not in team("status", "--agents").stdout and "MAIL ARRIVAL (0 failing)" in team("status").stdout


@pytest.mark.slow
def test_failures_older_than_the_window_read_are_marked_as_going_back_further(team, store_dir: Path) -> None:
    """status reads a day of the delivery log: a run of failures that began before it says
    so instead of claiming it began at the oldest failure read."""
    from datetime import timedelta

    from relayd.delivery import receipts
    from relayd.timefmt import now, to_iso

    reference = now()

    def failed(days_ago: float, who: str) -> receipts.Receipt:
        return receipts.Receipt(ts=to_iso(reference - timedelta(days=days_ago)), step="announced", to=who, how="cmd", ok=False, error="false exited 1")

    with Store(str(store_dir)) as store:
        receipts.write(store, [failed(3, "bob"), failed(0.5, "bob"), failed(0.1, "bob"), failed(0.5, "carol")])
        told = receipts.last_announcements(store, ["bob", "carol", "alice"])
    assert told["bob"].failures == 2 and told["bob"].earlier and told["bob"].failing_since == told["carol"].at
    assert told["carol"].failures == 1 and told["carol"].earlier and "alice" not in told
    assert "since before " in team("status", "--agents").stdout


def _registered_days_ago(store_dir: Path, name: str, days: float) -> None:
    """Set an agent's registration time back, as if it had been made `days` ago."""
    from datetime import timedelta

    from relayd.timefmt import now, to_iso

    meta_path = store_dir / "agents" / name / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["registered_at"] = to_iso(now() - timedelta(days=days))
    meta_path.write_text(json.dumps(meta) + "\n")


@pytest.mark.slow
def test_status_says_never_told_only_of_an_agent_younger_than_the_day_it_reads(team, store_dir: Path) -> None:
    """An agent registered within the day of delivery log that status reads, and not told
    there, was never told; an older one may have been told before that day."""
    _registered_days_ago(store_dir, "carol", 3)
    text = team("status", "--agents").stdout
    assert re.search(r"^  bob +cmd:false +never told$", text, re.M), text
    assert re.search(r"^  carol +cmd:true +not told in 24h$", text, re.M), text
    agents = {a["name"]: a for a in json.loads(team("--json", "status", "--agents").stdout)["agents"]}
    assert agents["bob"]["never_told"] is True and agents["carol"]["never_told"] is False


@pytest.mark.slow
def test_the_arrival_method_is_what_the_agent_has(relayctl) -> None:
    """Without --notify, relay-mcp's channel is how a Claude Code agent (or one of no named
    program, as relay-mcp registers them) is told; a Codex or Gemini CLI agent has no
    channel, and status and track say it sees mail only when it reads."""
    relayctl("init")
    relayctl("register", "lead", "--program", "claude-code")
    relayctl("register", "plain")
    relayctl("register", "coder", "--program", "codex")
    relayctl("register", "gem", "--program", "gemini")
    relayctl("register", "hooked", "--program", "codex", "--notify", "hook")
    agents = {a["name"]: a["arrives_by"] for a in json.loads(relayctl("--json", "status", "--agents").stdout)["agents"]}
    assert agents == {"lead": "channel", "plain": "channel", "coder": "none", "gem": "none", "hooked": "hook"}
    text = relayctl("status", "--agents").stdout
    assert re.search(r"^  coder +none +not announced: it sees mail when it reads", text, re.M), text
    assert not re.search(r"^  (coder|gem) +channel", text, re.M), text
    sent = sent_id(relayctl("--json", "send", "coder,lead", "review please", agent="lead"))
    ways = {w["to"]: w["mechanism"] for w in json.loads(relayctl("--json", "track", sent).stdout)["recipients"]}
    assert ways == {"coder": "none", "lead": "channel"}


@pytest.mark.slow
@pytest.mark.parametrize("relayd_up", [False, True], ids=["direct", "relayd"])
def test_a_sender_or_holder_that_is_not_registered_is_warned_and_still_served(team, relay_env: dict[str, str], relayd_up: bool) -> None:
    """A typo in your own --agent is accepted (scripts may speak for unregistered names), but
    stderr says so; a registered name gets no warning."""
    daemon = Daemon(relay_env).start() if relayd_up else None
    try:
        typo = team("send", "bob", "hello", agent="alcie")
        assert typo.stdout.startswith("sent ") and typo.stderr.startswith("warning: alcie is not a registered agent; sent as alcie all the same"), typo.stderr
        assert len(typo.stderr.splitlines()) == 1 or "notifying bob failed" in typo.stderr
        assert "not a registered agent" not in team("send", "carol", "hello", agent="alice").stderr
        held = team("reserve", "src/**", "--repo", str(Path(relay_env["RELAY_DIR"]).parent), agent="alcie")
        assert held.stdout.startswith("reserved ") and "warning: alcie is not a registered agent; reserved as alcie all the same" in held.stderr
        quiet = team("--json", "send", "carol", "hi", agent="alcie")
        assert json.loads(quiet.stdout)["from"] == "alcie" and "not a registered agent" in quiet.stderr
    finally:
        if daemon is not None:
            daemon.stop()
