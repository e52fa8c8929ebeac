"""relayd as users meet it: a real daemon process on a real Unix socket."""

from __future__ import annotations

import msgspec
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import tempfile
import time
from pathlib import Path

import pytest

from relayd.inbox.read import read_all
from relayd import ops, session
from relayd.client.full import Client
from relayd.store import Store
from support.cli_processes import stop_child
from support.relayd_proc import Daemon, RawClient
from support.inproc import snapshot
from support.store_compare import normalize, normalized_store
from support.waiting import wait_for

REPO = tempfile.gettempdir()  # relayctl reserve refuses a --repo that is not a directory here


# -- events -------------------------------------------------------------------------------


@pytest.mark.slow
def test_raw_subscriber_gets_seed_shaped_inbox_events_for_relayctl_and_direct_writes(daemon, relayctl):
    sub = RawClient(daemon.socket_path)
    sub.send_bytes(b'{"type":"subscribe","topics":["inbox","reservations","commands"]}\n')
    assert sub.line() == {"type": "subscribed", "topics": ["inbox", "reservation", "command"]}

    sent = json.loads(relayctl("--json", "send", "inferno", "deploy at noon", "--priority", "high", agent="storm").stdout)
    event = sub.line()
    assert event["type"] == "event" and event["topic"] == "inbox"
    assert event["agent"] == "inferno" and event["message_id"] == sent["id"]
    assert event["from"] == "storm" and event["priority"] == "high" and event["subject"] == "deploy at noon"

    # A write that never goes near the daemon (direct mode, in this process) is published too.
    with Store(daemon.store_dir) as store:
        direct = ops.call(store, "send", {"agent": "glacier", "to": ["shadow"], "body": "written directly"})
    event = sub.line()
    assert (event["topic"], event["agent"], event["message_id"]) == ("inbox", "shadow", direct["messages"][0]["id"])

    relayctl("reserve", "src/auth/**", "--repo", REPO, agent="inferno", check=False)
    with Store(daemon.store_dir) as store:
        ops.call(store, "reserve", {"agent": "inferno", "pattern": "src/db/**", "repo": REPO})
    reservation = sub.line()
    while reservation["pattern"] != "src/db/**":
        reservation = sub.line()
    assert reservation["topic"] == "reservation" and reservation["action"] == "created"


@pytest.mark.slow
def test_relayctl_subscribe_prints_ndjson(daemon, relayctl, relay_env):
    proc = subprocess.Popen([sys.executable, "-m", "relayctl", "subscribe", "inbox", "--for", "inferno"], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        line = ""
        while not line and time.monotonic() < deadline:
            relayctl("send", "inferno", "ping", agent="storm")
            ready, _, _ = select_readable(proc.stdout, 0.5)
            if ready:
                line = proc.stdout.readline()
        event = json.loads(line)
        assert event["type"] == "event" and event["agent"] == "inferno" and event["subject"] == "ping"
    finally:
        _, err = stop_child(proc)
    assert proc.returncode == 0 and "Traceback" not in err and not err.strip()


def select_readable(stream, timeout):
    import select

    return select.select([stream], [], [], timeout)


@pytest.mark.slow
def test_stale_agent_is_announced_once(relay_env, relayctl):
    relayctl("register", "sleepy")
    daemon = Daemon(relay_env, "--stale", "1s").start()
    try:
        sub = RawClient(daemon.socket_path, timeout=15)
        sub.subscribe(["presence"])
        relayctl("heartbeat", agent="sleepy")  # alive now; goes stale a second later
        events = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            event = sub.line()
            if event.get("action") == "stale":
                events.append(event)
                break
        assert events and events[0]["agent"] == "sleepy"
        sub.sock.settimeout(2.5)
        with pytest.raises(socket.timeout):
            while True:
                again = sub.line()
                assert again.get("action") != "stale", "announced twice"
    finally:
        daemon.kill()


# -- equivalence --------------------------------------------------------------------------


def scenario():
    """Every operation, with the results of earlier steps available (ids differ per run)."""
    return [
        ("init", lambda r: {"preset": "overlord"}),
        ("version", lambda r: {}),
        ("register", lambda r: {"name": "agent-1", "program": "claude-code", "model": "opus", "task": "parser"}),
        ("register", lambda r: {"name": "Bad Name"}),
        ("heartbeat", lambda r: {"agent": "agent-1", "task": "tests"}),
        ("touch", lambda r: {"agent": "agent-1"}),
        ("set_status", lambda r: {"agent": "inferno", "status": "working", "task": "auth"}),
        ("send", lambda r: {"agent": "storm", "to": ["inferno"], "body": "hello\nthere", "priority": "high", "tags": ["a"], "thread": "bd-1"}),
        ("send", lambda r: {"agent": "storm", "broadcast": True, "body": "to everyone"}),
        ("send", lambda r: {"agent": "storm", "to": ["nobody"], "body": "lost"}),
        ("send", lambda r: {"agent": "storm", "to": ["inferno"], "body": "must arrive", "ack": True, "ack_wait": "1ms", "max_deliver": 1}),
        ("send", lambda r: {"agent": "storm", "to": ["glacier"], "body": "ack me", "ack": True, "ack_wait": "1h"}),
        ("ack", lambda r: {"agent": "glacier", "ids": [r["send"]["messages"][0]["id"]]}),
        ("ack", lambda r: {"agent": "glacier", "ids": [r["send"]["messages"][0]["id"], "01ARZ3NDEKTSV4RRFFQ69G5FAV"]}),
        ("ack", lambda r: {"agent": "inferno", "ids": [r["send"]["messages"][0]["id"]]}),
        ("ack", lambda r: {"agent": "glacier", "ids": ["not-an-id"]}),
        ("track", lambda r: {"id": r["send"]["messages"][0]["id"]}),
        ("announced", lambda r: {"agent": "inferno", "how": "channel"}),
        ("program_state", lambda r: {"agent": "inferno", "state": "asking", "event": "PermissionRequest"}),
        ("program_state", lambda r: {"agent": "nobody", "state": "idle"}),
        ("program_state", lambda r: {"agent": "inferno", "state": "dozing"}),
        ("redeliver", lambda r: _after_a_moment({})),
        ("redeliver", lambda r: _after_a_moment({})),
        ("dlq_list", lambda r: {}),
        ("dlq_show", lambda r: {"id": r["dlq_list"]["dead_letters"][0]["id"]}),
        ("dlq_retry", lambda r: {"id": r["dlq_list"]["dead_letters"][0]["id"]}),
        ("dlq_drop", lambda r: {"id": r["dlq_list"]["dead_letters"][0]["id"]}),
        ("unread", lambda r: {"agent": "inferno"}),
        ("read", lambda r: {"agent": "inferno", "unread": True, "last": 1, "mark_read": True}),
        ("read", lambda r: {"agent": "inferno"}),
        ("agents", lambda r: {}),
        ("agents", lambda r: {"name": "inferno"}),
        # a request's session fields (relayd.session), on a batched operation and others
        ("send", lambda r: {"agent": "inferno", "to": ["storm"], "body": "from a tool call"}, {"agent": "inferno", "touch": True, "unread": True}),
        ("read", lambda r: {"agent": "storm", "unread": True, "mark_read": True}, {"agent": "storm", "touch": True, "unread": True}),
        ("reserve", lambda r: {"agent": "storm", "pattern": "x", "repo": REPO}, {"agent": "storm", "unread": True}),
        ("agents", lambda r: {}, {"agent": "nobody", "touch": True, "unread": True}),
        ("agents", lambda r: {}, {"touch": True}),
        ("status", lambda r: {}),
        ("reserve", lambda r: {"agent": "inferno", "pattern": "src/auth/**", "repo": REPO, "ttl": "1h", "reason": "auth"}),
        ("reserve", lambda r: {"agent": "glacier", "pattern": "src/auth/login.py", "repo": REPO}),
        ("reservations", lambda r: {}),
        ("reservations", lambda r: {"agent": "inferno", "repo": REPO}),
        ("release", lambda r: {"agent": "inferno", "pattern": "src/auth/**", "repo": REPO}),
        ("reserve", lambda r: {"agent": "inferno", "pattern": "docs/**", "repo": REPO}),
        ("handoff", lambda r: {"agent": "inferno", "to": "storm", "patterns": ["docs/**"], "repo": REPO, "thread": "docs"}),
        ("handoff", lambda r: {"agent": "inferno", "to": "storm", "all": True, "repo": REPO}),  # nothing left: refused
        # the coordination budget (relayd.arrival.budget) and relay's share of a model's context (relayd.delivery.spend)
        ("budget", lambda r: {}),
        ("budget_hold", lambda r: {"agent": "storm", "interval": False}),
        ("budget_resume", lambda r: {"agents": ["storm", "inferno"]}),  # not paused: refused
        ("spent", lambda r: {"agent": "storm", "chars": 0, "kind": "tool"}),
        # a session's report of its Claude Code inbox: here, one it does not have
        ("claude_inbox", lambda r: {"agent": "inferno", "socket": "", "sessions_dir": "/nonexistent/sessions", "missing": "no inbox here"}),
        # and of its Codex thread: here, one reported by a hook outside any Codex
        ("codex_queue", lambda r: {"agent": "inferno", "thread": "", "pid": 0, "codex_home": "/nonexistent/.codex", "missing": "no Codex here"}),
        # and of relay's Copilot extension: here, one a session without it reports
        ("copilot_extension", lambda r: {"agent": "inferno", "socket": "", "missing": "no extension here"}),
        ("cmd", lambda r: {"agent": "storm", "session": "agent:main:main", "command": "/compact", "args": "now"}),
        ("commands", lambda r: {}),
        ("cmd_get", lambda r: {"id": r["cmd"]["id"]}),
        ("cmd_consume", lambda r: {"session": "agent:main:main", "agent": "inferno"}),
        ("cmd_done", lambda r: {"id": r["cmd"]["id"], "agent": "inferno"}),
        ("wake_trigger", lambda r: {"text": "wake up", "agent": "storm"}),
        ("gc", lambda r: {"dry_run": True}),
        ("gc", lambda r: {}),
        ("unknown_op", lambda r: {}),
        ("reset", lambda r: {}),
        ("reset", lambda r: {"confirm": True}),
        ("agents", lambda r: {}),
    ]


def _after_a_moment(params):
    """Past the 1 ms ack-wait of the scenario's owed message, in both modes alike."""
    time.sleep(0.05)
    return params


def run_scenario(call, root):
    """`call(op, params, session fields)` for each step."""
    results, last = [], {}
    for op, params, *session in scenario():
        try:
            result = call(op, params(last), *session)
            last[op] = result
            results.append((op, "ok", normalize(result, root)))
        except Exception as exc:  # RelayError: compare code and message
            results.append((op, getattr(exc, "code", type(exc).__name__), normalize(str(exc), root)))
    return results


def direct_session(store, op, params, fields):
    """What relayd answers a request with session fields, run here as direct mode does."""
    result, unread = session.run(store, ops.lookup(op), params, fields.get("agent"), fields.get("touch", False), fields.get("unread", False))
    return {"result": msgspec.to_builtins(result), "unread": unread, "announced": None}


@pytest.mark.slow
def test_every_operation_gives_the_same_result_and_store_through_the_daemon_and_directly(short_tmp, relay_env):
    covered = {op for op, *_ in scenario()}
    missing = set(ops.table()) - covered
    assert not missing, f"add these operations to the equivalence scenario: {sorted(missing)}"

    daemon_store = str(short_tmp / "via-daemon")
    direct_store = str(short_tmp / "direct")
    env = dict(relay_env, RELAY_DIR=daemon_store)
    daemon = Daemon(env, "--redeliver-interval", "1h").start()  # the scenario runs the sweeps itself
    try:
        with Client(daemon_store, env["RELAY_SOCKET"]) as client:
            through_daemon = run_scenario(lambda op, params, fields=None: client.ask(op, params, **fields) if fields else client.call(op, params), daemon_store)
            assert client.mode == "daemon"
        with Store(direct_store) as store:
            direct = run_scenario(lambda op, params, fields=None: direct_session(store, op, params, fields) if fields else ops.call(store, op, params), direct_store)
        for got, want in zip(through_daemon, direct):
            assert got == want
        assert normalized_store(daemon_store) == normalized_store(direct_store)
    finally:
        daemon.kill()


@pytest.mark.slow
def test_a_daemon_for_another_store_means_direct_mode(daemon, short_tmp):
    other = str(short_tmp / "other-store")
    with Client(other, daemon.socket_path) as client:
        client.call("init", {"preset": "overlord"})
        assert client.mode == "direct"
    assert os.path.exists(os.path.join(other, "agents", "inferno", "meta.json"))
    assert not os.path.exists(os.path.join(daemon.store_dir, "..", "other-store", "relayd.lock"))


# -- crashes and restarts -----------------------------------------------------------------

STREAMER = textwrap.dedent(
    """
    import json, sys
    from relayd.client.full import Client
    from relayd.errors import RelayError
    client = Client(sys.argv[1], sys.argv[2])
    for i in range(int(sys.argv[3])):
        try:
            result = client.call("send", {"agent": "storm", "to": ["inferno"], "body": f"m{i}"})
        except RelayError as exc:
            print(json.dumps({"i": i, "error": exc.code}), flush=True)
            continue
        print(json.dumps({"i": i, "id": result["messages"][0]["id"], "mode": client.mode}), flush=True)
    """
)


def wait_for_ready_datagram(sock: socket.socket, timeout: float) -> float:
    sock.settimeout(timeout)
    while True:
        message = sock.recv(4096).decode()
        if "READY=1" in message.split("\n"):
            return time.monotonic()


@pytest.mark.slow
def test_sigkill_during_sends_loses_nothing_acknowledged_and_restart_is_quick(daemon, relay_env, short_tmp):
    with subprocess.Popen(
        [sys.executable, "-c", STREAMER, daemon.store_dir, daemon.socket_path, "600"],
        env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as streamer:
        lines = []
        for line in streamer.stdout:
            lines.append(json.loads(line))
            if len(lines) == 150:
                daemon.kill()  # SIGKILL
                assert os.path.exists(daemon.socket_path)  # a stale socket file stays behind
        streamer.wait(60)
        assert streamer.returncode == 0, streamer.stderr.read()
    acked = [entry for entry in lines if "id" in entry]
    modes = [entry["mode"] for entry in acked]
    assert modes[0] == "daemon" and modes[-1] == "direct"  # it fell back and carried on
    assert len([e for e in lines if "error" in e]) <= 1  # at most the request in flight
    with Store(daemon.store_dir) as store:
        stored = {m["id"] for m in msgspec.to_builtins(read_all(store, "inferno"))["messages"]}
    assert {entry["id"] for entry in acked} <= stored

    notify_path = str(short_tmp / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(notify_path)
    try:
        restarted = Daemon(dict(relay_env, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="200000"))
        restarted.start(wait=False)
        wait_for_ready_datagram(listener, 20)
        restarted.wait_ready()
        assert "WATCHDOG=1" in listener.recv(4096).decode().split("\n")  # pinged every 0.1 s
        with Client(daemon.store_dir, daemon.socket_path) as client:
            assert client.call("unread", {"agent": "inferno"})["unread"] == len(stored)
            assert client.mode == "daemon"
        # How fast READY comes is measured in benchmarks (relayd start -> READY=1), not here.
        assert restarted.stop() == 0
        listener.settimeout(5)
        states = []
        while "STOPPING=1" not in states:
            states.extend(listener.recv(4096).decode().split("\n"))
    finally:
        listener.close()
        if "restarted" in locals():
            restarted.kill()


@pytest.mark.slow
def test_fifty_daemons_at_once_exactly_one_serves(relay_env, relayctl):
    relayctl("init")
    daemons = [Daemon(relay_env) for _ in range(50)]
    for d in daemons:
        d.start(wait=False)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and sum(d.proc.poll() is None for d in daemons) > 1:
            time.sleep(0.1)
        running = [d for d in daemons if d.proc.poll() is None]
        assert len(running) == 1
        running[0].wait_ready()
        for d in daemons:
            if d is not running[0]:
                assert d.proc.returncode == 1
                assert "relayd is already running for store" in d.log() and "Traceback" not in d.log()
        client = RawClient(running[0].socket_path)
        assert client.request("version")["ok"]
    finally:
        for d in daemons:
            d.kill()


@pytest.mark.slow
def test_sigterm_drains_and_exits_zero_and_a_new_daemon_can_start(daemon, relay_env):
    client = RawClient(daemon.socket_path)
    assert client.request("status")["ok"]
    assert daemon.stop(signal.SIGTERM) == 0
    assert not os.path.exists(daemon.socket_path)
    assert client.closed()
    again = Daemon(relay_env).start()
    try:
        assert RawClient(again.socket_path).request("version")["ok"]
    finally:
        again.kill()


@pytest.mark.slow
def test_sigterm_the_moment_relayd_accepts_a_connection_is_a_clean_stop(relay_env):
    # The socket listens before the event loop runs: a SIGTERM in that window must still
    # drain and exit 0 (it used to kill the process: status -15).
    for _ in range(5):
        proc = Daemon(relay_env).start(wait=False)
        assert proc.proc is not None
        deadline = time.monotonic() + 20
        while True:
            assert proc.proc.poll() is None, proc.log()
            assert time.monotonic() < deadline, "relayd never accepted a connection"
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(proc.socket_path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                time.sleep(0.001)
        proc.proc.send_signal(signal.SIGTERM)
        try:
            assert proc.proc.wait(timeout=30) == 0, proc.log()
        finally:
            sock.close()
        assert not os.path.exists(proc.socket_path)


@pytest.mark.slow
def test_a_socket_in_use_by_another_store_s_daemon_is_left_alone(daemon, relay_env, short_tmp):
    other = Daemon(dict(relay_env, RELAY_DIR=str(short_tmp / "second")))
    other.start(wait=False)
    assert other.proc.wait(20) == 1
    assert "another relayd is already listening" in other.log()
    assert RawClient(daemon.socket_path).request("version")["ok"]


def test_socket_activation_and_permissions(relay_env, relayctl, short_tmp):
    relayctl("init")
    path = relay_env["RELAY_SOCKET"]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    daemon = Daemon(relay_env)
    daemon.args = []
    with open(daemon.log_path, "ab") as log:
        # systemd's protocol: the socket is fd 3 and LISTEN_PID names the daemon's own pid.
        activate = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3);"
            "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1');"
            "os.execv(sys.executable, [sys.executable, '-m', 'relayd.daemon'])"
        )
        daemon.proc = subprocess.Popen(
            [sys.executable, "-c", activate, str(listener.fileno())],
            env=relay_env, stdout=log, stderr=log, pass_fds=(listener.fileno(),),
        )
    try:
        daemon.wait_ready()
        assert '"activated": true' in daemon.log()
    finally:
        daemon.kill()
        listener.close()


@pytest.mark.slow
def test_socket_dir_and_socket_are_private(daemon):
    assert os.stat(daemon.socket_path).st_mode & 0o777 == 0o600
    base = os.path.dirname(daemon.socket_path)
    fresh = Daemon(dict(daemon.env, RELAY_SOCKET=os.path.join(base, "run", "relay", "d.sock"), RELAY_DIR=daemon.store_dir + "-2"), log_path=os.path.join(base, "fresh.log"))
    fresh.start()
    try:
        assert os.stat(os.path.dirname(fresh.socket_path)).st_mode & 0o777 == 0o700
        assert os.stat(fresh.socket_path).st_mode & 0o777 == 0o600
    finally:
        fresh.kill()


# -- hostile peers ------------------------------------------------------------------------

@pytest.mark.slow
def test_floods_and_generated_frames_keep_memory_bounded(daemon):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    _after_first_sweep(daemon)
    before = _data(daemon.store_dir)
    baseline = daemon.rss_kib()

    flood = RawClient(daemon.socket_path)
    try:
        for _ in range(64):  # 64 MiB without a newline
            flood.send_bytes(b"z" * (1 << 20))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert flood.closed()

    real_ops = set(ops.table())
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=20,
    )
    frames = st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda t, extra: json.dumps({"type": t, **extra}).encode(),
            st.sampled_from(["request", "subscribe", "hello", "response", "event", "error", "nonsense"]),
            st.dictionaries(st.sampled_from(["id", "op", "params", "topics", "agent", "after", "version"]), json_values, max_size=4),
        ),
        st.builds(
            lambda op, params: json.dumps({"type": "request", "id": 1, "op": op, "params": params}).encode(),
            st.text(max_size=12).filter(lambda op: op not in real_ops),
            st.dictionaries(st.text(max_size=8), json_values, max_size=4),
        ),
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(frames)
    def hostile_frame_then_probe(frame):
        peer = RawClient(daemon.socket_path)
        try:
            peer.send_bytes(frame.replace(b"\n", b" ") + b"\n" + b'{"type":"request","id":"probe","op":"version"}\n')
            while (line := peer.line()) is not None:
                if line.get("id") == "probe":
                    assert line["ok"]
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            peer.close()

    hostile_frame_then_probe()
    assert RawClient(daemon.socket_path).request("version")["ok"]
    assert _data(daemon.store_dir) == before
    assert daemon.rss_kib() - baseline < 48 * 1024, f"RSS grew from {baseline} KiB to {daemon.rss_kib()} KiB"


SLOW_SUBSCRIBER = textwrap.dedent(
    """
    import socket, sys
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sys.argv[1])
    sock.sendall(b'{"type":"subscribe","topics":["presence"]}\\n')
    data = sock.recv(100)
    print("subscribed", flush=True)
    sys.stdin.readline()  # the test SIGSTOPs us here
    count = data.count(b'"type":"event"')
    while chunk := sock.recv(1 << 16):
        data = chunk
        count += chunk.count(b'"type":"event"')
    print(count, flush=True)
    """
)


@pytest.mark.slow
def test_a_stopped_subscriber_is_dropped_and_others_get_everything(daemon, relay_env):
    # Enough ~150-byte events to fill the kernel's socket buffer, the daemon's write buffer
    # (64 KiB) and the 4096-event queue of the stopped subscriber, with room to spare.
    kernel_buffer = int(Path("/proc/sys/net/core/wmem_default").read_text())
    total = 4096 + 2 * (kernel_buffer + 65536) // 100 + 1000
    slow = subprocess.Popen([sys.executable, "-c", SLOW_SUBSCRIBER, daemon.socket_path], env=relay_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert slow.stdout.readline().strip() == "subscribed"
    os.kill(slow.pid, signal.SIGSTOP)

    fast = RawClient(daemon.socket_path, timeout=60)
    fast.subscribe(["presence"])
    received = []
    reader = threading.Thread(target=lambda: received.extend(fast.line() for _ in range(total)), daemon=True)
    reader.start()

    writer = RawClient(daemon.socket_path, timeout=60)
    batch = 300
    for start in range(0, total, batch):
        writer.send_bytes(b"".join(json.dumps({"type": "request", "id": i, "op": "heartbeat", "params": {"agent": "storm"}}).encode() + b"\n" for i in range(start, start + batch)))
        for _ in range(batch):
            assert writer.line()["ok"]
    reader.join(60)
    assert len(received) == total and all(e["topic"] == "presence" for e in received)
    ids = [e["id"] for e in received]
    assert ids == sorted(ids) and len(set(ids)) == total  # each once, in log order

    os.kill(slow.pid, signal.SIGCONT)
    slow.stdin.write("go\n")
    slow.stdin.flush()
    out, _ = slow.communicate(timeout=30)
    assert int(out.strip()) < total  # it was cut off, not waited for
    assert "subscriber dropped" in daemon.log()


@pytest.mark.slow
def test_a_connection_from_another_user_is_refused(daemon, short_tmp):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another user")

    def connect_as_nobody() -> str:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: become nobody, connect, report
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(10)
                try:
                    sock.connect(daemon.socket_path)
                    try:
                        sock.sendall(b'{"type":"request","id":1,"op":"init","params":{"preset":"ignite"}}\n')
                    except OSError:
                        pass  # already hung up on us
                    data = b""
                    while chunk := sock.recv(4096):
                        data += chunk
                    result = "closed:" + data.decode(errors="replace")
                except PermissionError:
                    result = "eacces"
                except OSError as exc:
                    result = f"oserror:{exc}"
                os.write(write_end, result.encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as fh:
            result = fh.read()
        os.waitpid(pid, 0)
        return result

    before = snapshot(daemon.store_dir)
    assert connect_as_nobody() == "eacces"  # the 0700 directory and 0600 socket stop it first
    # With the file permissions opened up, the daemon's own peer-uid check still refuses.
    os.chmod(os.path.dirname(daemon.socket_path), 0o711)
    os.chmod(daemon.socket_path, 0o666)
    result = connect_as_nobody()
    assert result.startswith("closed:") and "permission_denied" in result, result
    assert '"ok":true' not in result
    assert "refused a connection from another user" in daemon.log() and '"uid": 65534' in daemon.log()
    assert snapshot(daemon.store_dir) == before
    assert RawClient(daemon.socket_path).request("version")["ok"]


# -- read --tail --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_read_tail_follows_new_messages_until_ctrl_c(relay_env, relayctl, with_daemon):
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", "old news", agent="storm")
    daemon = Daemon(relay_env).start() if with_daemon else None
    tail = subprocess.Popen([sys.executable, "-m", "relayctl", "--agent", "inferno", "read", "--tail", "--last", "5"], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "old news" in tail.stdout.readline()
        got = ""
        deadline = time.monotonic() + 20
        while "fresh" not in got and time.monotonic() < deadline:
            relayctl("send", "inferno", "fresh", agent="glacier")
            if select_readable(tail.stdout, 1.0)[0]:
                got = tail.stdout.readline()
        assert "glacier → inferno  fresh" in got
    finally:
        try:
            _, err = stop_child(tail)
        finally:
            if daemon:
                daemon.kill()
    assert tail.returncode in (0, 130) and "Traceback" not in err


@pytest.mark.slow
def test_status_says_whether_the_daemon_runs(relay_env, relayctl):
    relayctl("init")
    assert "relayd: not running" in relayctl("status").stdout
    daemon = Daemon(relay_env).start()
    try:
        assert "relayd: running" in relayctl("status").stdout
    finally:
        daemon.kill()


# -- lifecycle details --------------------------------------------------------------------


@pytest.mark.slow
def test_relayctl_stays_lean_and_relayctl_daemon_runs_one(relay_env, relayctl, short_tmp):
    for args in (["--help"], ["daemon", "--help"], ["--agent", "storm", "send", "inferno", "x"]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "relayctl", *args], env=relay_env, capture_output=True, text=True, timeout=60)
        imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
        assert not {name for name in imported if name.split(".")[0] in ("anyio", "structlog")}, args
    store = str(short_tmp / "via-relayctl")
    daemon = Daemon(dict(relay_env, RELAY_DIR="/nonexistent-should-be-overridden"))
    daemon.store_dir = store
    with open(daemon.log_path, "ab") as log:
        daemon.proc = subprocess.Popen([sys.executable, "-m", "relayctl", "--dir", store, "daemon", "--log-level", "debug"], env=daemon.env, stdout=log, stderr=log)
    try:
        daemon.wait_ready()
        assert daemon.stop() == 0
    finally:
        daemon.kill()


@pytest.mark.slow
def test_drain_deadline_and_second_signal(relay_env, relayctl):
    relayctl("init", "--preset", "overlord")
    for i in range(20):
        relayctl("send", "inferno", f"message {i} " + "x" * 2000, agent="storm")
    request = json.dumps({"type": "request", "id": 1, "op": "read", "params": {"agent": "inferno", "last": 20}}).encode() + b"\n"

    def stuck_client(daemon):
        """Pipelines requests and never reads: its replies cannot all be delivered."""
        client = RawClient(daemon.socket_path, timeout=1)
        try:
            for _ in range(400):
                client.send_bytes(request * 10)
        except (socket.timeout, BlockingIOError):
            pass  # the daemon stopped reading us: replies are backed up
        return client

    quick = Daemon(relay_env, "--drain-timeout", "1s").start()
    stuck_client(quick)
    assert quick.stop(signal.SIGTERM, timeout=30) == 0  # gave up on the stuck client after 1 s
    assert "drain deadline passed" in quick.log()

    patient = Daemon(relay_env, "--drain-timeout", "10m").start()
    stuck_client(patient)
    patient.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    while "draining" not in patient.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert patient.stop(signal.SIGTERM, timeout=30) == 128 + signal.SIGTERM  # the second signal: at once
    assert "second signal" in patient.log()


@pytest.mark.slow
def test_the_daemon_notifies_recipients_and_direct_senders_notify_themselves(relay_env, relayctl, short_tmp):
    log = short_tmp / "notified.txt"
    relayctl("init", "--preset", "overlord")
    for name in ("inferno", "glacier"):
        relayctl("register", name, "--notify", f"cmd:sh -c 'echo \"$RELAY_NOTIFY_AGENT\" >> {log}'")

    def notified(name: str) -> list[str]:
        return wait_for(f"{name} to be notified", lambda: log.exists() and name in log.read_text().split() and log.read_text().split())

    relayctl("send", "glacier", "without a daemon the sender notifies", agent="storm")
    assert notified("glacier") == ["glacier"]
    daemon = Daemon(relay_env).start()
    try:
        with Store(daemon.store_dir) as store:  # written directly: the daemon sees the event
            ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": "the daemon notifies"})
        assert notified("inferno") == ["glacier", "inferno"]
    finally:
        daemon.kill()


@pytest.mark.slow
def test_gc_runs_on_its_interval(relay_env, relayctl):
    relayctl("init", "--preset", "overlord")
    relayctl("reserve", "docs/**", "--repo", REPO, "--ttl", "1s", agent="inferno")
    reservations = os.path.join(relay_env["RELAY_DIR"], "reservations")
    assert [n for n in os.listdir(reservations) if n.endswith(".json")]
    daemon = Daemon(relay_env, "--gc-interval", "1s").start()
    try:
        deadline = time.monotonic() + 20
        # The log line follows the removal, so wait for both.
        while ([n for n in os.listdir(reservations) if n.endswith(".json")] or "gc done" not in daemon.log()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [n for n in os.listdir(reservations) if n.endswith(".json")], "expired reservation not collected"
        assert "gc done" in daemon.log()
    finally:
        daemon.kill()


@pytest.mark.slow
def test_relayctl_subscribe_needs_the_daemon_and_resumes_with_after(relay_env, relayctl):
    relayctl("init", "--preset", "overlord")
    refused = relayctl("subscribe", "inbox", check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("error: relayd is not running") and "Traceback" not in refused.stderr
    first = json.loads(relayctl("--json", "send", "inferno", "first", agent="storm").stdout)
    relayctl("send", "inferno", "second", agent="storm")
    daemon = Daemon(relay_env).start()
    try:
        with Store(daemon.store_dir) as store:
            log = [json.loads(line) for line in Path(store.root, "events.jsonl").read_text().splitlines()]
        after = next(e["id"] for e in log if e.get("message_id") == first["id"])
        proc = subprocess.Popen([sys.executable, "-m", "relayctl", "subscribe", "all", "--after", after], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert select_readable(proc.stdout, 20)[0]
            replayed = json.loads(proc.stdout.readline())
            assert replayed["topic"] == "inbox" and replayed["subject"] == "second"
        finally:
            stop_child(proc)
        bad = relayctl("subscribe", "mail", check=False)
        assert bad.returncode == 1 and "unknown topic 'mail'" in bad.stderr
    finally:
        daemon.kill()


@pytest.mark.slow
def test_big_mail_through_the_daemon_is_read_in_parts_and_never_lost(daemon, relayctl):
    """Answers must fit one protocol line: a read stops before that, leaving the rest unread,
    and a send too big to answer is refused before anything is written."""
    body = "z" * 200_000
    sent = [json.loads(relayctl("--json", "send", "inferno", "-", "--subject", f"big {i}", agent="storm", input=body).stdout)["id"] for i in range(6)]
    seen: list[str] = []
    for _ in range(6):
        part = json.loads(relayctl("--json", "read", "--unread", "--mark-read", agent="inferno").stdout)
        if not part:
            break
        assert 0 < len(part) < 6  # never the whole 1.2 MB at once
        seen += [m["id"] for m in part]
    assert seen == sent  # each once, in order, none marked read unseen

    _after_first_sweep(daemon)
    before = _data(daemon.store_dir)
    refused = relayctl("send", "--broadcast", "-", agent="storm", input="w" * 250_000, check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("error: 5 copies") and refused.stderr.count("\n") == 1
    assert _data(daemon.store_dir) == before


def _after_first_sweep(daemon) -> None:
    """relayd's first sweep (a --redeliver-interval after start) takes every inbox's lock,
    making its lock file, and writes its marks: on a loaded machine it can come at any
    moment of a test that compares the store before and after."""
    wait_for("relayd's first sweep", lambda: (Path(daemon.store_dir) / "announced.json").exists())


def _data(root: str) -> dict[str, bytes]:
    """The store's files but relayd's own sweep marks (how far it checked and absorbed), which
    move on its timer, and the temporary files they are written through (.NAME.ULID.tmp,
    gone a moment later: one vanished between listing and reading once)."""
    marks = ("announced.json", "delivery.absorbed")
    return snapshot(root, leave_out=lambda name: name in marks or name.startswith(tuple(f".{m}." for m in marks)))


@pytest.mark.slow
def test_read_tail_mark_read_catches_up_on_more_than_one_answer_holds(relay_env, relayctl):
    """Nine 200 KB messages wait (about three answers' worth): following prints them all
    at once, not one answer now and the rest only when more mail arrives."""
    relayctl("init", "--preset", "overlord")
    with Store(relay_env["RELAY_DIR"]) as store:
        sent = [ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "subject": f"big {i}", "body": "z" * 200_000})["messages"][0]["id"] for i in range(9)]
    argv = [sys.executable, "-m", "relayctl", "--agent", "inferno", "--json", "read", "--tail", "--unread", "--mark-read"]
    tail = subprocess.Popen(argv, env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 9 and time.monotonic() < deadline:
            if select_readable(tail.stdout, 1.0)[0]:
                got.append(json.loads(tail.stdout.readline())["id"])
        assert got == sent
        assert relayctl("--json", "read", "--unread", agent="inferno").stdout.strip() == "[]"
    finally:
        _, err = stop_child(tail)
    assert tail.returncode in (0, 130) and "Traceback" not in err


@pytest.mark.slow
def test_subscribers_get_every_event_once_in_log_order_under_concurrent_senders(daemon, relay_env, store_dir):
    """Events reach an idle subscriber straight from the commit, and a busy one through its
    queue; switching between the two must never reorder, drop or repeat one."""
    watchers = [RawClient(daemon.socket_path, timeout=60) for _ in range(3)]
    for watcher in watchers:
        watcher.subscribe(["inbox"])
    per_sender, senders = 900, 4  # ~1 MB of events: more than a stalled reader's socket holds
    total = per_sender * senders
    got: list[list[dict]] = [[] for _ in watchers]

    def read(watcher: RawClient, out: list[dict], stall: float) -> None:
        for n in range(total):
            if stall and n % 200 == 0:
                time.sleep(stall)  # its socket fills: events queue behind the backlog
            out.append(watcher.line())

    readers = [threading.Thread(target=read, args=(w, out, stall), daemon=True) for w, out, stall in zip(watchers, got, (0, 0, 0.05))]
    for reader in readers:
        reader.start()

    def send(n: int) -> None:
        client = RawClient(daemon.socket_path, timeout=60)
        for start in range(0, per_sender, 50):  # pipelined runs, then a pause for the replies
            client.send_bytes(b"".join(json.dumps({"type": "request", "id": i, "op": "send", "params": {"agent": "storm", "to": ["inferno"], "body": f"{n}-{i}"}}).encode() + b"\n" for i in range(start, start + 50)))
            for _ in range(50):
                assert client.line()["ok"]
        client.close()

    threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for reader in readers:
        reader.join(60)
    logged = [json.loads(line)["id"] for line in (store_dir / "events.jsonl").read_text().splitlines() if '"topic":"inbox"' in line]
    assert len(logged) == total
    for events in got:
        assert [e["id"] for e in events] == logged
