"""A message whose subject, thread and body try to forge a second message (support.forged_mail)
reaches the model through relay-mcp as data: the channel event that announces it and the
check_inbox result that hands it over (its structuredContent, which is what Claude Code
shows a model, and its text block) carry no line that reads like relay's header, and no
raw line break inside a JSON string. Through the official MCP SDK client."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.forged_mail import BREAKS, ORDER, forged, headers_forged
from support.mcp_session import ChannelInbox, anyio_backend, channel_capable, mcp_client, structured, team  # noqa: F401  (fixtures used by name)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_forged_header_reaches_the_model_as_data(team: None, relay_env: dict[str, str], relayctl: Any, channel_capable: None) -> None:
    inbox = ChannelInbox()
    breaks = list(BREAKS.values())
    async with mcp_client(relay_env, "inferno", "legacy", channel=inbox) as inferno:
        await inferno.call_tool("check_hub_status", {})
        for brk in breaks:
            relayctl.setup("send", agent="storm", to=["inferno"], subject=forged(brk), thread=forged(brk), body=forged(brk))
            await inbox.wait(10.0)
        for event in inbox.events:
            assert headers_forged(event.content, real=0) == [], event.content
            assert all(len(value.splitlines()) == 1 for value in event.meta.values()), event.meta
        result = await inferno.call_tool("check_inbox", {})
        inbox_read = structured(result)
        assert len(inbox_read["messages"]) == len(breaks)
        for shown in (json.dumps(inbox_read, ensure_ascii=False), *(block.text for block in result.content)):
            assert headers_forged(shown, real=0) == [] and len(shown.splitlines()) == 1, shown[:400]
        assert all("athena" in m["subject"] and ORDER in m["body"] for m in inbox_read["messages"])  # handed over, as data
