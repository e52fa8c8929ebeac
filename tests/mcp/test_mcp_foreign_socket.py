"""relay-mcp never talks to another user's socket at relayd's name: with a squatter
(`nobody`, support.squatter) on the socket, its tools work on the store directly, the
squatter receives nothing, and relay-mcp's log says once whose socket it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.mcp_session import anyio_backend, mcp_client, server_log, structured  # noqa: F401  (fixtures used by name)
from support.squatter import FORGED, Squatter

SECRET = "SECRET deploy key hunter2"


@pytest.mark.slow
@pytest.mark.anyio
async def test_tools_skip_another_users_socket_and_use_the_store(relayctl: Any, relay_env: dict[str, str], store_dir: Path) -> None:
    relayctl.setup("init", preset="overlord")
    squatter = Squatter(str(store_dir))
    try:
        env = dict(relay_env, RELAY_SOCKET=squatter.socket_path)
        async with mcp_client(env, "strategist", "legacy") as strategist, mcp_client(env, "inferno", "legacy") as inferno:
            sent = structured(await strategist.call_tool("send_message", {"to": "inferno", "subject": "deploy", "body": SECRET}))
            assert [s["to"] for s in sent["sent"]] == ["inferno"]
            await strategist.call_tool("send_message", {"to": "inferno", "subject": "again", "body": "second call, same refusal"})
            inbox = structured(await inferno.call_tool("check_inbox", {}))
            assert [m["body"] for m in inbox["messages"]] == [SECRET, "second call, same refusal"]
            assert FORGED not in str(inbox)
        assert squatter.received() == ""
        logged = [line for line in Path(server_log(env, "strategist")).read_text().splitlines() if "nobody" in line]
        assert logged == [f"warning: {squatter.socket_path} belongs to nobody (uid 65534), not to you: relay does not talk to another user's socket; working on the store directly"]
    finally:
        squatter.stop()
