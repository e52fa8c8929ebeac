"""The NATS bridge: cross-host send -> remote inbox event latency and throughput, next to
the same work on one host. Two stores and two relayd on this machine stand in for two
hosts, joined by a local nats-server with JetStream (loopback only).

Needs `nats-server` on PATH (Debian package nats-server) and nats-py (`relay-bus[bridge]`);
without either, one row says so and the other areas still run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from tests.support.rawclient import RawClient

from .common import PYTHON, Row, child_env, median_ms, p99_ms, scratch_dir

AREA = "bridge"


def _nats_server() -> str | None:
    return shutil.which("nats-server") or ("/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


BUDGET = 100_000  # messages a host stores for another per hour, here (relayd.bridge.budget)


class Team:
    """nats-server + relayd alpha (agents storm, wind) + relayd beta (agent inferno)."""

    def __init__(self) -> None:
        self.dir = scratch_dir("rbb-")
        self.port = _free_port()
        self.procs: list[subprocess.Popen] = []
        server = subprocess.Popen(
            [_nats_server(), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", os.path.join(self.dir, "js")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(server)
        _wait(lambda: _answers(self.port), "nats-server")
        self.hosts = {}
        for name, agents in (("alpha", ("storm", "wind")), ("beta", ("inferno",))):
            store = os.path.join(self.dir, name)
            sock = os.path.join(self.dir, f"{name}.sock")
            env = child_env(store, sock)
            subprocess.run([PYTHON, "-m", "relayctl", "init"], env=env, check=True, stdout=subprocess.DEVNULL)
            # The throughput rows send 10,000 to the other host in seconds: above what a host
            # stores for another per hour by default (bridge.budget, 5,000), which refuses the rest.
            with open(os.path.join(store, "config.json"), "w") as config:
                json.dump({"bridge": {"budget": {"messages_per_hour": BUDGET}}}, config)
            proc = subprocess.Popen(
                [PYTHON, "-m", "relayd.daemon", "--log-level", "warning", "--bridge", f"nats://127.0.0.1:{self.port}", "--host-name", name],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            self.procs.append(proc)
            _wait(lambda: _connected(sock), f"relayd {name}")
            for agent in agents:
                _wait(lambda: _ok(sock, "register", {"name": agent}), f"register {agent}")
            self.hosts[name] = sock
        _wait(lambda: any(a["name"] == "inferno" for a in _call(self.hosts["alpha"], "status", {})["bridge"]["agents"]), "the directory")

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"benchmark setup: {what} not ready after {timeout}s")
        time.sleep(0.05)


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
        return conn.recv(4).startswith(b"INFO")


def _call(sock: str, op: str, params: dict) -> dict:
    client = RawClient(sock)
    try:
        return client.request(op, params)["result"]
    finally:
        client.close()


def _ok(sock: str, op: str, params: dict) -> bool:
    client = RawClient(sock)
    try:
        return client.request(op, params)["ok"]
    finally:
        client.close()


def _connected(sock: str) -> bool:
    return (_call(sock, "status", {}).get("bridge") or {}).get("state") == "connected"


def _send(i: int, to: str) -> bytes:
    return json.dumps({"type": "request", "id": i, "op": "send", "params": {"agent": "storm", "to": [to], "body": "benchmark message"}}).encode() + b"\n"


def latency(team: Team, to: str, event_sock: str, count: int) -> list[float]:
    """Send one, wait for the recipient host's inbox event, repeat."""
    subscriber = RawClient(event_sock, timeout=30)
    subscriber.send_bytes(json.dumps({"type": "subscribe", "topics": ["inbox"], "agent": to}).encode() + b"\n")
    subscriber.raw_lines(1)
    sender = RawClient(team.hosts["alpha"], timeout=30)
    samples = []
    try:
        for i in range(count):
            start = time.perf_counter()
            sender.send_bytes(_send(i, to))
            subscriber.raw_lines(1)
            samples.append(time.perf_counter() - start)
            sender.raw_lines(1)
    finally:
        subscriber.close()
        sender.close()
    return samples


def throughput(team: Team, to: str, event_sock: str, total: int) -> float:
    """Pipelined sends (batches of 500) until the last inbox event on the recipient's host."""
    subscriber = RawClient(event_sock, timeout=60)
    subscriber.send_bytes(json.dumps({"type": "subscribe", "topics": ["inbox"], "agent": to}).encode() + b"\n")
    subscriber.raw_lines(1)
    sender = RawClient(team.hosts["alpha"], timeout=60)
    done: list[float] = []
    # Read events while sending: a subscriber that stops reading is dropped by design.
    reader = threading.Thread(target=lambda: (subscriber.raw_lines(total), done.append(time.perf_counter())), daemon=True)
    try:
        reader.start()
        start = time.perf_counter()
        sent = 0
        while sent < total:
            batch = min(500, total - sent)
            sender.send_bytes(b"".join(_send(sent + n, to) for n in range(batch)))
            sender.raw_lines(batch)
            sent += batch
        reader.join(120)
        if not done:
            raise RuntimeError(f"not every event arrived within 120 s ({total} sent to {to})")
        return done[0] - start
    finally:
        subscriber.close()
        sender.close()


def run(quick: bool) -> list[Row]:
    missing = "nats-server not installed" if _nats_server() is None else None
    if missing is None:
        try:
            import nats  # noqa: F401  (only: is it installed?)
        except ImportError:
            missing = "nats-py not installed (pip install 'relay-bus[bridge]')"
    if missing:
        return [Row(AREA, "cross-host send -> remote inbox event, throughput", "skipped", "", note=missing)]  # type: ignore[arg-type]
    count, total = (200, 1000) if quick else (2000, 10000)
    team = Team()
    try:
        print("    latency ...", file=sys.stderr, flush=True)
        local = latency(team, "wind", team.hosts["alpha"], count)
        remote = latency(team, "inferno", team.hosts["beta"], count)
        print("    throughput ...", file=sys.stderr, flush=True)
        local_s = throughput(team, "wind", team.hosts["alpha"], total)
        remote_s = throughput(team, "inferno", team.hosts["beta"], total)
    finally:
        team.close()
    note = f"{count} sequential sends, next one after the event"
    return [
        Row(AREA, "send -> inbox event, one host: median", round(median_ms(local), 3), "ms", note=note),
        Row(AREA, "send -> inbox event, one host: p99", round(p99_ms(local), 3), "ms"),
        Row(AREA, "cross-host send -> remote inbox event: median", round(median_ms(remote), 3), "ms", note="via outbox, JetStream, remote fsync + ack"),
        Row(AREA, "cross-host send -> remote inbox event: p99", round(p99_ms(remote), 3), "ms"),
        Row(AREA, f"{total:,} pipelined sends, one host, until the last event", round(total / local_s), "msg/s", note=f"{local_s:.2f} s"),
        Row(AREA, f"{total:,} pipelined sends across hosts, until the last remote event", round(total / remote_s), "msg/s", note=f"{remote_s:.2f} s; each host's bridge.budget raised to {BUDGET:,} messages an hour"),
    ]
