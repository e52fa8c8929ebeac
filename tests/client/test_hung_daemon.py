"""A relayd that is there but does not answer (SIGSTOP) does not hang its clients: relayctl
and relay's client run a request relayd has not seen, a send (by its id) and anything that
changes nothing on the store themselves after the answer wait (layout.ANSWER_WAIT), and
a send relayd finds waiting when it wakes up is not stored a second time."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

import msgspec
import pytest

from relayd import ops
from relayd.wire import handshake
from relayd.client.full import Client
from relayd.errors import TimedOut
from relayd.inbox.read import read_all
from relayd.store import Store
from relayd.ulid import new_ulid
from support.relayd_proc import RawClient


def inbox_ids(store_dir) -> list[str]:
    with Store(str(store_dir)) as store:
        return [m["id"] for m in msgspec.to_builtins(read_all(store, "inferno"))["messages"]]


@pytest.fixture
def stopped(daemon):
    """relayd, stopped with SIGSTOP for the test's body; SIGCONT afterwards in any case."""
    yield daemon
    os.kill(daemon.pid, signal.SIGCONT)


@pytest.mark.slow
def test_relayctl_send_to_a_stopped_relayd_is_stored_once_and_relayd_does_not_store_it_again(stopped, relayctl, store_dir):
    chosen = new_ulid()
    # A client that reached relayd and sent its request just as relayd stopped...
    early = RawClient(stopped.socket_path)
    early.send_line({"type": "hello", "version": handshake.VERSION})
    assert early.line()["type"] == "hello"
    os.kill(stopped.pid, signal.SIGSTOP)
    early.send_line({"type": "request", "id": 1, "op": "send", "params": {"agent": "storm", "to": ["inferno"], "body": "deploy done", "id": chosen}})
    # ...and the same send (its id) through relayctl: it does not wait for relayd (the 10 s
    # limit would fail the run before this change, 60 s), it stores the message itself.
    sent = relayctl("--json", "send", "inferno", "deploy done", "--id", chosen, agent="storm", timeout=10)
    assert json.loads(sent.stdout)["id"] == chosen
    plain = relayctl("--json", "send", "inferno", "and another", agent="storm", timeout=10)
    another = json.loads(plain.stdout)["id"]
    assert inbox_ids(store_dir) == [chosen, another]

    status = relayctl("status", timeout=10)
    assert status.stdout.startswith("relayd: not answering (stopped or stuck?; direct mode)")
    daemon_state = json.loads(relayctl("--json", "status", timeout=10).stdout)["daemon"]
    assert daemon_state["running"] is False and daemon_state["hung"] is True

    os.kill(stopped.pid, signal.SIGCONT)
    # relayd wakes up and runs the request that waited in its socket: it finds the copy.
    answer = early.line()
    assert answer["ok"] and answer["result"]["duplicates"] == ["inferno"], answer
    assert inbox_ids(store_dir) == [chosen, another]
    assert relayctl("status").stdout.startswith("relayd: running")


@pytest.mark.slow
def test_a_connected_client_runs_a_send_and_a_read_itself_when_relayd_stops_answering(stopped, store_dir):
    with Client(str(store_dir), stopped.socket_path) as client:
        client.call("version")  # connected and greeted while relayd runs (relay-mcp's case)
        assert client.mode == "daemon"
        os.kill(stopped.pid, signal.SIGSTOP)
        result = client.call("send", {"agent": "storm", "to": ["inferno"], "body": "stuck?"})
        assert client.mode == "direct" and client.silent
        [message] = result["messages"]
        assert client.call("unread", {"agent": "inferno"})["unread"] == 1  # changes nothing: run here too
        assert client.silent
    os.kill(stopped.pid, signal.SIGCONT)
    with Client(str(store_dir), stopped.socket_path) as client:
        client.call("version")  # relayd answers again, after the request it found waiting
        assert client.mode == "daemon" and not client.silent
    assert inbox_ids(store_dir) == [message["id"]]


@pytest.mark.slow
def test_a_change_on_a_kept_connection_to_a_stopped_relayd_runs_here_as_relayd_never_saw_it(stopped, store_dir):
    with Client(str(store_dir), stopped.socket_path) as client:
        client.call("version")
        os.kill(stopped.pid, signal.SIGSTOP)
        # Not safe to repeat, so relay's client first asks whether relayd answers at all.
        reserved = client.call("reserve", {"agent": "storm", "repo": str(store_dir), "pattern": "src/*.py"})
        assert reserved["reserved"] and client.mode == "direct" and client.silent
    os.kill(stopped.pid, signal.SIGCONT)
    with Client(str(store_dir), stopped.socket_path) as client:
        listed = client.call("reservations", {})
        assert client.mode == "daemon"
    assert [r["pattern"] for r in listed] == ["src/*.py"]


class MuteAfterGreeting:
    """A relayd stand-in that greets, answers two requests, then reads the next and says
    nothing: a relayd that stopped just after answering."""

    def __init__(self, store_dir: str, socket_path: str) -> None:
        self.store_dir = store_dir
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen(1)
        self.seen: list[dict] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn, conn.makefile("rb") as reader:
            reader.readline()
            conn.sendall(json.dumps({"type": "hello", "version": handshake.VERSION, "server": "relayd", "store": self.store_dir}).encode() + b"\n")
            for answered in (True, True, False):
                request = json.loads(reader.readline())
                self.seen.append(request)
                if answered:
                    conn.sendall(json.dumps({"type": "response", "id": request["id"], "ok": True, "result": {}}).encode() + b"\n")
            self.done.wait(30)
        self.listener.close()


@pytest.mark.slow
def test_a_change_relayd_took_and_did_not_answer_is_not_run_again_here(relay_env, store_dir):
    with Store(str(store_dir)) as store:
        ops.call(store, "init", {"preset": "overlord"})
    mute = MuteAfterGreeting(str(store_dir), relay_env["RELAY_SOCKET"])
    try:
        with Client(str(store_dir), relay_env["RELAY_SOCKET"], timeout=1) as client:
            client.call("version")
            with pytest.raises(TimedOut) as raised:
                client.call("reserve", {"agent": "storm", "repo": str(store_dir), "pattern": "src/*.py"})
    finally:
        mute.done.set()
    assert [r["op"] for r in mute.seen] == ["version", "version", "reserve"]  # a call, the question, the request
    assert raised.value.message == "relayd did not answer in time (is it stopped or overloaded?); 'reserve' may or may not have been done (check before repeating it)"
    with Store(str(store_dir)) as store:
        assert ops.call(store, "reservations", {}) == []  # not done here as well


@pytest.mark.slow
def test_relay_mcp_sends_and_reads_with_relayd_stopped(stopped, relay_env, store_dir):
    shim = subprocess.Popen([sys.executable, "-m", "mcp_shim"], env=dict(relay_env, OVLD_ROLE="storm"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def rpc(number: int, method: str, params: dict) -> dict:
        shim.stdin.write(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}).encode() + b"\n")
        shim.stdin.flush()
        # (a bound, not a measurement: before this change relay-mcp waited 30 s, then failed)
        assert select.select([shim.stdout], [], [], 20)[0], f"relay-mcp did not answer {method}"
        reply = json.loads(shim.stdout.readline())
        assert reply["id"] == number, reply
        return reply["result"]

    def tool(number: int, name: str, arguments: dict) -> dict:
        result = rpc(number, "tools/call", {"name": name, "arguments": arguments})
        assert not result.get("isError"), result
        return result["structuredContent"]

    try:
        rpc(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}})
        tool(2, "send_message", {"to": "inferno", "subject": "up", "body": "through relayd"})
        os.kill(stopped.pid, signal.SIGSTOP)
        sent = tool(3, "send_message", {"to": "inferno", "subject": "stopped", "body": "relayd stopped"})
        inbox = tool(4, "check_inbox", {})  # marks read: asks relayd first, then runs here
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
        shim.stdin.close()
        shim.wait(10)
        shim.stdout.close()
    assert inbox["messages"] == []
    assert inbox_ids(store_dir)[1:] == [sent["sent"][0]["id"]]
