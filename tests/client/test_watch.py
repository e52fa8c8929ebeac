"""The one wake-up source (`relayd.client.watch`), the inbox tail, and `read --tail` built on them."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from relayd import layout, ops
from relayd.client import watch
from relayd.store import Store
from relayd.client.tail import InboxTail
from support.cli_processes import stop_child
from support.relayd_proc import Daemon


def _quiet(w: watch.Watch) -> None:
    """Take every wake-up that is already due, so the next one is caused by the test."""
    while w.wait(0.3):
        pass


@pytest.mark.slow
def test_watch_switches_between_relayd_and_inotify_and_never_misses_a_change(relay_env, relayctl):
    relayctl("init", "--preset", "overlord")
    store = relay_env["RELAY_DIR"]
    w = watch.Watch(store, watch.inbox(store, "inferno"), relay_env["RELAY_SOCKET"], retry_seconds=0.2)
    daemon = None
    try:
        assert w.wait(5) and w.mode == "inotify"  # the first wake-up is the catch-up
        _quiet(w)
        relayctl("send", "inferno", "direct", agent="storm")
        assert w.wait(5) and w.mode == "inotify"

        daemon = Daemon(relay_env).start()
        assert w.wait(5) and w.mode == "daemon"  # switching is itself a wake-up
        _quiet(w)
        relayctl("send", "inferno", "through relayd", agent="storm")
        assert w.wait(5) and w.mode == "daemon"
        _quiet(w)
        relayctl("send", "glacier", "not for inferno", agent="storm")
        assert not w.wait(0.5)  # the subscription is narrowed to this agent

        daemon.stop(signal.SIGKILL)
        daemon = None
        assert w.wait(5)  # losing relayd wakes up: what it would have reported must be read
        assert w.wait(5) and w.mode == "inotify"
        _quiet(w)
        relayctl("send", "inferno", "daemon gone", agent="storm")
        assert w.wait(5) and w.mode == "inotify"

        daemon = Daemon(relay_env).start()
        assert w.wait(5) and w.mode == "daemon"
    finally:
        w.close()
        if daemon is not None:
            daemon.kill()


@pytest.mark.slow
def test_watch_waits_for_a_directory_that_appears_later(short_tmp):
    queue = short_tmp / "queue"
    w = watch.directory(str(queue))
    with watch.Watch(str(short_tmp), w, str(short_tmp / "none.sock"), retry_seconds=0.1) as wakeups:
        assert not wakeups.wait(0.3) and wakeups.mode == "none"
        queue.mkdir()
        assert wakeups.wait(2) and wakeups.mode == "inotify"
        _quiet(wakeups)
        (queue / "task_0001.mime").write_text("x")
        assert wakeups.wait(2)


@pytest.mark.slow
def test_watch_follows_a_directory_made_again_while_a_file_in_it_is_still_open(short_tmp):
    # A file held open in a directory (relayd's IGNITE monitor holds its lock file in the
    # queue) keeps the removed directory alive, and inotify never says it is gone.
    queue = short_tmp / "queue"
    queue.mkdir()
    held = os.open(queue / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with watch.Watch(str(short_tmp), watch.directory(str(queue)), str(short_tmp / "none.sock"), retry_seconds=0.1) as wakeups:
            assert wakeups.wait(2) and wakeups.mode == "inotify"
            _quiet(wakeups)
            subprocess.run(["rm", "-rf", str(queue)], check=True)
            queue.mkdir()
            _quiet(wakeups)  # the removal of .lock, and (now) the catch-up of the new directory
            (queue / "task_0001.mime").write_text("x")
            assert wakeups.wait(2), "a file in the directory made again woke nobody"
    finally:
        os.close(held)


@pytest.mark.slow
def test_a_lock_taken_and_let_go_wakes_no_watcher_of_its_folder(short_tmp):
    """`send --wait` watches the recipients' folders and asks `track` at each wake-up, which
    takes the inbox lock there: were letting go of a lock a change, it would wake itself
    (and relayd) for ever."""
    with Store(str(short_tmp / "store")) as store:
        ops.call(store, "init", {})
        ops.call(store, "register", {"name": "carol"})
        with store.agent_dir("carol") as folder:
            with folder.locked(layout.INBOX_LOCK):
                pass  # the lock file exists from here on
            with watch.Watch(store.root, watch.directories([folder.path]), str(short_tmp / "none.sock")) as wakeups:
                assert wakeups.wait(2) and wakeups.mode == "inotify"
                _quiet(wakeups)
                for shared in (False, True):
                    with folder.locked(layout.INBOX_LOCK, shared=shared):
                        pass
                assert not wakeups.wait(0.3), "letting go of a lock woke the watcher"
                ops.call(store, "send", {"agent": "carol", "to": ["carol"], "body": "a real change"})
                assert wakeups.wait(2)


@pytest.mark.slow
def test_watch_on_the_event_log_wakes_for_any_change(relay_env, relayctl):
    relayctl("init")
    store = relay_env["RELAY_DIR"]
    with watch.Watch(store, watch.event_log(store), relay_env["RELAY_SOCKET"]) as wakeups:
        assert wakeups.wait(5)
        _quiet(wakeups)
        relayctl("register", "newcomer")
        assert wakeups.wait(5)


@pytest.mark.slow
def test_inbox_tail_reads_across_a_rotation_in_order(relay_env, relayctl):
    relayctl("init", "--preset", "overlord")
    store = Store(relay_env["RELAY_DIR"])
    agent_dir = os.path.join(relay_env["RELAY_DIR"], layout.AGENTS, "inferno")
    tail = InboxTail(agent_dir)
    body = "x" * 200_000
    sent = []
    try:
        with watch.Watch(relay_env["RELAY_DIR"], watch.inbox(relay_env["RELAY_DIR"], "inferno"), relay_env["RELAY_SOCKET"]) as wakeups:
            assert wakeups.wait(5)
            got: list[str] = []
            while not os.path.exists(os.path.join(agent_dir, layout.INBOX_ROTATED)) or len(sent) < 60:
                sent.append(ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": body})["messages"][0]["id"])
                if len(sent) % 7 == 0:  # read now and then, so the rotation falls between two reads
                    assert wakeups.wait(5)
                    tail.drain(lambda m: got.append(m["id"]))
            assert wakeups.wait(5)
            tail.drain(lambda m: got.append(m["id"]))
    finally:
        tail.close()
        store.close()
    assert got == sent


class _Lines:
    """JSON lines from a child's stdout, read at the fd level so select() sees every byte."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def take(self, count: int, timeout: float = 20) -> list[dict]:
        lines: list[dict] = []
        deadline = time.monotonic() + timeout
        while len(lines) < count:
            if b"\n" in self.buffer:
                line, _, self.buffer = self.buffer.partition(b"\n")
                lines.append(json.loads(line))
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                break
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self.buffer += chunk
        return lines


@pytest.mark.slow
@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_read_tail_prints_what_read_prints_then_each_new_message_once_in_order(relay_env, relayctl, with_daemon):
    relayctl("init", "--preset", "overlord")
    for i in range(1, 7):
        relayctl("send", "inferno", f"old {i}", agent="storm")
    relayctl("send", "inferno", "from someone else", agent="glacier")
    daemon = Daemon(relay_env).start() if with_daemon else None
    args = ["--agent", "inferno", "--json", "read", "--last", "2", "--from", "storm"]
    expected_first = json.loads(relayctl(*args).stdout)
    assert [m["body"] for m in expected_first] == ["old 5", "old 6"]
    tail = subprocess.Popen([sys.executable, "-m", "relayctl", *args, "--tail"], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = _Lines(tail)
    try:
        first = out.take(2)
        assert first == expected_first
        for i in range(1, 4):
            relayctl("send", "inferno", f"new {i}", agent="storm")
            relayctl("send", "inferno", f"filtered out {i}", agent="glacier")
        later = out.take(3)
        assert [m["body"] for m in later] == ["new 1", "new 2", "new 3"]
        assert out.take(1, timeout=1.5) == []  # nothing replayed, nothing twice
    finally:
        try:
            _, err = stop_child(tail)
        finally:
            if daemon:
                daemon.kill()
    assert tail.returncode in (0, 130) and b"Traceback" not in err
