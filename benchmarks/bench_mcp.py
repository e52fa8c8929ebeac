"""relay-mcp: start-up to the tools/list reply and memory, next to a minimal server on the
official MCP SDK and to `python3 -c pass`; what tools/list costs a model; and how long a
message sent by one pane takes to appear as a channel event in another, with relayd.
"""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import socket
import statistics
import subprocess
import time

import msgspec

from .common import PYTHON, Row, child_env, median_ms, p99_ms, scratch_dir, time_process

AREA = "mcp"
HERE = os.path.dirname(os.path.abspath(__file__))
RELAY_MCP = os.path.join(os.path.dirname(PYTHON), "relay-mcp")  # what `relayctl mcp-config` writes

_OPENING = b"".join(
    msgspec.json.encode(m) + b"\n"
    for m in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
)


class Pipe:
    """A stdio MCP server process and its reply lines."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def receive(self, timeout: float = 30.0) -> dict:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("no reply from the MCP server")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError("the MCP server closed stdout")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return msgspec.json.decode(line)

    def until(self, predicate, timeout: float = 30.0) -> dict:
        while True:
            message = self.receive(timeout)
            if predicate(message):
                return message

    def peak_rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def start_to_tools_list(argv: list[str], env: dict[str, str], count: int) -> tuple[list[float], list[float]]:
    """Seconds from spawning the server to its tools/list reply, and its peak RSS then."""
    times, rss = [], []
    for _ in range(count):
        start = time.perf_counter()
        server = Pipe(argv, env)
        server.send(_OPENING)
        server.until(lambda m: m.get("id") == 2)
        times.append(time.perf_counter() - start)
        rss.append(server.peak_rss_mib())
        server.close()
    return times, rss


def _call(server: Pipe, request_id: int, tool: str, arguments: dict) -> dict:
    server.send(msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}) + b"\n")
    return server.until(lambda m: m.get("id") == request_id)


def send_to_channel_event(store: str, sock: str, count: int) -> list[float]:
    """strategist calls send_message; seconds until inferno's relay-mcp emits the event."""
    from mcp_shim.follow import MIN_INTERVAL_SECONDS

    sender = Pipe([RELAY_MCP], child_env(store, sock, OVLD_ROLE="strategist"))
    receiver = Pipe([RELAY_MCP], child_env(store, sock, OVLD_ROLE="inferno"))
    try:
        for server, capabilities in ((sender, {}), (receiver, {"experimental": {"claude/channel": {}}})):
            server.send(msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "bench", "version": "1"}}}) + b"\n")
            server.until(lambda m: m.get("id") == 1)
            server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        _call(sender, 2, "check_hub_status", {})  # first call loads the store client
        time.sleep(0.3)  # let the receiver settle on its wake-up source (relayd or inotify)
        samples = []
        for n in range(count):
            start = time.perf_counter()
            _call(sender, 10 + n, "send_message", {"to": "inferno", "subject": f"ping {n}", "body": "latency probe"})
            receiver.until(lambda m: m.get("method") == "notifications/claude/channel")
            samples.append(time.perf_counter() - start)
            time.sleep(MIN_INTERVAL_SECONDS + 0.05)  # one message per quiet spell, not a burst
        return samples
    finally:
        sender.close()
        receiver.close()


def _start_relayd(store: str, sock: str) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, "-m", "relayd.daemon", "--dir", store, "--socket", sock], env=child_env(store, sock), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(sock)
            return proc
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
    proc.terminate()
    raise RuntimeError("relayd did not start")


def _sdk_reference(env: dict[str, str], starts: int) -> list[Row]:
    """The MCP Python SDK's minimal server, the reference relay-mcp is compared with. The
    SDK is in the test extra only: on a plain `pip install .` these rows say so instead."""
    names = ("SDK minimal server start -> tools/list (reference)", "SDK minimal server peak RSS (reference)")
    if importlib.util.find_spec("mcp") is None:
        missing = "not run: the mcp package is not installed (pip install '.[test]')"
        return [Row(AREA, names[0], float("nan"), "ms", note=missing), Row(AREA, names[1], float("nan"), "MiB", note=missing)]
    sdk_t, sdk_rss = start_to_tools_list([PYTHON, os.path.join(HERE, "sdk_minimal_server.py")], env, starts)
    return [Row(AREA, names[0], median_ms(sdk_t), "ms", note="mcp.server.mcpserver, one tool"), Row(AREA, names[1], statistics.median(sdk_rss), "MiB")]


def run(quick: bool) -> list[Row]:
    from mcp_shim.tools import model_visible_chars

    starts = 5 if quick else 20
    workdir = scratch_dir()
    store = os.path.join(workdir, "store")
    sock = os.path.join(workdir, "relayd.sock")
    rows: list[Row] = []
    try:
        subprocess.run([PYTHON, "-m", "relayctl", "init", "--preset", "overlord"], env=child_env(store, sock), check=True, capture_output=True)
        env = child_env(store, sock, OVLD_ROLE="inferno")

        relay_t, relay_rss = start_to_tools_list([RELAY_MCP], env, starts)
        bare = time_process([PYTHON, "-c", "pass"], count=starts)
        relay_ms, relay_mib = median_ms(relay_t), statistics.median(relay_rss)
        rows += [
            Row(AREA, "relay-mcp start -> tools/list reply", relay_ms, "ms", "<= 60 ms", relay_ms <= 60, f"median of {starts}"),
            Row(AREA, "relay-mcp peak RSS at tools/list", relay_mib, "MiB", "<= 15 MiB", relay_mib <= 15),
        ]
        rows += _sdk_reference(env, max(3, starts // 4))
        rows.append(Row(AREA, "python3 -c pass (reference)", median_ms(bare), "ms", note="interpreter start alone"))

        tokens = model_visible_chars() / 4
        rows.append(Row(AREA, "tools/list shown to a model", tokens, "tokens", "<= 600 tokens", tokens <= 600, "chars/4 of names, descriptions, input schemas"))

        pushes = 5 if quick else 20
        direct = send_to_channel_event(store, sock, pushes)
        rows.append(Row(AREA, "send_message -> channel event, no relayd (inotify)", median_ms(direct), "ms", "< 1000 ms", max(direct) < 1, f"p99 {p99_ms(direct):.1f} ms"))
        daemon = _start_relayd(store, sock)
        try:
            served = send_to_channel_event(store, sock, pushes)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
        rows.append(Row(AREA, "send_message -> channel event, with relayd", median_ms(served), "ms", "< 1000 ms", max(served) < 1, f"p99 {p99_ms(served):.1f} ms"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows
