"""The torture suite: crashes, a full disk, hostile input and planted files, each checked
by `checker.check` (every acknowledged send stored exactly once, nothing corrupt).

Bounded for CI (the whole file takes well under two minutes); `pytest --long` (or
RELAY_TORTURE_LONG=1) runs many more rounds of each scenario.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from support.torture_checker import History, check, events_agree
from support.relayd_proc import Daemon, RawClient
from support.paths import SUPPORT

pytestmark = pytest.mark.slow  # many rounds of writers killed at random: not in the quick loop

WRITER = str(SUPPORT / "torture_writer.py")
WRITERS = ["w1", "w2", "w3", "w4"]


@pytest.fixture
def team(relayctl, relay_env):
    relayctl.setup("init")
    for name in ["sink", *WRITERS]:
        relayctl.setup("register", name=name)
    return relay_env


class Writers:
    """Writer processes whose output feeds one History; a killed writer is restarted
    where it stopped, repeating the id of the send it had begun (RESUME_ID)."""

    def __init__(self, env: dict[str, str], per_writer: int, names: list[str] = WRITERS, preexec=None) -> None:
        self.env = env
        self.per_writer = per_writer
        self.names = names
        self.preexec = preexec
        self.history = History()
        self.lock = threading.Lock()
        self.next_seq = {name: 0 for name in names}
        self.pending: dict[str, tuple[str, int] | None] = {name: None for name in names}
        self.procs: dict[str, subprocess.Popen] = {}
        self.readers: dict[str, threading.Thread] = {}
        self.errors = 0

    def start_all(self) -> "Writers":
        for name in self.names:
            self.start(name)
        return self

    def start(self, name: str, preexec="default") -> None:
        seq = self.next_seq[name]
        if seq >= self.per_writer:
            return
        argv = [sys.executable, WRITER, self.env["RELAY_DIR"], self.env["RELAY_SOCKET"], name, str(seq), str(self.per_writer - seq)]
        pending = self.pending[name]
        if pending is not None and pending[1] == seq:
            argv.append(pending[0])
        proc = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=self.preexec if preexec == "default" else preexec)
        self.procs[name] = proc
        reader = threading.Thread(target=self._read, args=(name, proc), daemon=True)
        reader.start()
        self.readers[name] = reader

    def _read(self, name: str, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            if not line.endswith("\n"):
                break  # cut off by a kill
            with self.lock:
                self.history.feed(line)
                kind, rest = line.split(" ", 1)
                if kind == "intent":
                    message_id, key = rest.split()
                    self.pending[name] = (message_id, int(key.split(":")[1]))
                elif kind == "ack":
                    seq = int(rest.split()[1].split(":")[1])
                    self.next_seq[name] = seq + 1
                    self.pending[name] = None
                elif kind == "error":
                    self.errors += 1

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.kill()
        proc.wait()
        self.readers[name].join(10)
        proc.stdout.close()
        proc.stderr.close()
        del self.procs[name]

    def restart(self, name: str, preexec="default") -> None:
        self.kill(name)
        self.start(name, preexec)

    def running(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is None]

    def wait(self, timeout: float = 120) -> History:
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                proc.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError(f"writer {name} did not finish: {proc.stderr.read()[-2000:]}")
            self.readers[name].join(10)
            problem = proc.stderr.read()[-2000:]
            proc.stdout.close()
            proc.stderr.close()
            assert proc.returncode == 0, problem
        return self.history


def assert_clean(verdict) -> None:
    assert verdict.ok, f"lost {verdict.lost[:5]}, duplicated {verdict.duplicated[:5]}, corrupt {verdict.corrupt[:5]}, out of order {verdict.reordered[:5]}"


# -- crashes -----------------------------------------------------------------------------------


def test_writers_killed_at_random(team, long_run):
    """Direct mode: writer processes SIGKILLed mid-send and restarted, repeating the id
    of the send each had begun."""
    per_writer, kills = (1500, 150) if long_run else (200, 12)
    rng = random.Random(11)
    writers = Writers(team, per_writer).start_all()
    done_kills = 0
    while done_kills < kills and writers.running():
        time.sleep(rng.uniform(0.15, 0.4))
        alive = writers.running()
        if alive:
            writers.restart(rng.choice(alive))
            done_kills += 1
    history = writers.wait()
    assert_clean(check(history, team["RELAY_DIR"], "sink", f"writers SIGKILLed x{done_kills}"))
    assert len(history.acked) == per_writer * len(WRITERS)
    _sweep_announces_every_message(team)


def _sweep_announces_every_message(env: dict[str, str]) -> None:
    """After the direct-mode sweep every stored message has its event, once (a writer killed
    between its inbox append and its event append left none), and no event lacks its message."""
    subprocess.run([sys.executable, "-m", "relayctl", "-q", "redeliver"], env=env, check=True, capture_output=True, timeout=120)
    missing_event, missing_message = events_agree(env["RELAY_DIR"], "sink")
    assert not missing_event and not missing_message, (sorted(missing_event)[:5], sorted(missing_message)[:5])


def test_relayd_killed_mid_stream_with_clients_falling_back(team, long_run):
    per_writer, kills = (2000, 10) if long_run else (250, 3)
    rng = random.Random(12)
    daemon = Daemon(team).start()
    try:
        writers = Writers(team, per_writer).start_all()
        total = per_writer * len(WRITERS)
        for k in range(kills):
            # Mid-stream at a random point of each stretch, however fast the writers are.
            goal = int(total * (k + rng.uniform(0.3, 0.9)) / (kills + 1))
            deadline = time.monotonic() + 60
            while len(writers.history.acked) < goal and time.monotonic() < deadline:
                time.sleep(0.005)
            daemon.kill()  # SIGKILL in the middle of the stream
            time.sleep(rng.uniform(0.3, 0.6))  # long enough that the writers carry on in direct mode
            daemon = Daemon(team).start()
        history = writers.wait()
    finally:
        daemon.kill()
    assert_clean(check(history, team["RELAY_DIR"], "sink", f"relayd SIGKILLed x{kills}"))
    assert len(history.acked) == per_writer * len(WRITERS)
    assert history.modes["daemon"] and history.modes["direct"], history.modes
    _sweep_announces_every_message(team)


def test_fifty_racing_daemon_starts_while_writing(team):
    writers = Writers(team, 150).start_all()
    daemons = [Daemon(team) for _ in range(50)]
    for d in daemons:
        d.start(wait=False)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and sum(d.proc.poll() is None for d in daemons) > 1:
            time.sleep(0.1)
        running = [d for d in daemons if d.proc.poll() is None]
        assert len(running) == 1
        running[0].wait_ready()
        history = writers.wait()
        assert all(d.proc.returncode == 1 for d in daemons if d is not running[0])
    finally:
        for d in daemons:
            d.kill()
    assert_clean(check(history, team["RELAY_DIR"], "sink", "50 racing daemon starts"))


# -- a full disk -------------------------------------------------------------------------------------


class Tmpfs:
    """A small tmpfs of our own (root only), so the disk really fills up."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], capture_output=True, text=True)
        self.mounted = proc.returncode == 0
        self.why = proc.stderr.strip()
        self.ballast = path / "ballast"

    def fill(self) -> None:
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while os.write(fd, b"\0" * 4096) == 4096:
                pass
        except OSError:
            pass  # full
        finally:
            os.close(fd)

    def free(self, nbytes: int | None = None) -> None:
        size = self.ballast.stat().st_size
        os.truncate(self.ballast, 0 if nbytes is None else max(0, size - nbytes))

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)


def _assert_typed_one_line_errors(history: History, expected: tuple[str, ...]) -> None:
    assert history.errors, "the disk never filled up"
    for error in history.errors:
        code, message = error.split(" ", 1)
        assert code == "store_error" and any(text in message for text in expected), error


def _assert_consistent(store_dir: str) -> None:
    missing_event, missing_message = events_agree(store_dir, "sink")
    assert not missing_event and not missing_message, (sorted(missing_event)[:5], sorted(missing_message)[:5])
    events = Path(store_dir, "events.jsonl").read_bytes()
    assert events.endswith(b"\n") and all(json.loads(line) for line in events.splitlines())


@pytest.mark.parametrize("mode", ["direct", "daemon"])
def test_a_full_tmpfs_gives_typed_errors_and_service_resumes(relay_env, short_tmp, mode, long_run):
    disk = Tmpfs(short_tmp / "disk", "2m")
    if not disk.mounted:
        pytest.skip(f"cannot mount a tmpfs here ({disk.why}); test_a_file_size_limit_... covers a full disk without root")
    env = dict(relay_env, RELAY_DIR=str(disk.path / "store"))
    daemon = None
    try:
        subprocess.run([sys.executable, "-m", "relayctl", "init"], env=env, check=True, capture_output=True)
        for name in ["sink", *WRITERS]:
            subprocess.run([sys.executable, "-m", "relayctl", "register", name], env=env, check=True, capture_output=True)
        if mode == "daemon":
            daemon = Daemon(env).start()
        disk.fill()
        disk.free(8192)  # a little room: some sends fit, then the disk is full again
        writers = Writers(env, 400 if long_run else 120).start_all()
        deadline = time.monotonic() + 60
        rounds = 0
        while writers.running() and time.monotonic() < deadline:
            time.sleep(0.3)
            if writers.errors >= 10 * (rounds + 1):
                rounds += 1
                disk.free(16384 if rounds < (8 if long_run else 3) else None)  # space returns, bit by bit
        history = writers.wait()
    finally:
        if daemon is not None:
            daemon.kill()
    try:
        _assert_typed_one_line_errors(history, ("no space left on device",))
        assert_clean(check(history, env["RELAY_DIR"], "sink", f"full tmpfs ({mode})"))
        _assert_consistent(env["RELAY_DIR"])
    finally:
        disk.unmount()


def _fsize(limit: int):
    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("mode", ["direct", "daemon"])
def test_a_file_size_limit_gives_typed_errors_and_service_resumes(team, mode):
    """Without root: RLIMIT_FSIZE on the writing process makes the event log (the
    biggest file) refuse to grow after the inbox append succeeded."""
    store_dir = team["RELAY_DIR"]
    first = Writers(team, 20).start_all()
    first.wait()
    limit = os.path.getsize(os.path.join(store_dir, "events.jsonl")) + 2048
    daemon = Daemon(team).start(preexec_fn=_fsize(limit)) if mode == "daemon" else None
    try:
        writers = Writers(team, 80, preexec=None if daemon else _fsize(limit))
        writers.history, writers.next_seq = first.history, dict(first.next_seq)
        writers.per_writer = 80
        writers.start_all()
        deadline = time.monotonic() + 30
        while writers.errors < 12 and time.monotonic() < deadline:
            time.sleep(0.1)
        # Space returns: relayd goes away (writers fall back), or the writers restart unlimited.
        if daemon is not None:
            daemon.kill()
        else:
            for name in writers.running():
                writers.restart(name, preexec=None)
        history = writers.wait()
    finally:
        if daemon is not None:
            daemon.kill()
    _assert_typed_one_line_errors(history, ("File too large", "short write"))
    assert_clean(check(history, store_dir, "sink", f"file size limit ({mode})"))
    # A writer SIGKILLed between its inbox append and its event append left its message without
    # an event; the sweep (here in direct mode: relayd is gone) announces it.
    _sweep_announces_every_message(team)
    assert len(history.acked) == 80 * len(WRITERS)


# -- hostile input, stalled subscribers, strangers, planted files ---------------------------------------


def test_hostile_frames_while_writing_keep_relayd_up_and_bounded(team, long_run):
    from hypothesis import HealthCheck, given, settings, strategies as st

    daemon = Daemon(team).start()
    try:
        writers = Writers(team, 300).start_all()
        start_rss = daemon.rss_kib()
        frames = st.one_of(
            st.binary(max_size=4096),
            st.binary(max_size=256).map(lambda b: b + b"\n"),
            st.text(max_size=512).map(lambda t: json.dumps({"type": "request", "id": 1, "op": "send", "params": {"agent": t, "body": t}}).encode() + b"\n"),
            st.sampled_from([b'{"type":"request","id":1,"op":"send","params":{"agent":"w1","to":["sink"],"body":NaN}}\n', b"\xff\xfe\xfa\n", b"[" * 50_000 + b"\n", b'{"type":"subscribe","topics":' + b"[" * 10_000 + b"\n"]),
        )

        @settings(max_examples=400 if long_run else 60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(frames)
        def hostile(data: bytes) -> None:
            client = RawClient(daemon.socket_path, timeout=10)
            try:
                client.send_bytes(data)
                client.sock.shutdown(socket.SHUT_WR)
                while client.sock.recv(65536):
                    pass
            except OSError:
                pass
            finally:
                client.close()

        hostile()
        # One line of 100 MiB without a newline: cut off at the 1 MiB limit, not buffered.
        big = RawClient(daemon.socket_path, timeout=30)
        chunk = b"a" * (1 << 20)
        sent = 0
        try:
            while sent < 100 << 20:
                big.send_bytes(chunk)
                sent += len(chunk)
        except OSError:
            pass
        assert sent < 100 << 20  # closed long before the end
        history = writers.wait()
        assert RawClient(daemon.socket_path).request("version")["ok"]
        assert daemon.rss_kib() - start_rss < 64 * 1024, (start_rss, daemon.rss_kib())
    finally:
        daemon.kill()
    assert_clean(check(history, team["RELAY_DIR"], "sink", "hostile frames"))


def test_a_stalled_subscriber_is_dropped_and_the_others_see_every_send(team):
    daemon = Daemon(team).start()
    try:
        stalled = RawClient(daemon.socket_path, timeout=10)
        stalled.subscribe(["*"])  # and never reads again
        live = RawClient(daemon.socket_path, timeout=30)
        live.subscribe(["inbox"], agent="sink")
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(live.line()["message_id"] for _ in range(4 * 1500)), daemon=True)
        reader.start()
        # Presence events (cheap heartbeats) fill the stalled subscriber's queue meanwhile.
        flood = RawClient(daemon.socket_path, timeout=60)
        batch = b"".join(json.dumps({"type": "request", "id": i, "op": "heartbeat", "params": {"agent": "w1"}}).encode() + b"\n" for i in range(500))
        writers = Writers(team, 1500).start_all()
        for _ in range(20):
            flood.send_bytes(batch)
            for _ in range(500):
                assert flood.line()["ok"]
        history = writers.wait()
        reader.join(60)
        assert "subscriber dropped" in daemon.log()
    finally:
        daemon.kill()
    twice = sorted(i for i, n in Counter(seen).items() if n > 1)
    where = {i: [n for n, x in enumerate(seen) if x == i] for i in twice[:3]}
    # every send announced to the live subscriber, once
    assert sorted(seen) == sorted(history.acked), f"announced twice: {len(twice)} (at {where}); never announced: {len(set(history.acked) - set(seen))}"
    assert_clean(check(history, team["RELAY_DIR"], "sink", "stalled subscriber"))


def test_another_uid_is_refused(team, short_tmp):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another user (CI runs as root)")
    daemon = Daemon(team).start()
    try:
        os.chmod(os.path.dirname(daemon.socket_path), 0o711)
        os.chmod(daemon.socket_path, 0o666)  # past the file permissions: relayd's own check
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(10)
                sock.connect(daemon.socket_path)
                try:
                    sock.sendall(b'{"type":"request","id":1,"op":"send","params":{"agent":"w1","to":["sink"],"body":"stranger"}}\n')
                except OSError:
                    pass
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
                os.write(write_end, data)
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as fh:
            answer = fh.read().decode()
        os.waitpid(pid, 0)
    finally:
        daemon.kill()
    assert "permission_denied" in answer and '"ok":true' not in answer
    assert not Path(team["RELAY_DIR"], "agents", "sink", "inbox.jsonl").exists() or b"stranger" not in Path(team["RELAY_DIR"], "agents", "sink", "inbox.jsonl").read_bytes()


def test_planted_symlinks_are_refused_and_their_targets_untouched(team, short_tmp):
    store = Path(team["RELAY_DIR"])
    outside = short_tmp / "outside"
    outside.mkdir()
    targets = {}
    for name in ("inbox", "lock", "cursor", "meta", "events_rotated"):
        targets[name] = outside / name
        targets[name].write_text(f"{name} must stay as it is\n")
    plants = {
        "inbox": store / "agents" / "w2" / "inbox.jsonl",
        "lock": store / "agents" / "w3" / "inbox.lock",
        "cursor": store / "agents" / "w4" / "cursor",
        "meta": store / "agents" / "w4" / "meta.json",
        "events_rotated": store / "events.jsonl.1",
    }
    for name, path in plants.items():
        if path.exists() or path.is_symlink():
            path.unlink()
        path.symlink_to(targets[name])
    daemon = Daemon(team).start()
    try:
        client = RawClient(daemon.socket_path, timeout=10)
        refused = [
            client.request("send", {"agent": "w1", "to": ["w2"], "body": "into a symlinked inbox"}),
            client.request("send", {"agent": "w1", "to": ["w3"], "body": "through a symlinked lock"}),
            client.request("read", {"agent": "w4", "unread": True, "mark_read": True}),
        ]
        for reply in refused:
            assert not reply["ok"] and reply["error"]["code"] in ("unsafe_path", "unknown_agent", "store_error"), reply
        sub = RawClient(daemon.socket_path, timeout=10)
        sub.subscribe(["*"], after="01JMHF3XYZ0000000000000000")  # replay must not read the planted rotated log
        writers = Writers(team, 100, names=["w1"]).start_all()
        history = writers.wait()
        assert RawClient(daemon.socket_path).request("version")["ok"]
    finally:
        daemon.kill()
    for name, target in targets.items():
        assert target.read_text() == f"{name} must stay as it is\n", name
    assert_clean(check(history, team["RELAY_DIR"], "sink", "planted symlinks"))
