"""The web view: how long from a send until the page's event stream carries the message
(`relayctl web`, Server-Sent Events), with relayd and with the store + inotify alone.

Needs the web extra (Starlette, uvicorn); without it the row says so and the rest runs.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import shutil
import signal
import subprocess
import time
from urllib.parse import urlsplit

from relayd.client.full import Client

from .bench_daemon import Relayd
from .common import PYTHON, Row, child_env, median_ms, p99_ms, scratch_dir

AREA = "web"
TARGET_MS = 1000.0


def _web(env: dict[str, str]) -> tuple[subprocess.Popen, str, int, str]:
    proc = subprocess.Popen([PYTHON, "-m", "relayctl", "web", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready:
        proc.kill()
        raise RuntimeError("relayctl web printed no URL")
    url = urlsplit(proc.stdout.readline().strip())
    return proc, url.hostname or "127.0.0.1", url.port or 0, url.fragment.removeprefix("token=")  # the token rides in the #fragment


def _latencies(env: dict[str, str], store: str, socket: str | None, count: int) -> list[float]:
    proc, host, port, token = _web(env)
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/api/events", headers={"X-Relay-Token": token, "Host": f"{host}:{port}"})
        stream = conn.getresponse()
        assert stream.status == 200, stream.status

        def next_state() -> dict:
            data = b""
            while True:
                line = stream.fp.readline()
                if line.startswith(b"data: "):
                    data = line[6:]
                elif line in (b"\n", b"\r\n") and data:
                    return json.loads(data)

        next_state()
        samples = []
        with Client(store, socket, name="bench") as client:
            for n in range(count):
                start = time.perf_counter()
                sent = client.call("send", {"agent": "overlord", "to": ["inferno"], "body": f"web bench {n}"})["messages"][0]["id"]
                while sent not in {m["id"] for m in next_state().get("messages", [])}:
                    pass
                samples.append(time.perf_counter() - start)
                time.sleep(0.12)  # let the view's coalescing gap pass, as between real messages
        conn.close()
        return samples
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(quick: bool) -> list[Row]:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return [Row(AREA, "send -> web view event stream", float("nan"), "ms", note="skipped: the web extra is not installed (pip install 'relay-bus[web]')")]
    count = 20 if quick else 100
    rows = []
    daemon = Relayd()
    try:
        samples = _latencies(daemon.env, daemon.store, daemon.socket, count)
    finally:
        daemon.close()
    rows.append(Row(AREA, "send -> web view event stream carries it, relayd up: median", round(median_ms(samples), 1), "ms", target=f"< {TARGET_MS:.0f} ms", ok=median_ms(samples) < TARGET_MS if not quick else None, note=f"{count} sends, p99 {p99_ms(samples):.1f} ms"))
    root = scratch_dir("rbw-")
    try:
        store = os.path.join(root, "store")
        env = child_env(store, os.path.join(root, "relayd.sock"))
        subprocess.run([PYTHON, "-m", "relayctl", "init", "--preset", "overlord"], env=env, check=True, stdout=subprocess.DEVNULL)
        samples = _latencies(env, store, os.path.join(root, "relayd.sock"), count)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows.append(Row(AREA, "send -> web view event stream carries it, no relayd (inotify): median", round(median_ms(samples), 1), "ms", target=f"< {TARGET_MS:.0f} ms", ok=median_ms(samples) < TARGET_MS if not quick else None, note=f"{count} sends, p99 {p99_ms(samples):.1f} ms"))
    return rows
