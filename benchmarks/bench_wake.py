"""Wake reliability (seed 004 promises 99.9 %): N wakes through each layer of
`relayd.team.wake` (gateway command, gateway socket, file trigger) and through all of them in
order, with the receiver normal, slow, restarting (down 40 ms of every 150 ms) or absent
while the wakes are sent (it starts afterwards).

Delivered means the receiver got the wake: the command ran to the end, the socket server
read the line, the file watcher saw the trigger (a watcher that was down reads
`wake/last-message` when it comes back; wakes coalesce, so a wake counts as delivered
when the receiver later saw it or a later one, the way an orchestrator checks everything
once it is awake).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import threading
import time

from relayd import layout, ops
from relayd.store import Store
from relayd.team.wake import WakeFailed, wake

from .common import Row, scratch_dir

AREA = "wake"  # python -m benchmarks.run wake
CONDITIONS = ("normal", "slow", "restarting", "absent")
LAYERS = ("gateway", "socket", "file", "layered")
SLOW = 0.02  # seconds a slow receiver takes per wake
DOWN, CYCLE = 0.04, 0.15  # a restarting receiver is down DOWN of every CYCLE seconds

GATEWAY = """#!/bin/sh
# gateway stand-in: LOG DOWNFLAG SLOW TEXT
[ -e "$2" ] && { echo "gateway restarting" >&2; exit 1; }
[ "$3" = 1 ] && sleep {slow}
printf '%s\\n' "$4" >> "$1"
"""


class Received:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.lock = threading.Lock()

    def add(self, text: str) -> None:
        with self.lock:
            self.texts.append(text.strip())

    def highest(self) -> int:
        numbers = [int(t.rsplit(" ", 1)[1]) for t in self.texts if t.startswith("wake ")]
        return max(numbers, default=-1)

    def numbers(self) -> set[int]:
        return {int(t.rsplit(" ", 1)[1]) for t in self.texts if t.startswith("wake ")}


class Flapping:
    """Runs `down()` / `up()` in a cycle while the wakes are sent (a restarting receiver)."""

    def __init__(self, down, up) -> None:
        self.down, self.up = down, up
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            time.sleep(CYCLE - DOWN)
            self.down()
            time.sleep(DOWN)
            self.up()

    def __enter__(self) -> "Flapping":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


class Receiver:
    """A wake receiver run by a thread (`_loop`), which `down()` / `up()` take away and bring
    back, as a restart would."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def up(self) -> None:
        raise NotImplementedError

    def down(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.up()
        self.thread.start()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.down()


class SocketReceiver(Receiver):
    def __init__(self, path: str, received: Received, slow: bool) -> None:
        super().__init__()
        self.path, self.received, self.slow = path, received, slow
        self.listener: socket.socket | None = None

    def up(self) -> None:
        with self.lock:
            if self.listener is None:
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                if os.path.exists(self.path):
                    os.unlink(self.path)
                listener.bind(self.path)
                listener.listen(64)
                listener.settimeout(0.01)
                self.listener = listener

    def down(self) -> None:
        with self.lock:
            if self.listener is not None:
                self.listener.close()
                self.listener = None
                if os.path.exists(self.path):
                    os.unlink(self.path)

    def _loop(self) -> None:
        while self.running:
            with self.lock:
                listener = self.listener
                try:
                    conn = listener.accept()[0] if listener is not None else None
                except OSError:
                    conn = None
            if conn is None:
                time.sleep(0.002)
                continue
            with conn:
                conn.settimeout(2)
                if self.slow:
                    time.sleep(SLOW)
                data = b""
                try:
                    while not data.endswith(b"\n") and (chunk := conn.recv(65536)):
                        data += chunk
                except OSError:
                    continue
                if data:
                    import json

                    self.received.add(json.loads(data)["text"])


class FileWatcher(Receiver):
    """What a systemd path unit (or any inotify watcher) does with wake/trigger."""

    def __init__(self, wake_dir: str, received: Received, slow: bool) -> None:
        from inotify_simple import INotify, flags

        self.wake_dir, self.received, self.slow = wake_dir, received, slow
        self.flags = flags.CLOSE_WRITE | flags.MOVED_TO
        self.INotify = INotify
        self.watcher = None
        super().__init__()

    def _read_last(self) -> None:
        try:
            with open(os.path.join(self.wake_dir, layout.WAKE_LAST_MESSAGE)) as fh:
                self.received.add(fh.read())
        except FileNotFoundError:
            pass

    def up(self) -> None:
        with self.lock:
            if self.watcher is None:
                self.watcher = self.INotify()
                self.watcher.add_watch(self.wake_dir, self.flags)
                self._read_last()  # what arrived while it was down

    def down(self) -> None:
        with self.lock:
            if self.watcher is not None:
                self.watcher.close()
                self.watcher = None

    def _loop(self) -> None:
        while self.running:
            with self.lock:
                watcher = self.watcher
                events = watcher.read(timeout=5) if watcher is not None else []
            if not events:
                time.sleep(0.002)
                continue
            if any(event.name == layout.WAKE_TRIGGER for event in events):
                if self.slow:
                    time.sleep(SLOW)
                self._read_last()


def _cell(layer: str, condition: str, count: int) -> tuple[int, int, float]:
    """(delivered, reported ok, seconds) for `count` wakes."""
    root = scratch_dir("rbw-")
    try:
        store_dir = os.path.join(root, "store")
        gateway_log = os.path.join(root, "gateway.log")
        down_flag = os.path.join(root, "gateway.down")
        script = os.path.join(root, "gateway.sh")
        with open(script, "w") as fh:
            fh.write(GATEWAY.replace("{slow}", str(SLOW)))
        os.chmod(script, stat.S_IRWXU)
        sock_path = os.path.join(root, "gw.sock")
        slow = condition == "slow"
        with Store(store_dir) as store:
            ops.call(store, "init", {})
            gateway = [script if condition != "absent" else os.path.join(root, "no-such-gateway"), gateway_log, down_flag, "1" if slow else "0"]
            config = {"wake": {"gateway_command": gateway, "gateway_socket": sock_path, "timeout": "2s"}}
            import json

            with open(os.path.join(store_dir, layout.CONFIG_FILE), "w") as fh:
                json.dump(config, fh)
            received = Received()
            sock_rx = SocketReceiver(sock_path, received, slow)
            files_rx = FileWatcher(os.path.join(store_dir, layout.WAKE), received, slow)
            receivers = []
            if layer in ("socket", "layered"):
                receivers.append(sock_rx)
            if layer in ("file", "layered"):
                receivers.append(files_rx)
            if condition != "absent":
                for receiver in receivers:
                    receiver.start()

            def gateway_down() -> None:
                open(down_flag, "w").close()

            def gateway_up() -> None:
                if os.path.exists(down_flag):
                    os.unlink(down_flag)

            flaps = []
            if condition == "restarting":
                if layer in ("gateway", "layered"):
                    flaps.append(Flapping(gateway_down, gateway_up))
                flaps += [Flapping(r.down, r.up) for r in receivers]
            reported = 0
            started = time.perf_counter()
            for flap in flaps:
                flap.__enter__()
            try:
                call = lambda op, params: ops.call(store, op, params)  # noqa: E731
                for n in range(count):
                    try:
                        wake(store, call, f"wake {n}", None if layer == "layered" else layer)
                        reported += 1
                    except WakeFailed:
                        pass
                    time.sleep(0.003)
            finally:
                for flap in flaps:
                    flap.__exit__()
                gateway_up()
                for receiver in receivers:
                    receiver.up()  # back for good; an absent one starts now
            elapsed = time.perf_counter() - started
            if condition == "absent":
                for receiver in receivers:
                    receiver.thread.start()
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and received.highest() < count - 1:
                time.sleep(0.01)
            for receiver in receivers:
                receiver.close()
        if os.path.exists(gateway_log):
            with open(gateway_log) as fh:
                for line in fh:
                    received.add(line)
        seen = received.numbers()
        if layer in ("file", "layered"):
            # wakes coalesce: one seen later covers the earlier ones (see the module doc)
            top = received.highest()
            delivered = sum(1 for n in range(count) if n in seen or n <= top)
        else:
            delivered = len(seen & set(range(count)))
        return delivered, reported, elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> list[Row]:
    count = 100 if quick else 1000
    rows = []
    for layer in LAYERS:
        for condition in CONDITIONS:
            # With the receiver absent every socket wake waits through its retries (0.4 s):
            # fewer wakes there keep the run short.
            n = count // 10 if condition == "absent" else count
            delivered, reported, elapsed = _cell(layer, condition, n)
            share = 100.0 * delivered / n
            # With nobody there, nothing can arrive except through the file, which waits.
            expect = condition != "absent" or layer in ("file", "layered")
            rows.append(
                Row(
                    AREA,
                    f"wake via {layer}, receiver {condition}: delivered/attempted",
                    round(share, 2),
                    "%",
                    ">= 99.9 %" if expect else "",
                    share >= 99.9 if expect else None,
                    f"{delivered}/{n} delivered, {reported} reported ok, {elapsed:.1f} s",
                )
            )
    return rows
