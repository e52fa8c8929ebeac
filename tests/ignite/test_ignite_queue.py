"""Serving an IGNITE queue directory: files in, relay deliveries out, retries with the shared
backoff on an injected clock, dead letters with an escalation to leader, crash recovery."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relayd.client.full import Client
from relayd.ignite import mime

from support.cli_processes import stop_child
from support.relayd_proc import Daemon
from support.ignite_queue import START, TIMEOUT, Clock, drop, inbox, make_monitor, queue, team  # noqa: F401  (fixtures)
from support.recording_pane import TRIGGER, Tmux, tmux  # noqa: F401  (a fixture)
from support.waiting import wait_for
from support.paths import SUPPORT

def headers(path: Path) -> dict:
    return mime.read_file(str(path)).fields()


@pytest.mark.slow
def test_a_file_is_taken_marked_and_announced_without_its_body(relayctl, team, queue: Path, relay_env) -> None:
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime")
    clock = Clock()
    out = make_monitor(relay_env, queue, clock).run_once()
    done = queue / "ignitian_1" / "processed" / "task_assignment_1770263544123456.mime"
    assert out.delivered == [str(done)] and not (queue / "ignitian_1" / "task_assignment_1770263544123456.mime").exists()
    fields = headers(done)
    assert fields["status"] == "delivered" and fields["processed_at"] == mime.iso_seconds(START)
    assert fields["body"] == 'task_id: "task_001"\ntitle: "Write the parser"\n'  # the agent's file is untouched otherwise
    [notice] = inbox(relay_env, "ignitian_1")
    assert str(done) in notice["subject"] and str(done) in notice["body"] and "Write the parser" not in notice["body"]
    assert (notice["from_"], notice["type"], notice["priority"]) == ("coordinator", "task_assignment", "high")
    assert mime.read_file(str(done)).get("X-Relay-Notice") == notice["id"]


@pytest.mark.slow
def test_timeouts_retry_with_backoff_then_dead_letter_and_escalate(relayctl, team, queue: Path, relay_env) -> None:
    drop(relayctl, queue, "ignitian_2", "task_assignment_1770263544123456.mime")
    done = queue / "ignitian_2" / "processed" / "task_assignment_1770263544123456.mime"
    clock = Clock()
    monitor = make_monitor(relay_env, queue, clock)
    first = monitor.run_once()
    assert first.delivered and first.next_due == START + TIMEOUT
    delivered_at = START
    # ack_wait 10s, rand 0.5: waits of 0.5 * min(300, 10 * 2**(n-1)) = 5, 10, 20 seconds
    for retry, wait in ((1, 5), (2, 10), (3, 20)):
        clock.now = delivered_at + TIMEOUT - 1
        assert not monitor.run_once().retrying  # not yet
        clock.now = delivered_at + TIMEOUT
        out = monitor.run_once()
        assert out.retrying == [str(done)]
        fields = headers(done)
        assert (fields["status"], fields["retry_count"]) == ("retrying", str(retry))
        assert fields["next_retry_at"] == mime.iso_seconds(clock.now + wait) and out.next_due == clock.now + wait
        clock.now += wait - 1
        assert not monitor.run_once().delivered  # backing off
        clock.now += 1
        assert monitor.run_once().delivered == [str(done)]
        assert headers(done)["status"] == "delivered"
        delivered_at = clock.now
    clock.now = delivered_at + TIMEOUT
    out = monitor.run_once()
    dead = queue / "dead_letter" / "task_assignment_1770263544123456.mime"
    assert out.dead_lettered == [str(dead)] and not done.exists()
    fields = headers(dead)
    assert fields["status"] == "dead_letter" and fields["retry_count"] == "3" and "4 deliveries" in fields["error_reason"]
    [escalation] = out.escalations
    assert os.path.dirname(escalation) == str(queue / "leader")
    assert os.path.basename(escalation) == f"escalation_{int(clock.now * 1_000_000):016d}.mime"
    # the escalation is itself a queue file: leader's queue comes later in the same pass,
    # so it is already taken and delivered to leader through relay
    taken = queue / "leader" / "processed" / os.path.basename(escalation)
    assert out.delivered == [str(taken)]
    esc = headers(taken)
    assert (esc["from"], esc["to"], esc["type"], esc["priority"]) == ("queue_monitor", ["leader"], "escalation", "critical")
    assert 'task_id: "task_001"' in esc["body"] and 'original_assignee: "ignitian_2"' in esc["body"] and "retry_count: 3" in esc["body"]
    assert f'dlq_path: "{dead}"' in esc["body"]
    notices = inbox(relay_env, "ignitian_2")
    assert [n["tags"][0] for n in notices] == [f"ignite:task_assignment_1770263544123456.mime#{n}" for n in range(4)]
    [to_leader] = inbox(relay_env, "leader")
    assert to_leader["type"] == "escalation" and to_leader["priority"] == "urgent"
    clock.now += 10 * TIMEOUT
    monitor.run_once()
    assert sorted(p.name for p in (queue / "dead_letter").iterdir()) == ["task_assignment_1770263544123456.mime"]


@pytest.mark.slow
def test_an_agent_finishes_a_file_by_deleting_it(relayctl, team, queue: Path, relay_env) -> None:
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime")
    clock = Clock()
    monitor = make_monitor(relay_env, queue, clock)
    monitor.run_once()
    (queue / "ignitian_1" / "processed" / "task_assignment_1770263544123456.mime").unlink()
    clock.now += 100 * TIMEOUT
    out = monitor.run_once()
    assert not (out.retrying or out.dead_lettered or out.delivered)
    assert len(inbox(relay_env, "ignitian_1")) == 1


@pytest.mark.slow
def test_malformed_files_are_moved_aside_and_the_rest_still_flows(relayctl, team, queue: Path, relay_env) -> None:
    (queue / "ignitian_1" / "junk_1770263544000001.mime").write_text("this is not a message\n")
    (queue / "ignitian_1" / "notype_1770263544000002.mime").write_text("From: coordinator\nTo: ignitian_1\n\nx: 1\n")
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544000003.mime")
    out = make_monitor(relay_env, queue, Clock()).run_once()
    aside = queue / "ignitian_1" / "malformed"
    assert sorted(p.name for p in aside.iterdir()) == ["junk_1770263544000001.mime", "notype_1770263544000002.mime"]
    assert (aside / "junk_1770263544000001.mime").read_text() == "this is not a message\n"  # moved, never rewritten
    assert len(out.delivered) == 1 and len(inbox(relay_env, "ignitian_1")) == 1


@pytest.mark.slow
def test_a_file_written_straight_into_processed_is_announced(relayctl, team, queue: Path, relay_env) -> None:
    # IGNITE's own examples build -o queue/leader/processed/user_goal_....mime
    path = queue / "leader" / "processed" / "user_goal_1738315200123456.mime"
    relayctl("mime", "build", "--from", "user", "--to", "leader", "--type", "user_goal", "--body", 'goal: "README"', "-o", str(path))
    out = make_monitor(relay_env, queue, Clock()).run_once()
    assert out.delivered == [str(path)] and headers(path)["status"] == "delivered"
    assert inbox(relay_env, "leader")[0]["from_"] == "user"


class Crash(BaseException):
    """Stands for the process dying at this point."""


def test_a_crash_after_the_send_does_not_deliver_twice(relayctl, team, queue: Path, relay_env) -> None:
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime")
    clock = Clock()
    client = Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"])
    dying = make_monitor(relay_env, queue, clock, client)

    def send_then_die(params: dict) -> dict:
        client.call("send", params)
        raise Crash

    dying.send = send_then_die
    with pytest.raises(Crash):
        dying.run_once()
    done = queue / "ignitian_1" / "processed" / "task_assignment_1770263544123456.mime"
    assert headers(done)["status"] == "processing"
    out = make_monitor(relay_env, queue, clock).run_once()  # the restart
    assert headers(done)["status"] == "delivered" and not out.delivered
    assert len(inbox(relay_env, "ignitian_1")) == 1


def test_a_crash_before_the_send_delivers_once_after_restart(relayctl, team, queue: Path, relay_env) -> None:
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime")
    clock = Clock()
    dying = make_monitor(relay_env, queue, clock)

    def die(params: dict) -> dict:
        raise Crash

    dying.send = die
    with pytest.raises(Crash):
        dying.run_once()
    assert inbox(relay_env, "ignitian_1") == []
    out = make_monitor(relay_env, queue, clock).run_once()
    assert len(out.delivered) == 1 and len(inbox(relay_env, "ignitian_1")) == 1


def test_a_crash_half_way_into_dead_letter_finishes_once(relayctl, team, queue: Path, relay_env) -> None:
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime")
    clock = Clock()
    monitor = make_monitor(relay_env, queue, clock)
    monitor.policy = type(monitor.policy)(monitor.policy.base, monitor.policy.cap, 1)
    monitor.run_once()
    clock.now += TIMEOUT
    monitor.run_once()  # retrying
    clock.now += 300
    monitor.run_once()  # delivered again
    clock.now += TIMEOUT
    dying = make_monitor(relay_env, queue, clock)
    dying.policy = monitor.policy

    def no_escalation(*args: object) -> None:
        raise Crash

    dying._escalate = no_escalation  # type: ignore[method-assign]
    with pytest.raises(Crash):
        dying.run_once()
    dead = queue / "dead_letter" / "task_assignment_1770263544123456.mime"
    assert dead.exists() and not list((queue / "leader").glob("escalation_*"))
    restarted = make_monitor(relay_env, queue, clock)
    restarted.policy = monitor.policy
    out = restarted.run_once()
    assert len(out.escalations) == 1 and headers(dead)["escalated_at"]
    # the escalation was delivered in the same pass (leader's queue comes later in the pass)
    assert len(list((queue / "leader" / "processed").glob("escalation_*.mime"))) == 1
    again = make_monitor(relay_env, queue, clock)
    again.policy = monitor.policy
    assert not again.run_once().escalations


def test_relay_mail_to_a_queue_agent_is_also_written_as_a_file(relayctl, team, queue: Path, relay_env) -> None:
    clock = Clock()
    make_monitor(relay_env, queue, clock).run_once()  # starts following the inboxes
    sent = json.loads(relayctl("--json", "send", "ignitian_1", 'task_id: "t-9"\n', "--type", "task_assignment", "--tag", "repo:owner/repo", agent="coordinator").stdout)
    restarted = make_monitor(relay_env, queue, clock)  # a restart in between: nothing is missed
    out = restarted.run_once()
    [file] = out.mirrored
    assert os.path.dirname(file) == str(queue / "ignitian_1" / "processed")
    assert re.fullmatch(r"task_assignment_\d{16}\.mime", os.path.basename(file))
    fields = headers(Path(file))
    assert (fields["from"], fields["to"], fields["type"], fields["repository"], fields["status"]) == ("coordinator", ["ignitian_1"], "task_assignment", "owner/repo", "delivered")
    assert fields["body"] == 'task_id: "t-9"\n' and mime.read_file(file).get("X-Relay-Notice") == sent["id"]
    assert not out.delivered  # relay announced it already: no second notice
    assert not make_monitor(relay_env, queue, clock).run_once().mirrored  # and never written twice
    assert not restarted.run_once().mirrored
    assert len(inbox(relay_env, "ignitian_1")) == 1


def test_unknown_agents_queues_are_left_alone(relayctl, team, queue: Path, relay_env) -> None:
    (queue / "ignitian_9").mkdir()
    drop(relayctl, queue, "ignitian_9", "task_assignment_1770263544123456.mime")
    seen: list[tuple] = []
    monitor = make_monitor(relay_env, queue, Clock())
    monitor.log = lambda event, **f: seen.append((event, f))
    monitor.run_once()
    monitor.run_once()
    assert (queue / "ignitian_9" / "task_assignment_1770263544123456.mime").exists()
    assert [e for e, _ in seen] == ["queue_agent_unknown"]  # said once, not every pass


# -- real processes ------------------------------------------------------------------------


def status_of(path: Path) -> str | None:
    try:
        return mime.read_file(str(path)).get("X-IGNITE-Status")
    except Exception:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["relayd", "relayctl"])
def test_file_driven_queue_notifies_a_real_tmux_pane(relayctl, team, queue: Path, relay_env, tmux: Tmux, short_tmp: Path, runner: str) -> None:
    relayctl("register", "ignitian_1", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
    if runner == "relayd":
        proc = Daemon(relay_env, "--ignite-queue", str(queue)).start()
        stop = proc.proc
    else:
        with open(short_tmp / "watch.log", "wb") as log:
            stop = subprocess.Popen([sys.executable, "-m", "relayctl", "ignite", "watch", str(queue)], env=relay_env, stdout=log, stderr=log)
        wait_for("relayctl ignite watch to start", lambda: b"serving" in (short_tmp / "watch.log").read_bytes())
    try:
        path = drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime", body='secret_plan: "SECRET-BODY"\n')
        done = queue / "ignitian_1" / "processed" / path.name
        wait_for("the file to be delivered", lambda: status_of(done) == "delivered")
        assert not path.exists()
        # relayd fires the arrival mechanism right after the inbox append, from its own thread
        wait_for("the pane trigger", lambda: TRIGGER in tmux.received.read_text().splitlines())
        assert tmux.lines_after_sentinel() == [TRIGGER]  # one trigger line, and nothing else
        assert "SECRET-BODY" not in tmux.capture()
        [notice] = inbox(relay_env, "ignitian_1")
        assert str(done) in notice["body"]
        # the agent reads the file and deletes it, as IGNITE agents do; nothing more happens
        done.unlink()
        drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123457.mime")
        wait_for("the second file", lambda: status_of(queue / "ignitian_1" / "processed" / "task_assignment_1770263544123457.mime") == "delivered")
        assert len(inbox(relay_env, "ignitian_1")) == 2
    finally:
        stop_child(stop, signal.SIGTERM, timeout=20)
        assert stop.returncode == 0  # a clean stop on SIGTERM


@pytest.mark.slow
def test_kill_9_mid_run_loses_no_file_and_delivers_none_twice(relayctl, team, queue: Path, relay_env) -> None:
    count = 40
    names = [f"task_assignment_{1770263544000000 + n:016d}.mime" for n in range(count)]
    daemon = Daemon(relay_env, "--ignite-queue", str(queue)).start()
    try:
        for name in names:
            drop(relayctl, queue, "ignitian_2", name, body=f'task_id: "{name}"\n')
            if name == names[count // 2]:
                processed = queue / "ignitian_2" / "processed"
                wait_for("some deliveries", lambda: sum(status_of(processed / n) == "delivered" for n in names) >= 3)
                daemon.proc.send_signal(signal.SIGKILL)
                daemon.proc.wait(timeout=20)
                daemon = Daemon(relay_env, "--ignite-queue", str(queue)).start()
        processed = queue / "ignitian_2" / "processed"
        wait_for("every file delivered", lambda: all(status_of(processed / n) == "delivered" for n in names), timeout=60)
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=20)
    assert sorted(p.name for p in processed.iterdir()) == sorted(names)  # none lost, none duplicated
    assert not list((queue / "ignitian_2").glob("*.mime"))
    tags = sorted(n["tags"][0] for n in inbox(relay_env, "ignitian_2"))
    assert tags == sorted(f"ignite:{name}#0" for name in names)  # each delivered exactly once


@pytest.mark.slow
def test_ignite_watch_once_and_one_monitor_per_queue(relayctl, team, queue: Path, relay_env, short_tmp: Path) -> None:
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544123456.mime")
    result = json.loads(relayctl("--json", "ignite", "watch", str(queue), "--once").stdout)
    assert result["delivered"] == [str(queue / "ignitian_1" / "processed" / "task_assignment_1770263544123456.mime")]
    daemon = Daemon(relay_env, "--ignite-queue", str(queue)).start()
    try:
        # relayd's monitor thread takes the queue's lock soon after start; from then on a
        # second monitor is refused (before that, a --once pass simply finds nothing to do)
        proc = wait_for("the second monitor to be refused", lambda: (lambda p: p if p.returncode != 0 else None)(relayctl("ignite", "watch", str(queue), "--once", check=False)))
        assert proc.returncode == 1 and proc.stderr.startswith("error: another monitor serves") and proc.stderr.count("\n") == 1
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=20) == 0


@pytest.mark.slow
def test_a_queue_that_is_not_a_directory_is_one_line(relayctl, team, short_tmp: Path, relay_env) -> None:
    proc = relayctl("ignite", "watch", str(short_tmp / "nope"), "--once", check=False)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "relayd.daemon", "--ignite-queue", str(short_tmp / "nope")], env=relay_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a directory" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_temp_files_of_dead_writers_are_swept_and_live_ones_kept(relayctl, team, queue: Path, relay_env) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True, timeout=60)
    litter = queue / "ignitian_1" / f".task_assignment_1770263544123456.mime.{dead.stdout.strip()}.0badf00d.tmp"
    writing = queue / "ignitian_1" / f".task_assignment_1770263544123457.mime.{os.getpid()}.0badf00d.tmp"
    litter.write_text("half")
    writing.write_text("half")
    make_monitor(relay_env, queue, Clock()).run_once()
    assert not litter.exists() and writing.exists()


# -- files written in place ------------------------------------------------------------------

WRITER = SUPPORT / "ignite_writer.py"


def write_in_place(queue: Path, agent: str, name: str, *, after_create: float = 0.0, mid: float = 0.0, task: str = "task_001") -> subprocess.Popen:
    """IGNITE's way: `ignite_mime.py build ... -o queue/AGENT/NAME`, the file created, then written."""
    argv = [sys.executable, str(WRITER), "build", "--from", "coordinator", "--to", agent, "--type", os.path.basename(name).rsplit("_", 1)[0], "--priority", "high"]
    argv += ["--body", f'task_id: "{task}"\n', "-o", str(queue / agent / name), "--pause-after-create", str(after_create), "--pause-mid", str(mid)]
    return subprocess.Popen(argv)


@pytest.mark.slow
def test_a_file_still_being_written_is_left_until_its_writer_closes_it(relayctl, team, queue: Path, relay_env) -> None:
    path = queue / "ignitian_1" / "task_assignment_1770263544123456.mime"
    clock = Clock()
    monitor = make_monitor(relay_env, queue, clock)
    text = mime.build(from_="coordinator", to=["ignitian_1"], type_="task_assignment", priority="high", body='task_id: "task_001"\n').to_text()
    with open(path, "w") as writer:  # created: empty, then half written, as a paused writer leaves it
        out = monitor.run_once()
        assert not (out.taken or out.malformed) and path.read_text() == "" and out.waiting == [str(path)]
        writer.write(text[: len(text) // 2])
        writer.flush()
        out = monitor.run_once()
        assert not (out.taken or out.malformed) and path.exists()
        writer.write(text[len(text) // 2 :])
    out = monitor.run_once()  # closed: taken whole
    done = queue / "ignitian_1" / "processed" / path.name
    assert out.delivered == [str(done)] and not (queue / "ignitian_1" / "malformed").exists()
    assert headers(done)["body"] == 'task_id: "task_001"\n'


@pytest.mark.slow
def test_a_closed_file_that_is_no_message_yet_is_set_aside_only_once_it_stays_so(relayctl, team, queue: Path, relay_env) -> None:
    from relayd.ignite.queue import SETTLE

    empty = queue / "ignitian_1" / "task_assignment_1770263544000001.mime"
    empty.touch()  # a writer that creates, closes, and writes later (shell `>` then `>>`)
    clock = Clock()
    monitor = make_monitor(relay_env, queue, clock)
    changed = os.stat(empty).st_mtime
    clock.now = changed + 1
    out = monitor.run_once()
    assert not out.malformed and empty.exists() and out.next_due == changed + SETTLE
    # it becomes a message later: delivered, not lost
    text = mime.build(from_="coordinator", to=["ignitian_1"], type_="task_assignment", priority="high", body="x: 1\n").to_text()
    with open(empty, "a") as late:
        late.write(text)
    clock.now = os.stat(empty).st_mtime + 1
    assert monitor.run_once().delivered == [str(queue / "ignitian_1" / "processed" / empty.name)]
    # one that stays junk is set aside once it has been unchanged for SETTLE seconds
    junk = queue / "ignitian_1" / "task_assignment_1770263544000002.mime"
    junk.write_text("half a hea")
    changed = os.stat(junk).st_mtime
    clock.now = changed + SETTLE - 0.5
    assert not monitor.run_once().malformed and junk.exists()
    clock.now = changed + SETTLE
    assert monitor.run_once().malformed == [str(queue / "ignitian_1" / "malformed" / junk.name)]


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["relayd", "relayctl"])
def test_ignite_senders_writing_in_place_lose_nothing(relayctl, team, queue: Path, relay_env, short_tmp: Path, runner: str) -> None:
    if runner == "relayd":
        stop = Daemon(relay_env, "--ignite-queue", str(queue)).start().proc
    else:
        with open(short_tmp / "watch.log", "wb") as log:
            stop = subprocess.Popen([sys.executable, "-m", "relayctl", "ignite", "watch", str(queue)], env=relay_env, stdout=log, stderr=log)
        wait_for("relayctl ignite watch to start", lambda: b"serving" in (short_tmp / "watch.log").read_bytes())
    names = [f"task_assignment_{1770263544000000 + n:016d}.mime" for n in range(12)]
    try:
        # straight writers, writers that pause after creating the file, writers that pause mid-file
        writers = [write_in_place(queue, "ignitian_1", name, after_create=(0.3 if n % 3 == 1 else 0.0), mid=(0.3 if n % 3 == 2 else 0.0), task=name) for n, name in enumerate(names)]
        # and IGNITE's own example: a user_goal written straight into leader/processed/
        goal = "user_goal_1770263544999999.mime"
        writers.append(write_in_place(queue, "leader", f"processed/{goal}", mid=0.3, task="goal"))
        assert all(w.wait(timeout=60) == 0 for w in writers)
        processed = queue / "ignitian_1" / "processed"
        wait_for("every file delivered", lambda: all(status_of(processed / n) == "delivered" for n in names), timeout=60)
        wait_for("the user_goal delivered", lambda: status_of(queue / "leader" / "processed" / goal) == "delivered", timeout=60)
    finally:
        stop.send_signal(signal.SIGTERM)
        assert stop.wait(timeout=20) == 0
    assert not (queue / "ignitian_1" / "malformed").exists() and not (queue / "leader" / "malformed").exists()
    assert sorted(n["tags"][0] for n in inbox(relay_env, "ignitian_1")) == sorted(f"ignite:{name}#0" for name in names)
    assert [n["tags"][0] for n in inbox(relay_env, "leader")] == [f"ignite:{goal}#0"]
    for name in names:
        assert headers(processed / name)["body"] == f'task_id: "{name}"\n'


@pytest.mark.slow
def test_unknown_types_and_missing_required_headers_are_logged_and_set_aside(relayctl, team, queue: Path, relay_env) -> None:
    # seed 003, error handling: a missing required header or an unknown type is logged and skipped
    good = mime.build(from_="coordinator", to=["ignitian_1"], type_="task_assignment", priority="high", body="x: 1\n")
    unknown = mime.build(from_="coordinator", to=["ignitian_1"], type_="task_assignmnet", priority="high", body="x: 1\n")
    (queue / "ignitian_1" / "task_assignmnet_1770263544000001.mime").write_text(unknown.to_text())
    for n, header in enumerate(("Message-ID", "Date", "MIME-Version", "X-IGNITE-Priority", "Content-Type"), start=2):
        partial = mime.MimeMessage(headers=[h for h in good.headers if h[0] != header], body=good.body)
        (queue / "ignitian_1" / f"task_assignment_177026354400000{n}.mime").write_text(partial.to_text())
    straight = mime.MimeMessage(headers=[h for h in good.headers if h[0] != "Date"], body=good.body)
    (queue / "leader" / "processed" / "user_goal_1770263544000009.mime").write_text(straight.to_text())
    logged: list[tuple[str, dict]] = []
    monitor = make_monitor(relay_env, queue, Clock())
    monitor.log = lambda event, **fields: logged.append((event, fields))
    out = monitor.run_once()
    assert not out.delivered and not inbox(relay_env, "ignitian_1") and not inbox(relay_env, "leader")
    assert sorted(os.path.basename(p) for p in out.malformed) == sorted([f"task_assignment_177026354400000{n}.mime" for n in range(2, 7)] + ["task_assignmnet_1770263544000001.mime", "user_goal_1770263544000009.mime"])
    errors = {os.path.basename(f["file"]): f["error"] for event, f in logged if event == "queue_malformed"}
    assert "unknown X-IGNITE-Type 'task_assignmnet'" in errors["task_assignmnet_1770263544000001.mime"]
    assert errors["task_assignment_1770263544000002.mime"].endswith("no Message-ID header")
    assert errors["task_assignment_1770263544000005.mime"].endswith("no X-IGNITE-Priority header")
