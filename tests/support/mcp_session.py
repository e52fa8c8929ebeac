"""relay-mcp as its tests meet it: the official MCP SDK client over real stdio pipes to a
real `python -m mcp_shim`, a relayd process to start and stop under it, a channel-event
inbox, and the fixtures `team` and `anyio_backend` (import them by name into a test module)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import jsonschema
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.session import ClientSession
from mcp.types import Implementation
from pydantic import BaseModel

OVERLORD = ["overlord", "strategist", "inferno", "glacier", "shadow", "storm"]
CHANNEL_CLIENT = "channel-test-client"


class ChannelParams(BaseModel, extra="allow"):
    content: str
    meta: dict[str, str]


class ChannelInbox(ClientExtension):
    """Collects `notifications/claude/channel` events as they arrive."""

    identifier = "io.github.relay-tests/channel-inbox"

    def __init__(self) -> None:
        self.events: list[ChannelParams] = []
        self.arrived = anyio.Event()

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/claude/channel", params_type=ChannelParams, handler=self._got)]

    async def _got(self, params: ChannelParams) -> None:
        self.events.append(params)
        self.arrived.set()

    async def wait(self, timeout: float) -> None:
        with anyio.fail_after(timeout):
            await self.arrived.wait()
        self.arrived = anyio.Event()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK client's stdio transport is exercised on asyncio, as Claude Code's peers run it


@pytest.fixture
def channel_capable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients named CHANNEL_CLIENT declare `experimental["claude/channel"]` (the SDK client
    has no public way to declare an experimental capability)."""
    build = ClientSession._build_capabilities

    def with_channel(self: ClientSession, version: str) -> Any:
        capabilities = build(self, version)
        if self._client_info is not None and self._client_info.name == CHANNEL_CLIENT:
            capabilities.experimental = {"claude/channel": {}}
        return capabilities

    monkeypatch.setattr(ClientSession, "_build_capabilities", with_channel)


@pytest.fixture
def team(relayctl: Any) -> None:
    relayctl.setup("init", preset="overlord")


def start_relayd(env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "relayd.daemon", "--dir", env["RELAY_DIR"], "--socket", env["RELAY_SOCKET"]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(env["RELAY_SOCKET"])
            return proc
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
        if proc.poll() is not None:
            break
    stop_relayd(proc)
    raise AssertionError("relayd did not start listening")


def stop_relayd(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@asynccontextmanager
async def mcp_client(env: dict[str, str], role: str, mode: str, *, channel: ChannelInbox | None = None, declare: bool = True, cwd: str | None = None) -> AsyncIterator[Client]:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_shim"],
        env={"RELAY_DIR": env["RELAY_DIR"], "RELAY_SOCKET": env["RELAY_SOCKET"], "OVLD_ROLE": role,
             **{k: v for k, v in env.items() if k == "RELAY_MCP_BEAT"}},
        cwd=cwd,
    )
    name = CHANNEL_CLIENT if channel is not None and declare else "plain-test-client"
    with open(server_log(env, role), "a") as errlog:
        async with Client(
            stdio_client(server, errlog=errlog),
            mode=mode,  # type: ignore[arg-type]
            client_info=Implementation(name=name, version="1"),
            extensions=[channel] if channel is not None else None,
            read_timeout_seconds=30,
        ) as client:
            yield client


def server_log(env: dict[str, str], role: str) -> str:
    """Where the relay-mcp of `role` logs (its stderr)."""
    return os.path.join(os.path.dirname(env["RELAY_DIR"]), f"relay-mcp-{role}.log")


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def check_against_schema(client: Client, tool: str, result: Any) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    jsonschema.validate(result.structured_content, tools[tool].output_schema)


def run_shim(env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "mcp_shim"], input=stdin, env=env, capture_output=True, timeout=30)
