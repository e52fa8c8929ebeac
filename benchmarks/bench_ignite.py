"""IGNITE queue served by relayd: how long from a file landing in DIR/<agent>/ to the file
being marked `delivered` (moved to processed/, announced through relay's inbox).

IGNITE's own monitor polls every 10 s (0-10 s, 5 s on average); relay reacts to inotify.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from .common import PYTHON, Row, child_env, median_ms, p99_ms, scratch_dir

TARGET_S = 1.0  # a new file is seen and delivered within a second


def _delivered(path: str) -> bool:
    from relayd.ignite import mime

    try:
        return mime.read_file(path).get("X-IGNITE-Status") == "delivered"
    except Exception:
        return False


def run(quick: bool) -> list[Row]:
    from relayd.ignite import mime

    count = 10 if quick else 50
    base = scratch_dir("rb-ignite-")
    store = os.path.join(base, "store")
    queue = os.path.join(base, "queue")
    env = child_env(store, os.path.join(base, "relayd.sock"))
    os.makedirs(os.path.join(queue, "ignitian_1", "processed"))
    subprocess.run([PYTHON, "-m", "relayctl", "init", "--preset", "ignite", "--workers", "1"], env=env, check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([PYTHON, "-m", "relayd.daemon", "--log-level", "warning", "--ignite-queue", queue], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(queue, ".relay-monitor.lock")):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("relayd did not start serving the queue")
            time.sleep(0.01)
        time.sleep(0.2)
        samples = []
        for n in range(count):
            name = f"task_assignment_{1770000000000000 + n:016d}.mime"
            message = mime.build(from_="coordinator", to=["ignitian_1"], type_="task_assignment", body=f'task_id: "t{n}"\n')
            start = time.perf_counter()
            mime.write_atomic(os.path.join(queue, "ignitian_1", name), message)
            done = os.path.join(queue, "ignitian_1", "processed", name)
            while not _delivered(done):
                if time.perf_counter() - start > 10:
                    raise RuntimeError(f"{name} was not delivered within 10 s")
                time.sleep(0.001)
            samples.append(time.perf_counter() - start)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(base, ignore_errors=True)
    median, p99 = median_ms(samples), p99_ms(samples)
    return [
        Row("ignite", f"file dropped -> delivered, relayd --ignite-queue, median of {count}", median, "ms", f"<= {TARGET_S * 1000:.0f} ms", median <= TARGET_S * 1000, "IGNITE's monitor: 10 s poll"),
        Row("ignite", "file dropped -> delivered, p99", p99, "ms", f"<= {TARGET_S * 1000:.0f} ms", p99 <= TARGET_S * 1000),
    ]
