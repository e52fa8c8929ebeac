"""What an adversarial run broke: a full disk between the inbox and the event log,
planted files (symlink, FIFO, directory, hard link), running out of descriptors, idle
connections, a crash's exit status, and subscribers across restarts and drops."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest

from relayd.client.full import Client
from relayd.inbox.read import read_all
from relayd.store import Store
from support.cli_processes import stop_child
from support.relayd_proc import Daemon, RawClient


def stored(store_dir, agent: str) -> list[dict]:
    with Store(str(store_dir)) as store:
        return msgspec.to_builtins(read_all(store, agent))["messages"]


def message_events(store_dir) -> list[str]:
    path = os.path.join(store_dir, "events.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path) as fh:
        return [e["message_id"] for e in map(json.loads, fh) if e.get("action") == "message"]


# -- a full disk between the inbox append and the event log ------------------------------------

SEND_UNDER_FSIZE = textwrap.dedent(
    """
    import json, resource, signal, sys
    from relayd import ops
    from relayd.errors import RelayError
    from relayd.store import Store
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the limit: EFBIG / a short write, not death
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    with Store(sys.argv[1]) as store:
        try:
            ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": sys.argv[3]})
            print("ok")
        except RelayError as exc:
            print(exc.code, exc.message)
    """
)


def _fill_event_log(store_dir, limit: int, room: int) -> None:
    """Pad events.jsonl with whole lines to `room` bytes short of `limit`."""
    path = os.path.join(store_dir, "events.jsonl")
    size = os.path.getsize(path)
    pad = limit - room - size
    line = json.dumps({"id": "01JMHF3XYZ0000000000000000", "ts": "2026-01-01T00:00:00.000Z", "topic": "padding", "subject": ""})
    filler = line[:-2] + "x" * (pad - len(line) - 1) + '"}\n'
    with open(path, "a") as fh:
        fh.write(filler)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["direct", "daemon"])
def test_an_event_log_that_cannot_grow_takes_the_message_back(relay_env, relayctl, store_dir, mode):
    """The inbox append fits, the event-log append does not: the error must be true."""
    relayctl("init", "--preset", "overlord")
    limit = 1 << 20
    _fill_event_log(store_dir, limit, room=100)  # an event line is ~250 bytes
    if mode == "direct":
        proc = subprocess.run([sys.executable, "-c", SEND_UNDER_FSIZE, str(store_dir), str(limit), "over the limit"], env=relay_env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        answer = proc.stdout.strip()
    else:
        def limited() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        daemon = Daemon(relay_env).start(preexec_fn=limited)
        try:
            reply = RawClient(daemon.socket_path).request("send", {"agent": "storm", "to": ["inferno"], "body": "over the limit"})
            answer = "ok" if reply["ok"] else f"{reply['error']['code']} {reply['error']['message']}"
            assert RawClient(daemon.socket_path).request("version")["ok"]
        finally:
            daemon.kill()
    assert answer.startswith("store_error ") and "events.jsonl" in answer, answer
    assert stored(store_dir, "inferno") == []  # reported as failed, and it did fail
    assert message_events(store_dir) == []
    # Space returns: the same send goes through, once.
    relayctl("send", "inferno", "after space returned", agent="storm")
    assert [m["body"] for m in stored(store_dir, "inferno")] == ["after space returned"]


def test_a_broadcast_is_never_half_delivered(relayctl, store_dir, short_tmp):
    """shadow's inbox (last in name order) is refused only when it is opened, after the
    others were appended to: those appends are taken back."""
    relayctl("init", "--preset", "overlord")
    planted = os.path.join(store_dir, "agents", "shadow", "inbox.jsonl")
    if os.path.exists(planted):
        os.unlink(planted)
    (short_tmp / "elsewhere").write_text("")
    os.link(short_tmp / "elsewhere", planted)
    proc = relayctl("send", "--broadcast", "all or nothing", agent="storm", check=False)
    assert proc.returncode == 1 and "shadow" in proc.stderr
    for agent in ("glacier", "inferno", "overlord", "strategist"):
        assert stored(store_dir, agent) == [], agent
    assert message_events(store_dir) == []
    assert (short_tmp / "elsewhere").read_text() == ""


# -- planted files -------------------------------------------------------------------------------


def _responsive(daemon: Daemon, seconds: float = 5) -> bool:
    client = RawClient(daemon.socket_path, timeout=seconds)
    return client.request("version")["ok"]


@pytest.mark.slow
@pytest.mark.parametrize("plant", ["symlink", "directory", "fifo"])
def test_a_planted_event_log_is_refused_and_relayd_keeps_serving(daemon, store_dir, short_tmp, plant):
    target = short_tmp / "elsewhere"
    target.write_text("untouched\n")
    log = os.path.join(store_dir, "events.jsonl")
    os.unlink(log)
    {"symlink": lambda: os.symlink(target, log), "directory": lambda: os.mkdir(log), "fifo": lambda: os.mkfifo(log)}[plant]()
    client = RawClient(daemon.socket_path, timeout=10)
    reply = client.request("send", {"agent": "storm", "to": ["inferno"], "body": "refused"})
    assert not reply["ok"] and reply["error"]["code"] in ("unsafe_path", "store_error")
    inbox = Path(store_dir, "agents", "inferno", "inbox.jsonl")
    assert not inbox.exists() or inbox.read_bytes() == b""  # not appended with its event missing
    assert target.read_text() == "untouched\n"
    assert _responsive(daemon) and _responsive(daemon)
    cpu = _cpu_seconds(daemon.pid)
    time.sleep(1)
    assert _cpu_seconds(daemon.pid) - cpu < 0.5  # not spinning
    assert daemon.stop(signal.SIGTERM) == 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_fifo_inbox_does_not_block_relayd(daemon, store_dir):
    inbox = os.path.join(store_dir, "agents", "inferno", "inbox.jsonl")
    if os.path.exists(inbox):
        os.unlink(inbox)
    os.mkfifo(inbox)
    client = RawClient(daemon.socket_path, timeout=10)
    for op, params in (("send", {"agent": "storm", "to": ["inferno"], "body": "x"}), ("read", {"agent": "inferno"}), ("unread", {"agent": "inferno"})):
        reply = client.request(op, params)
        assert not reply["ok"] and reply["error"]["code"] in ("unsafe_path", "store_error"), (op, reply)
    assert client.request("send", {"agent": "storm", "to": ["glacier"], "body": "others are served"})["ok"]
    assert daemon.stop(signal.SIGTERM) == 0


def test_a_hard_linked_inbox_is_not_written_through(relayctl, store_dir, short_tmp):
    relayctl("init", "--preset", "overlord")
    outside = short_tmp / "outside.txt"
    outside.write_text("precious\n")
    inbox = os.path.join(store_dir, "agents", "inferno", "inbox.jsonl")
    if os.path.exists(inbox):
        os.unlink(inbox)
    os.link(outside, inbox)
    proc = relayctl("send", "inferno", "x", agent="storm", check=False)
    assert proc.returncode == 1 and "hard links" in proc.stderr
    assert outside.read_text() == "precious\n"


# -- descriptors and connections -------------------------------------------------------------------


def _nofile(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


def _connect_many(path: str, count: int) -> list:
    import socket

    socks = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        socks.append(sock)
    return socks


@pytest.mark.slow
@pytest.mark.parametrize("cap", [None, "5000"], ids=["default-cap", "cap-above-fd-limit"])
def test_more_connections_than_descriptors_are_survived(relay_env, relayctl, store_dir, cap):
    relayctl("init", "--preset", "overlord")
    args = ["--max-connections", cap] if cap else []
    daemon = Daemon(relay_env, *args).start(preexec_fn=_nofile(256))
    socks = _connect_many(daemon.socket_path, 300)  # past the limit: EMFILE in accept, or refused
    try:
        time.sleep(0.5)
        assert daemon.proc.poll() is None, daemon.log()
        if cap is None:
            assert "too many connections" in daemon.log()
        else:
            assert "accept failed, pausing" in daemon.log()
    finally:
        for sock in socks:
            sock.close()
    try:
        deadline = time.monotonic() + 20
        while True:  # the backlog drains; then everything works again
            proc = relayctl("send", "inferno", "after the flood", agent="storm", check=False)
            if proc.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in daemon.log()
        assert daemon.stop(signal.SIGTERM) == 0
    finally:
        daemon.kill()


@pytest.mark.slow
def test_idle_connections_are_closed_and_clients_reconnect(relay_env, relayctl, store_dir):
    relayctl("init", "--preset", "overlord")
    daemon = Daemon(relay_env, "--idle-timeout", "300ms").start()
    try:
        idle = RawClient(daemon.socket_path, timeout=10)
        idle.request("version")
        subscriber = RawClient(daemon.socket_path, timeout=10)
        subscriber.subscribe(["inbox"])
        with Client(str(store_dir), daemon.socket_path) as client:
            client.call("version")
            assert idle.line() is None  # closed by relayd after 300 ms of silence
            client.call("send", {"agent": "storm", "to": ["inferno"], "body": "after an idle pause"})
            assert client.mode == "daemon"  # it noticed and reconnected
        assert subscriber.line()["topic"] == "inbox"  # subscribers are never idle
    finally:
        daemon.kill()


# -- a crash exits non-zero --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["relayd", "relayctl daemon"])
def test_a_crash_exits_non_zero_for_systemd(relay_env, short_tmp, entry):
    """run() returns 70 after logging a crash; the console entry must exit with it."""
    script = textwrap.dedent(
        f"""
        import relayd.daemon.main as main
        main.run = lambda config: 70
        if {entry!r} == "relayd":
            from relayd.daemon.cli import main as entry
        else:
            from relayctl.cli import main as entry
            import sys
            sys.argv = ["relayctl", "daemon"]
        entry({[] if entry == "relayd" else ["daemon"]!r})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], env=relay_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 70, proc.stderr


# -- relayctl subscribe across restarts and drops ------------------------------------------------------


class _Lines:
    """A child's stdout line by line, each read with a deadline: a blocking readline would
    outlast any deadline the test sets."""

    def __init__(self, stream) -> None:
        self.fd = stream.fileno()
        self.buffer = b""

    def next(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _subjects(lines: _Lines, count: int, timeout: float = 30) -> list[str]:
    """The subjects of the next `count` inbox events, leaving out the probes."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and (line := lines.next(max(0.0, deadline - time.monotonic()))) is not None:
        if (subject := json.loads(line)["subject"]) != "probe":
            got.append(subject)
    return got


@pytest.mark.slow
def test_relayctl_subscribe_reconnects_after_a_restart_and_resumes(relay_env, relayctl, daemon):
    sub = subprocess.Popen([sys.executable, "-m", "relayctl", "subscribe", "inbox"], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = _Lines(sub.stdout)
    try:
        deadline = time.monotonic() + 30
        while lines.next(0.3) is None:  # until its subscription is live: probes, as a person would
            assert time.monotonic() < deadline and sub.poll() is None, "relayctl subscribe never printed an event"
            relayctl("send", "inferno", "probe", agent="storm")
        relayctl("send", "inferno", "one", agent="storm")
        assert _subjects(lines, 1) == ["one"]
        daemon.kill()
        relayctl("send", "inferno", "two (while relayd is down)", agent="storm")
        restarted = Daemon(relay_env).start()
        try:
            relayctl("send", "inferno", "three", agent="storm")
            assert _subjects(lines, 2) == ["two (while relayd is down)", "three"]
            assert sub.poll() is None
        finally:
            restarted.kill()
    finally:
        _, err = stop_child(sub, timeout=30)
    assert "relayd went away; reconnecting" in err


SLOW_READER = textwrap.dedent(
    """
    import subprocess, sys
    # relayctl subscribe writing into a pipe nobody reads until told to
    proc = subprocess.Popen([sys.executable, "-m", "relayctl", "subscribe", "presence"], stdout=subprocess.PIPE, stderr=sys.stderr)
    for line in proc.stdout:  # the test's probe heartbeats: subscribed once one arrives
        if b'"agent":"inferno"' in line:
            break
    print(proc.pid, flush=True)
    sys.stdin.readline()
    ids = []
    for line in proc.stdout:
        if b'"agent":"storm"' not in line:
            continue  # probes sent before this process noticed the first one
        ids.append(line.split(b'"id":"', 1)[1][:26])
        if len(ids) >= int(sys.argv[1]):
            break
    print(len(ids), len(set(ids)), flush=True)
    proc.terminate()
    proc.stdout.close()  # a subscribe blocked writing into the full pipe gets EPIPE instead of staying (it holds our stderr open)
    proc.wait(30)
    """
)


@pytest.mark.slow
def test_relayctl_subscribe_says_when_it_was_dropped_and_misses_nothing(relay_env, relayctl, daemon):
    kernel_buffer = int(Path("/proc/sys/net/core/wmem_default").read_text())
    total = 4096 + 2 * (kernel_buffer + 65536) // 100 + 1000
    reader = subprocess.Popen([sys.executable, "-c", SLOW_READER, str(total)], env=relay_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not select.select([reader.stdout], [], [], 0.3)[0]:  # until its subscription is live
        assert time.monotonic() < deadline and reader.poll() is None, "relayctl subscribe never received an event"
        relayctl("heartbeat", agent="inferno")
    subscriber_pid = int(reader.stdout.readline())
    os.kill(subscriber_pid, signal.SIGSTOP)  # stops reading relayd's events
    writer = RawClient(daemon.socket_path, timeout=60)
    batch = 300
    for start in range(0, total, batch):
        writer.send_bytes(b"".join(json.dumps({"type": "request", "id": i, "op": "heartbeat", "params": {"agent": "storm"}}).encode() + b"\n" for i in range(start, start + batch)))
        for _ in range(batch):
            assert writer.line()["ok"]
    assert "subscriber dropped" in daemon.log()
    os.kill(subscriber_pid, signal.SIGCONT)
    reader.stdin.write("go\n")
    reader.stdin.flush()
    out, err = reader.communicate(timeout=60)
    assert out.strip(), err
    counted, distinct = map(int, out.split())
    assert counted == total and distinct == total  # every event once: resumed after the last one printed
    assert "dropped: not reading fast enough" in err


def test_planted_files_among_reservations_are_skipped_not_read(tmp_path) -> None:
    """Reservations are listed from their folder's file types: a symlink to a file outside
    the store, a FIFO (reading it would block) or a directory named like a record is
    skipped, and the real reservations are all still there."""
    from relayd import ops
    from relayd.reservations.reserve import load_all

    secret = tmp_path / "outside.json"
    secret.write_text('{"agent": "mallory", "pattern": "**", "repo": "/", "expires_at": "2999-01-01T00:00:00.000Z"}')
    with Store(str(tmp_path / "store"), fsync=False) as store:
        ops.call(store, "register", {"name": "alice"})
        for pattern in ("src/a.py", "src/b.py"):
            ops.call(store, "reserve", {"agent": "alice", "pattern": pattern, "repo": str(tmp_path), "ttl": "1h"})
        folder = tmp_path / "store" / "reservations"
        os.symlink(secret, folder / "planted-link.json")
        os.mkfifo(folder / "planted-fifo.json")
        os.mkdir(folder / "planted-dir.json")
        listed = load_all(store)
    assert sorted(r.pattern for _, r in listed) == ["src/a.py", "src/b.py"]
    assert all(r.agent == "alice" for _, r in listed)
