"""relay-mcp's bookkeeping (last-seen before, unread count after, how a send's recipients
were told) travels in the same request as the tool's operation, as its session fields
(relayd.session, protocol 3): a real relay-mcp, driven by the MCP SDK client, talks to a
real relayd through a proxy that records every request it sends. A version 2 client's
`session_call` still works."""

from __future__ import annotations

import json
import os
import shutil
import socket
from typing import Any, Iterator

import msgspec
import pytest
from support.mcp_session import mcp_client, start_relayd, stop_relayd, structured
from support.rawclient import RawClient
from support.unix_server import UnixServer

from relayd import ops
from relayd.store import Store


SESSION_FIELDS = ("touch", "unread", "announce")
BOOKKEEPING = ("touch", "unread")  # a tool call's first request: refresh last-seen, count unread


class RecordingProxy:
    """A Unix socket that forwards each connection to relayd's and keeps the requests."""

    def __init__(self, path: str, upstream: str) -> None:
        self.upstream = upstream
        self.requests: list[dict[str, Any]] = []
        self.server = UnixServer(path, self._connect)

    def _connect(self, client: socket.socket) -> None:
        upstream = self.server.keep(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        upstream.connect(self.upstream)
        self.server.spawn(self._pump, client, upstream, True)
        self.server.spawn(self._pump, upstream, client, False)

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        buffer = b""
        try:
            while data := source.recv(65536):
                if record:
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    self.requests += [frame for frame in map(json.loads, lines) if frame.get("type") == "request"]
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take(self) -> list[tuple[str, tuple[str, ...]]]:
        """(op, the session fields it asks for) of each request since the last take."""
        taken, self.requests = self.requests, []
        return [(r["op"], tuple(field for field in SESSION_FIELDS if r.get(field))) for r in taken]

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def proxied(relayctl: Any, relay_env: dict[str, str]) -> Iterator[tuple[dict[str, str], RecordingProxy]]:
    """relayd on its socket; relay-mcp pointed at a recording proxy in front of it."""
    relayctl("init", "--preset", "overlord", "--allow-new-agents")  # a new role may join (test_a_new_role_...)
    relayd = start_relayd(relay_env)
    proxy_path = os.path.join(os.path.dirname(relay_env["RELAY_SOCKET"]), "proxy.sock")
    proxy = RecordingProxy(proxy_path, relay_env["RELAY_SOCKET"])
    try:
        yield dict(relay_env, RELAY_SOCKET=proxy_path), proxy
    finally:
        proxy.close()
        stop_relayd(relayd)


def heartbeat(relay_env: dict[str, str], agent: str) -> str:
    with Store(relay_env["RELAY_DIR"]) as store:
        return next(a["last_heartbeat"] for a in msgspec.to_builtins(ops.call(store, "agents", {"name": agent})))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.slow
@pytest.mark.anyio
async def test_one_request_per_tool_call(proxied: tuple[dict[str, str], RecordingProxy], relayctl: Any) -> None:
    env, proxy = proxied
    relayctl("send", "glacier", "frontend is blocked on you", agent="storm")
    before = heartbeat(env, "glacier")
    async with mcp_client(env, "glacier", "legacy") as glacier:
        proxy.take()  # (the session's start: presence refreshed on the files)
        sent = await glacier.call_tool("send_message", {"to": "inferno", "subject": "frontend", "body": "on it"})
        # the send with its bookkeeping is one request, and relayd's reply to it also says how
        # each recipient is being told (issue 23's report): no second request for the track
        assert proxy.take() == [("send", (*BOOKKEEPING, "announce"))]
        assert structured(sent)["announced"] == [{"to": "inferno", "how": "channel", "pending": True}]
        # the same answer as three requests gave: the send, the notice of waiting mail, last-seen refreshed
        assert structured(sent)["notice"] == "[relay] 1 unread message waiting: call check_inbox."
        assert sent.content[-1].text == "[relay] 1 unread message waiting: call check_inbox."
        after = heartbeat(env, "glacier")  # a preset agent is "never seen" until it first speaks
        assert after is not None and (before is None or after > before)
        assert [m["body"] for m in msgspec.json.decode(relayctl("--json", "read", agent="inferno").stdout)] == ["on it"]

        read = await glacier.call_tool("check_inbox", {})
        # marking read is not safe to repeat: relay-mcp first asks whether relayd answers
        # at all (docs/daemon.md, "When relayd does not answer"), then reads
        assert proxy.take() == [("version", ()), ("read", BOOKKEEPING)]
        assert [m["body"] for m in structured(read)["messages"]] == ["frontend is blocked on you"]
        assert "notice" not in structured(read)

        # an operation a bridged relayd decides team-wide goes alone: bookkeeping apart, as before
        await glacier.call_tool("reserve_files", {"pattern": "src/ui/**", "repo": "/tmp/somewhere"})
        assert proxy.take() == [("version", ()), ("touch", ()), ("version", ()), ("reserve", ()), ("unread", ())]

        failed = await glacier.call_tool("send_message", {"to": "nobody", "subject": "hi", "body": "hello?"})
        assert failed.is_error and "unknown agent 'nobody'" in failed.content[0].text
        assert proxy.take() == [("send", (*BOOKKEEPING, "announce"))]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_new_role_is_registered_then_its_call_runs(proxied: tuple[dict[str, str], RecordingProxy], relayctl: Any) -> None:
    env, proxy = proxied
    async with mcp_client(env, "reviewer", "legacy") as reviewer:
        assert proxy.take() == [("touch", ()), ("version", ()), ("register", ())]  # the session's start registers the new role
        status = structured(await reviewer.call_tool("check_hub_status", {}))
        assert proxy.take() == [("unread", BOOKKEEPING), ("agents", ("unread",))]
        assert status["unread_count"] == 0 and "inferno" in {a["name"] for a in status["team_presence"]}
        assert heartbeat(env, "reviewer")  # registered
        # gone meanwhile (e.g. collected as stale): the next tool call registers it again first
        shutil.rmtree(os.path.join(env["RELAY_DIR"], "agents", "reviewer"))
        status = structured(await reviewer.call_tool("check_hub_status", {}))
        assert proxy.take() == [("unread", BOOKKEEPING), ("version", ()), ("touch", ()), ("version", ()), ("register", ()), ("unread", ("unread",)), ("agents", ("unread",))]
        assert status["unread_count"] == 0 and "inferno" in {a["name"] for a in status["team_presence"]}
        assert heartbeat(env, "reviewer")  # registered


def test_a_version_2_client_still_runs_session_call(daemon: Any) -> None:
    """A relay-mcp of protocol 2 greets with version 2 and wraps each tool call's operation in
    `session_call`: relayd answers its hello in version 2 (else that client refuses it,
    "restart relayd") and runs the call in its shape, with its refusals."""
    client = RawClient(daemon.socket_path)
    try:
        client.send_line({"type": "hello", "version": 2, "client": "relay-mcp 0.0.9"})
        assert client.line()["version"] == 2
        before = heartbeat(daemon.env, "storm")
        reply = client.request("session_call", {"agent": "storm", "op": "send", "params": {"agent": "storm", "to": ["inferno"], "body": "from an old session"}})
        assert reply["ok"], reply
        assert reply["result"]["unread"] == 0 and reply["result"]["result"]["messages"][0]["to"] == "inferno"
        assert "unread" not in reply and "announced" not in reply  # (version 3's own fields: not asked)
        after = heartbeat(daemon.env, "storm")
        assert after is not None and (before is None or after > before)  # touched, as version 2 did
        reply = client.request("session_call", {"agent": "inferno", "op": "read", "params": {"agent": "inferno", "unread": True, "mark_read": True}, "touch": False})
        assert [m["body"] for m in reply["result"]["result"]["messages"]] == ["from an old session"] and reply["result"]["unread"] == 0
        reply = client.request("session_call", {"agent": "storm", "op": "unread", "params": {"agent": "storm"}, "touch": False, "unread": False})
        assert reply["result"] == {"result": {"agent": "storm", "unread": 0, "pending": False}, "unread": None}
        for op in ("register", "reserve", "release", "session_call"):
            reply = client.request("session_call", {"agent": "storm", "op": op, "params": {}})
            assert reply["error"]["code"] == "invalid_argument" and f"cannot run {op}" in reply["error"]["message"]
        reply = client.request("session_call", {"agent": "nobody", "op": "agents", "params": {}})
        assert reply["error"]["code"] == "unknown_agent" and reply["error"]["details"]["agent"] == "nobody"
    finally:
        client.close()
