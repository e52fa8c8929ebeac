"""relay-mcp driven by the official MCP SDK client over real stdio pipes.

Each scenario runs in the handshake era (`mode="legacy"`, revision 2025-11-25) and in the
2026-07-28 era (`mode="auto"`: the client probes `server/discover` and then stamps every
request with its `_meta` envelope).

The SDK client cannot declare `experimental` capabilities through its public API, so the
tests that need a client declaring `experimental["claude/channel"]` add it to the
capabilities the SDK builds; everything else is the SDK as shipped. (Claude Code itself
declares nothing and is recognised by its client name: see test_who_gets_channel_events;
the real program is driven in tests/programs/test_claude_code.py.)
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.types import Implementation

from mcp_shim.follow import MIN_INTERVAL_SECONDS
from mcp_shim.tools import model_visible_chars
from support.mcp_session import (  # noqa: F401  (fixtures used by name)
    CHANNEL_CLIENT,
    OVERLORD,
    ChannelInbox,
    anyio_backend,
    channel_capable,
    check_against_schema,
    mcp_client,
    run_shim,
    server_log,
    start_relayd,
    stop_relayd,
    structured,
    team,
)


MODES = ["legacy", "auto"]

TOKEN_BUDGET = 600


@pytest.fixture(params=["daemon-down", "daemon-up"])
def daemon(request: pytest.FixtureRequest, team: None, relay_env: dict[str, str]) -> Iterator[subprocess.Popen[bytes] | None]:
    """No relayd (every tool call and the push path work on the files), or a real relayd."""
    if request.param == "daemon-down":
        yield None
        return
    proc = start_relayd(relay_env)
    try:
        yield proc
    finally:
        stop_relayd(proc)


# -- the seed 000 / 002 scenarios ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_team_scenario(mode: str, daemon: Any, relay_env: dict[str, str]) -> None:
    async with mcp_client(relay_env, "strategist", mode) as strategist, mcp_client(relay_env, "inferno", mode) as inferno:
        assert strategist.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")

        sent = await strategist.call_tool("send_message", {"to": "inferno", "subject": "auth", "body": "Take the auth module", "priority": "high"})
        await check_against_schema(strategist, "send_message", sent)
        assert [s["to"] for s in structured(sent)["sent"]] == ["inferno"]

        hub = structured(await inferno.call_tool("check_hub_status", {}))
        assert hub["has_new_mention"] is True and hub["unread_count"] == 1
        assert sorted(p["name"] for p in hub["team_presence"]) == sorted(set(OVERLORD) - {"inferno"})

        first = await inferno.call_tool("check_inbox", {})
        await check_against_schema(inferno, "check_inbox", first)
        inbox = structured(first)
        assert [(m["from"], m["subject"], m["body"], m["priority"]) for m in inbox["messages"]] == [
            ("strategist", "auth", "Take the auth module", "high")
        ]
        assert inbox["unread"] == 0
        assert structured(await inferno.call_tool("check_inbox", {}))["messages"] == []

        everyone = await strategist.call_tool("get_status", {"role": "all"})
        await check_against_schema(strategist, "get_status", everyone)
        assert sorted(a["name"] for a in structured(everyone)["agents"]) == sorted(OVERLORD)

        updated = await inferno.call_tool("update_status", {"status": "working", "task": "auth refactor"})
        await check_against_schema(inferno, "update_status", updated)
        seen = structured(await strategist.call_tool("get_status", {"role": "inferno"}))["agents"]
        assert [(a["name"], a["status"], a["task"], a["alive"]) for a in seen] == [("inferno", "working", "auth refactor", True)]

        unknown = await strategist.call_tool("send_message", {"to": "nobody", "subject": "s", "body": "b"})
        assert unknown.is_error
        text = unknown.content[0].text
        assert "nobody" in text and all(name in text for name in OVERLORD)
        assert (await strategist.call_tool("get_status", {"role": "nobody"})).is_error
    with open(server_log(relay_env, "strategist")) as fh:
        logged = fh.read()
    assert ("store operations go through relayd" in logged) == (daemon is not None), logged


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_broadcast_reaches_the_five_others(mode: str, daemon: Any, relay_env: dict[str, str], relayctl: Any) -> None:
    async with mcp_client(relay_env, "overlord", mode) as overlord:
        result = await overlord.call_tool("broadcast", {"subject": "sync", "body": "standup in 5"})
        await check_against_schema(overlord, "broadcast", result)
        assert sorted(s["to"] for s in structured(result)["sent"]) == sorted(set(OVERLORD) - {"overlord"})
    for role in set(OVERLORD) - {"overlord"}:
        shown = msgspec.json.decode(relayctl("--json", "read", "--unread", agent=role).stdout)
        assert [(m["from"], m["subject"]) for m in shown] == [("overlord", "sync")]
    assert msgspec.json.decode(relayctl("--json", "read", agent="overlord").stdout) == []


@pytest.mark.anyio
async def test_unread_notice_ends_every_result_until_the_inbox_is_read(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    relayctl("send", "glacier", "frontend is blocked on you", agent="storm")
    async with mcp_client(relay_env, "glacier", "legacy") as glacier:
        status = await glacier.call_tool("update_status", {"status": "working"})
        notice = "[relay] 1 unread message waiting: call check_inbox."
        assert status.content[-1].text == notice
        # Also inside structuredContent (declared in the output schema): Claude Code hands a
        # model only that when a result has it.
        assert structured(status)["notice"] == notice
        await check_against_schema(glacier, "update_status", status)
        await glacier.call_tool("check_inbox", {})
        after = await glacier.call_tool("get_status", {})
        assert all("check_inbox" not in block.text for block in after.content)
        assert "notice" not in structured(after)


@pytest.mark.slow
@pytest.mark.anyio
async def test_check_inbox_clears_the_pending_flag(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    from relayd import ops
    from relayd.store import Store

    relayctl("register", "storm", "--notify", "cmd:true")
    relayctl("send", "storm", "wake up", agent="overlord")  # the sender triggers storm's notify and sets the flag

    def pending() -> bool:
        with Store(relay_env["RELAY_DIR"]) as store:
            return ops.call(store, "unread", {"agent": "storm"})["pending"]

    assert pending()
    async with mcp_client(relay_env, "storm", "legacy") as storm:
        assert [m["body"] for m in structured(await storm.call_tool("check_inbox", {}))["messages"]] == ["wake up"]
    assert not pending()


@pytest.mark.slow
@pytest.mark.anyio
async def test_tool_calls_refresh_last_seen_and_register_a_new_role(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    before = {a["name"]: a["last_heartbeat"] for a in msgspec.json.decode(relayctl("--json", "status").stdout)["agents"]}
    async with mcp_client(relay_env, "shadow", "legacy") as shadow, mcp_client(relay_env, "infern", "legacy") as typo:
        await shadow.call_tool("check_hub_status", {})
        # a preset's team is fixed: a typo'd role is refused, naming the real ones (seed 000)
        for tool, args in (("check_hub_status", {}), ("send_message", {"to": "storm", "subject": "s", "body": "b"})):
            refused = await typo.call_tool(tool, args)
            assert refused.is_error and "unknown agent 'infern'" in refused.content[0].text
            assert "inferno" in refused.content[0].text and "relayctl register infern" in refused.content[0].text
    after = {a["name"]: a["last_heartbeat"] for a in msgspec.json.decode(relayctl("--json", "status").stdout)["agents"]}
    # a preset agent is "never seen" until it first speaks; a tool call is a sign of life
    assert after["shadow"] is not None and (before["shadow"] is None or after["shadow"] > before["shadow"])
    assert after["storm"] == before["storm"]
    assert "infern" not in after and msgspec.json.decode(relayctl("--json", "read", agent="storm").stdout) == []
    relayctl("init", "--preset", "overlord", "--allow-new-agents")  # a team that takes newcomers
    async with mcp_client(relay_env, "reviewer", "legacy") as reviewer:
        assert not (await reviewer.call_tool("check_hub_status", {})).is_error
    assert "reviewer" in {a["name"] for a in msgspec.json.decode(relayctl("--json", "status").stdout)["agents"]}


@pytest.mark.anyio
async def test_on_a_fresh_machine_the_first_start_creates_the_store_and_the_role(relay_env: dict[str, str], relayctl: Any, short_tmp: Any) -> None:
    # seed 002 §3.1: present from the start, with no `relayctl init` run before
    store = Path(relay_env["RELAY_DIR"])
    assert not store.exists()
    async with mcp_client(relay_env, "inferno", "legacy") as inferno:
        [me] = msgspec.json.decode(relayctl("--json", "status", "--agents").stdout)["agents"]
        assert (me["name"], me["alive"], me["program"]) == ("inferno", True, "claude-code")  # before any tool call
        assert structured(await inferno.call_tool("check_inbox", {})) == {"messages": [], "unread": 0}
    relayctl("--dir", str(short_tmp / "made-by-init"), "init")
    made = {p.name: p.is_dir() for p in (short_tmp / "made-by-init").iterdir()}
    found = {p.name: p.is_dir() for p in store.iterdir()}
    assert {k: v for k, v in found.items() if k in made} == made  # the layout `relayctl init` makes
    assert store.stat().st_mode & 0o777 == 0o700


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_are_tool_errors_and_unknown_tools_protocol_errors(mode: str, team: None, relay_env: dict[str, str]) -> None:
    from mcp import MCPError

    async with mcp_client(relay_env, "storm", mode) as storm:
        missing = await storm.call_tool("send_message", {"to": "glacier"})
        assert missing.is_error and "subject" in missing.content[0].text
        wrong = await storm.call_tool("send_message", {"to": "glacier", "subject": "s", "body": "b", "priority": "asap"})
        assert wrong.is_error and "priority" in wrong.content[0].text
        with pytest.raises(MCPError) as raised:
            await storm.session.call_tool("no_such_tool", {})
        assert raised.value.code == -32602


@pytest.mark.slow
@pytest.mark.anyio
async def test_model_visible_tool_list_fits_the_token_budget(team: None, relay_env: dict[str, str]) -> None:
    async with mcp_client(relay_env, "overlord", "legacy") as overlord:
        tools = (await overlord.list_tools()).tools
    shown = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools]
    chars = len(json.dumps(shown, ensure_ascii=False))  # the one measure: see mcp_shim.tools.model_visible_chars
    assert {"send_message", "check_inbox", "get_status", "update_status", "broadcast", "check_hub_status"} <= {t.name for t in tools}
    assert all(t.output_schema for t in tools)
    assert chars == model_visible_chars()
    assert chars / 4 <= TOKEN_BUDGET, f"tools/list costs {chars / 4:.0f} tokens"


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_file_reservations_between_two_panes(mode: str, daemon: Any, relay_env: dict[str, str], short_tmp: Any) -> None:
    repo = short_tmp / "oathkeeper"
    repo.mkdir()
    async with mcp_client(relay_env, "inferno", mode, cwd=str(repo)) as inferno, mcp_client(relay_env, "glacier", mode) as glacier:
        taken = await inferno.call_tool("reserve_files", {"pattern": "src/auth/**", "reason": "auth refactor", "ttl": "30m"})
        await check_against_schema(inferno, "reserve_files", taken)
        held = structured(taken)["reservation"]
        assert (held["agent"], held["pattern"], held["repo"], held["exclusive"]) == ("inferno", "src/auth/**", str(repo), True)

        refused = await glacier.call_tool("reserve_files", {"pattern": "src/auth/login.py", "repo": str(repo)})
        assert refused.is_error and "inferno" in refused.content[0].text and "src/auth/**" in refused.content[0].text
        probe = structured(await glacier.call_tool("reserve_files", {"pattern": "src/*/login.py", "repo": str(repo), "check": True}))
        assert probe["reserved"] is False and [c["agent"] for c in probe["conflicts"]] == ["inferno"]
        elsewhere = structured(await glacier.call_tool("reserve_files", {"pattern": "src/ui/**", "repo": str(repo)}))
        assert elsewhere["reserved"] is True

        released = await inferno.call_tool("release_files", {"pattern": "src/auth/**"})
        await check_against_schema(inferno, "release_files", released)
        assert [r["pattern"] for r in structured(released)["released"]] == ["src/auth/**"]
        assert structured(await glacier.call_tool("reserve_files", {"pattern": "src/auth/login.py", "repo": str(repo)}))["reserved"] is True
        mine = structured(await glacier.call_tool("release_files", {"all": True}))["released"]
        assert sorted(r["pattern"] for r in mine) == ["src/auth/login.py", "src/ui/**"]
        assert (await glacier.call_tool("release_files", {})).is_error


# -- push delivery -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_channel_event_reaches_a_capable_client(mode: str, daemon: Any, relay_env: dict[str, str], relayctl: Any, channel_capable: None) -> None:
    inbox = ChannelInbox()
    async with mcp_client(relay_env, "inferno", mode, channel=inbox) as inferno:
        caps = inferno.server_capabilities
        assert caps.experimental is not None and "claude/channel" in caps.experimental
        assert inferno.instructions and "check_inbox" in inferno.instructions
        await inferno.call_tool("check_hub_status", {})  # a 2026-07-28 client declares its capabilities per request
        relayctl("send", "inferno", "--subject", "deploy", "--priority", "urgent", "--thread", "t-9", "ship the hotfix now", agent="strategist")
        await inbox.wait(1.0)
        [event] = inbox.events
        assert event.meta == {"from": "strategist", "message_id": event.meta["message_id"], "priority": "urgent", "thread": "t-9"}
        assert "deploy" in event.content and "ship the hotfix now" in event.content
        read = structured(await inferno.call_tool("check_inbox", {}))
        assert [m["id"] for m in read["messages"]] == [event.meta["message_id"]]
    with open(server_log(relay_env, "inferno")) as fh:
        followed = fh.read()
    assert ("through relayd" in followed) == (daemon is not None), followed


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_mail_waiting_from_before_the_session_is_announced_once(mode: str, team: None, relay_env: dict[str, str], relayctl: Any, channel_capable: None) -> None:
    relayctl("send", "storm", "first", agent="overlord")
    relayctl("send", "storm", "second", agent="glacier")
    inbox = ChannelInbox()
    async with mcp_client(relay_env, "storm", mode, channel=inbox) as storm:
        if mode != "legacy":
            await storm.call_tool("check_hub_status", {})
        await inbox.wait(5.0)
        [notice] = inbox.events
        assert notice.meta == {"count": "2"} and "check_inbox" in notice.content
        assert len(structured(await storm.call_tool("check_inbox", {}))["messages"]) == 2


@pytest.mark.slow
@pytest.mark.anyio
async def test_bursts_are_coalesced_and_previews_bounded(team: None, relay_env: dict[str, str], channel_capable: None) -> None:
    from relayd import ops
    from relayd.store import Store

    inbox = ChannelInbox()
    async with mcp_client(relay_env, "glacier", "legacy", channel=inbox) as glacier:
        await glacier.call_tool("check_hub_status", {})
        with Store(relay_env["RELAY_DIR"], fsync=False) as store:
            for n in range(40):
                ops.call(store, "send", {"agent": "storm", "to": ["glacier"], "subject": f"part {n}", "body": "x" * 5000})
        announced = 0
        while announced < 40:
            await inbox.wait(5.0)
            announced = sum(int(e.meta.get("count", "1")) for e in inbox.events)
        assert announced == 40
        assert len(inbox.events) < 10
        assert all(len(e.content) < 1200 for e in inbox.events)
        # check_inbox hands over at most ~64 KiB at a time; the rest stays unread, in order.
        subjects: list[str] = []
        for _ in range(10):
            got = structured(await glacier.call_tool("check_inbox", {}))
            assert 0 < len(got["messages"]) < 40
            subjects += [m["subject"] for m in got["messages"]]
            if got["unread"] == 0:
                break
        assert subjects == [f"part {n}" for n in range(40)]

        # One message whose stored line is far longer than a read chunk (every quote escaped).
        with Store(relay_env["RELAY_DIR"], fsync=False) as store:
            big = ops.call(store, "send", {"agent": "storm", "to": ["glacier"], "subject": "the whole log", "body": '"' * 200_000})
        inbox.events.clear()
        await inbox.wait(5.0)
        [event] = inbox.events
        assert event.meta["message_id"] == big["messages"][0]["id"] and len(event.content) < 400


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("setting, version", [("auto", "2025-11-25"), ("off", "2026-07-28")])
async def test_claude_code_is_answered_so_that_it_keeps_channel_events(setting: str, version: str, team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    """Claude Code turns channel events off on a 2026-07-28 connection, so while push is
    wanted its `server/discover` probe names only the handshake revisions and it falls back
    to `initialize` (as the SDK client does here, named as Claude Code names itself; the real
    program: tests/programs/test_claude_code.py). With push off it gets 2026-07-28 like any client."""
    inbox = ChannelInbox()
    env = {"RELAY_DIR": relay_env["RELAY_DIR"], "RELAY_SOCKET": relay_env["RELAY_SOCKET"], "OVLD_ROLE": "shadow", "RELAY_MCP_CHANNEL": setting}
    server = StdioServerParameters(command=sys.executable, args=["-m", "mcp_shim"], env=env)
    async with Client(server, mode="auto", client_info=Implementation(name="claude-code", version="2.1.330"), extensions=[inbox], read_timeout_seconds=30) as claude:
        assert claude.protocol_version == version
        assert "check_inbox" in (claude.instructions or "")
        await claude.call_tool("check_hub_status", {})
        relayctl("send", "shadow", "--subject", "rollout", "canary is green", agent="storm")
        if setting == "auto":
            await inbox.wait(5.0)
            [event] = inbox.events
            assert event.meta["from"] == "storm" and "rollout" in event.content
        else:
            with pytest.raises(TimeoutError):
                await inbox.wait(1.5)


@pytest.mark.slow
def test_push_starts_with_the_count_of_what_waits_and_then_each_new_message_once(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    """What waits when push starts is counted, what arrives afterwards is announced, and a
    message sent in between (before the follower thread runs) is in exactly one of them."""
    from mcp_shim.follow import Follower

    relayctl("send", "glacier", "--subject", "before", "from before", agent="storm")
    events: list[dict[str, Any]] = []
    follower = Follower(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"], "glacier", events.append)
    relayctl("send", "glacier", "--subject", "between", "sent before the thread ran", agent="storm")
    follower.start()
    try:
        deadline = time.monotonic() + 10
        while len(events) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(MIN_INTERVAL_SECONDS * 3)  # room for a wrong, third announcement
    finally:
        follower.stop()
        follower.join(timeout=10)
    assert [e["meta"].get("count") for e in events] == ["1", None], events
    assert "between" in events[1]["content"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_no_channel_events_for_a_client_that_did_not_ask(team: None, relay_env: dict[str, str], relayctl: Any, channel_capable: None) -> None:
    inbox = ChannelInbox()  # listens for the notification, but the client does not declare the capability
    async with mcp_client(relay_env, "shadow", "legacy", channel=inbox, declare=False) as shadow:
        await shadow.call_tool("check_hub_status", {})
        relayctl("send", "shadow", "are you there?", agent="overlord")
        with pytest.raises(TimeoutError):
            await inbox.wait(1.5)  # longer than the coalescing window: an event would have come by now
        hub = structured(await shadow.call_tool("check_hub_status", {}))
    assert hub["unread_count"] == 1
    assert inbox.events == []


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_config_files_start_the_servers_claude_code_would(team: None, relay_env: dict[str, str], relayctl: Any, short_tmp: Any, channel_capable: None) -> None:
    """README's setup: `relayctl mcp-config --preset overlord --out-dir DIR`, then each pane's
    server is started exactly as its file says."""
    out = short_tmp / "cfg"
    relayctl("--socket", relay_env["RELAY_SOCKET"], "mcp-config", "--preset", "overlord", "--out-dir", str(out))
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{role}.json" for role in OVERLORD)
    printed = msgspec.json.decode(relayctl("mcp-config", "--role", "inferno", "--session", "agent:main:main").stdout)
    assert printed["mcpServers"]["relay"]["env"] == {
        "OVLD_ROLE": "inferno",
        "RELAY_DIR": relay_env["RELAY_DIR"],
        "RELAY_SOCKET": relay_env["RELAY_SOCKET"],  # RELAY_SOCKET is set in this environment
        "OVLD_SESSION": "agent:main:main",
    }

    def configured(role: str) -> StdioServerParameters:
        entry = msgspec.json.decode((out / f"{role}.json").read_bytes())["mcpServers"]["relay"]
        assert entry["env"]["OVLD_ROLE"] == role and entry["env"]["RELAY_SOCKET"] == relay_env["RELAY_SOCKET"]
        return StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"])

    inbox = ChannelInbox()
    async with Client(configured("inferno"), mode="legacy", client_info=Implementation(name=CHANNEL_CLIENT, version="1"), extensions=[inbox]) as inferno:
        async with Client(configured("strategist"), mode="legacy") as strategist:
            await strategist.call_tool("send_message", {"to": "inferno", "subject": "auth", "body": "take the auth task"})
        await inbox.wait(30.0)  # a bound, not a measure: two server starts on a loaded machine take seconds
        # Announced on its own, or, when it landed before inferno's push began, in the count
        # of what waits that push starts with (each message is in exactly one of the two).
        first = inbox.events[0].meta
        assert first.get("from") == "strategist" or first.get("count") == "1", first
        assert [m["body"] for m in structured(await inferno.call_tool("check_inbox", {}))["messages"]] == ["take the auth task"]


# -- the raw process ---------------------------------------------------------------------


def test_missing_role_is_one_line_and_a_nonzero_exit(relay_env: dict[str, str]) -> None:
    proc = run_shim(relay_env)
    assert proc.returncode != 0
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "OVLD_ROLE" in lines[0]
    assert b"Traceback" not in proc.stderr and proc.stdout == b""


def test_no_home_and_no_store_dir_is_one_line(relay_env: dict[str, str]) -> None:
    env = {k: v for k, v in relay_env.items() if k not in ("HOME", "RELAY_DIR", "OVLD_RELAY_DIR")}
    env["OVLD_ROLE"] = "inferno"
    proc = run_shim(env)
    assert proc.returncode != 0
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "RELAY_DIR" in lines[0] and b"Traceback" not in proc.stderr


def test_protocol_faults_get_jsonrpc_errors_and_eof_ends_the_process(relay_env: dict[str, str]) -> None:
    env = dict(relay_env, OVLD_ROLE="inferno")
    requests = b"\n".join(
        [
            b"{not json",
            b'{"jsonrpc":"2.0","id":1,"method":"no/such/method"}',
            b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"old","version":"0"}}}',
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
            b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":4,"method":"tools/list"}',
            b'{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}',
            b'{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}',
            b'{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}',
            b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"launch_missiles","arguments":{}}}',
            b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"check_inbox","arguments":{"unexpected":1}}}',
            b'[1, 2]',
        ]
    )
    proc = run_shim(env, requests + b"\n")
    assert proc.returncode == 0
    replies = [msgspec.json.decode(line) for line in proc.stdout.splitlines()]
    assert replies[0]["error"]["code"] == -32700 and replies[0]["id"] is None
    assert replies[1]["error"]["code"] == -32601
    assert replies[2]["result"]["protocolVersion"] == "2024-11-05"
    assert replies[3] == {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert all("outputSchema" not in tool for tool in replies[4]["result"]["tools"])  # 2024-11-05 has none
    assert replies[5]["error"]["code"] == -32022
    assert replies[5]["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}
    assert replies[6]["error"]["code"] == -32602 and "clientCapabilities" in replies[6]["error"]["message"]
    discovered = replies[7]["result"]
    assert discovered["resultType"] == "complete" and discovered["supportedVersions"] == ["2026-07-28"]
    assert "claude/channel" in discovered["capabilities"]["experimental"] and discovered["instructions"]
    assert discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "relay-mcp"
    assert replies[8]["error"]["code"] == -32602 and "launch_missiles" in replies[8]["error"]["message"]
    assert replies[9]["result"]["isError"] is True and "unexpected" in replies[9]["result"]["content"][0]["text"]
    assert [r["error"]["code"] for r in replies[10]] == [-32600, -32600]
    assert len(replies) == 11


class RawShim:
    """relay-mcp on plain pipes, for what the SDK client does not expose (its stderr, timing of
    background events while no request is in flight)."""

    def __init__(self, env: dict[str, str], role: str) -> None:
        self.log_path = server_log(env, role)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "mcp_shim"], env=dict(env, OVLD_ROLE=role), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(msgspec.json.encode(message) + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"nothing from relay-mcp within {timeout} s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            assert chunk, "relay-mcp closed stdout"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return msgspec.json.decode(line)

    def wait_for_log(self, text: str, timeout: float, occurrences: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as fh:
                if fh.read().count(text.encode()) >= occurrences:
                    return
            time.sleep(0.05)
        raise AssertionError(f"relay-mcp never logged {text!r}")

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.log.close()
        return code


@pytest.mark.slow
def test_push_follows_relayd_going_and_coming_back(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    shim = RawShim(relay_env, "storm")
    daemon: subprocess.Popen[bytes] | None = None
    try:
        shim.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"claude/channel": {}}}, "clientInfo": {"name": "raw", "version": "1"}}})
        assert shim.receive(10)["id"] == 1
        shim.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        def delivered(body: str) -> None:
            relayctl("send", "storm", body, agent="overlord")
            event = shim.receive(1.0)
            assert event["method"] == "notifications/claude/channel" and body in event["params"]["content"]

        shim.wait_for_log("with inotify", 10)
        delivered("first, no daemon")
        daemon = start_relayd(relay_env)
        shim.wait_for_log("through relayd", 10)
        delivered("second, through relayd")
        stop_relayd(daemon)
        daemon = None
        shim.wait_for_log("falling back to inotify", 10)
        delivered("third, daemon gone")
        daemon = start_relayd(relay_env)
        shim.wait_for_log("through relayd", 10, occurrences=2)
        delivered("fourth, daemon back")
    finally:
        if daemon is not None:
            stop_relayd(daemon)
        assert shim.close() == 0


@pytest.mark.parametrize(
    "args, complaint",
    [
        ((), "--role"),
        (("--role", "Not A Name"), "invalid role"),
        (("--role", "inferno", "--preset", "overlord"), "not both"),
        (("--role", "inferno", "--out-dir", "x"), "--preset"),
    ],
)
def test_mcp_config_refuses_bad_input_in_one_line(relayctl: Any, args: tuple[str, ...], complaint: str) -> None:
    proc = relayctl("mcp-config", *args, check=False)
    assert proc.returncode in (1, 2) and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and complaint in lines[0]


@pytest.mark.slow
def test_no_channel_events_while_another_arrival_mechanism_is_configured(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    relayctl("register", "shadow", "--notify", "cmd:true")
    shim = RawShim(relay_env, "shadow")
    try:
        shim.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "1"}}})
        assert shim.receive(10)["id"] == 1
        shim.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        shim.wait_for_log("with inotify", 10)
        relayctl("send", "shadow", "via the cmd hook only", agent="storm")
        with pytest.raises(TimeoutError):
            shim.receive(1.5)
        relayctl("register", "shadow", "--notify", "channel")
        relayctl("send", "shadow", "now through the channel", agent="storm")
        event = shim.receive(2.0)
        assert "now through the channel" in event["params"]["content"]
    finally:
        assert shim.close() == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting, declared, client, pushed",
    [
        ("auto", False, "claude-code", True),  # Claude Code declares nothing and drops events itself when not enabled
        ("auto", False, "some-other-client", False),
        ("on", False, "some-other-client", True),
        ("off", True, "claude-code", False),
    ],
)
def test_who_gets_channel_events(team: None, relay_env: dict[str, str], relayctl: Any, setting: str, declared: bool, client: str, pushed: bool) -> None:
    shim = RawShim(dict(relay_env, RELAY_MCP_CHANNEL=setting), "glacier")
    try:
        capabilities = {"experimental": {"claude/channel": {}}} if declared else {}
        shim.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": client, "version": "1"}}})
        assert shim.receive(10)["id"] == 1
        shim.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if pushed:
            shim.wait_for_log("with inotify", 10)
        relayctl("send", "glacier", "anyone home?", agent="storm")
        if pushed:
            assert shim.receive(1.0)["method"] == "notifications/claude/channel"
        else:
            with pytest.raises(TimeoutError):
                shim.receive(1.5)
    finally:
        assert shim.close() == 0


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_send_with_ack_and_acknowledge_through_check_inbox(mode: str, daemon: Any, relay_env: dict[str, str], relayctl: Any) -> None:
    async with mcp_client(relay_env, "strategist", mode) as strategist, mcp_client(relay_env, "inferno", mode) as inferno:
        sent = structured(await strategist.call_tool("send_message", {"to": "inferno", "subject": "deploy", "body": "Deploy at 14:00", "ack": True}))
        [message_id] = [s["id"] for s in sent["sent"]]

        first = await inferno.call_tool("check_inbox", {})
        await check_against_schema(inferno, "check_inbox", first)
        inbox = structured(first)
        assert [(m["id"], m["ack"], m["attempt"]) for m in inbox["messages"]] == [(message_id, True, 1)]
        assert inbox["owed"] == [message_id]  # read, yet still owed: reading is no acknowledgement
        assert "owed" in relayctl("read", agent="inferno").stdout

        acked = await inferno.call_tool("check_inbox", {"ack": [message_id, "01ARZ3NDEKTSV4RRFFQ69G5FAV"]})
        await check_against_schema(inferno, "check_inbox", acked)
        assert structured(acked)["acked"] == [{"id": message_id, "outcome": "acked"}, {"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "outcome": "not_owed"}]
        assert json.loads(relayctl("--json", "status").stdout)["delivery"]["owed"] == 0

        wrong = await inferno.call_tool("check_inbox", {"ack": "not a list"})
        assert wrong.is_error and "ack must be a array" in wrong.content[0].text


@pytest.mark.slow
@pytest.mark.anyio
async def test_handoff_moves_reservations_and_sends_the_brief(daemon: Any, relay_env: dict[str, str], short_tmp: Any) -> None:
    repo = short_tmp / "oathkeeper"
    repo.mkdir()
    async with mcp_client(relay_env, "inferno", "auto", cwd=str(repo)) as inferno, mcp_client(relay_env, "glacier", "auto", cwd=str(repo)) as glacier:
        assert structured(await inferno.call_tool("reserve_files", {"pattern": "src/auth/**", "ttl": "30m"}))["reserved"] is True
        not_held = await inferno.call_tool("handoff", {"to": "glacier", "patterns": ["src/ui/**"], "body": "take the ui"})
        assert not_held.is_error and "src/ui/**" in not_held.content[0].text and "nothing was handed over" in not_held.content[0].text
        unknown = await inferno.call_tool("handoff", {"to": "nobody", "all": True, "body": "yours"})
        assert unknown.is_error

        handed = await inferno.call_tool("handoff", {"to": "glacier", "patterns": ["src/auth/**"], "body": "Auth is yours: logout is half done"})
        await check_against_schema(inferno, "handoff", handed)
        result = structured(handed)
        assert [(r["pattern"], r["agent"]) for r in result["handed"]] == [("src/auth/**", "glacier")] and result["repo"] == str(repo)

        # The new owner holds it now: the old owner is refused, the brief is in the new owner's inbox.
        refused = await inferno.call_tool("reserve_files", {"pattern": "src/auth/login.py"})
        assert refused.is_error and "glacier" in refused.content[0].text
        [brief] = [m for m in structured(await glacier.call_tool("check_inbox", {}))["messages"] if m["id"] == result["brief"]]
        assert brief["from"] == "inferno" and brief["subject"].startswith("handoff: Auth is yours")
        assert "Auth is yours: logout is half done" in brief["body"] and "src/auth/**" in brief["body"]

    # What the tool results put into each model's context is counted (relayd.delivery.spend).
    from relayd import ops
    from relayd.store import Store

    with Store(relay_env["RELAY_DIR"]) as store:
        context = {a["name"]: a.get("context") for a in ops.call(store, "status", {})["agents"]}
    assert context["inferno"]["by"]["tool"] > 0 and context["glacier"]["by"]["tool"] > 0
