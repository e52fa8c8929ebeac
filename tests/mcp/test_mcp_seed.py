"""relay-mcp as seeds 000 and 002 describe it, through the official MCP SDK client:
presence from the moment a client connects, failed notifications reported, the agent
prompt as instructions, and error texts that name only what the tools offer."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import msgspec
import pytest
from mcp import Client, StdioServerParameters

from relayd.team.prompt import agent_prompt
from support.mcp_session import (  # noqa: F401  (fixtures used by name)
    anyio_backend,
    check_against_schema,
    mcp_client,
    run_shim,
    structured,
    team,
)


def _agents(relayctl: Any) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in json.loads(relayctl("--json", "status").stdout)["agents"]}


# -- presence from initialize (seed 002 §3.1) -------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_connected_role_is_present_before_any_tool_call(mode: str, team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    relayctl("init", "--preset", "overlord", "--allow-new-agents")  # a team that takes newcomers (reviewer)
    relayctl("gc", "--stale", "0s")  # every agent archived: shown as not alive
    assert not _agents(relayctl)["shadow"]["alive"]
    async with mcp_client(relay_env, "shadow", mode) as shadow, mcp_client(relay_env, "reviewer", mode):
        if mode == "auto":
            await shadow.list_tools()  # the 2026-07-28 era has no handshake: the first request is the start
        agents = _agents(relayctl)
        assert agents["shadow"]["alive"] and not agents["shadow"]["archived"]
        assert agents["reviewer"]["alive"] and agents["reviewer"]["program"] == "claude-code"
        assert not agents["storm"]["alive"]  # nobody else was touched


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_idle_session_stays_present_and_is_never_archived(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    """A program idle at its prompt calls no tool for hours: relay-mcp refreshes its role's
    last-seen while the session lasts (every RELAY_MCP_BEAT seconds; a minute by default)."""
    relayctl("init", "--preset", "overlord")
    async with mcp_client({**relay_env, "RELAY_MCP_BEAT": "0.2"}, "shadow", "legacy"):
        for _ in range(3):  # each round archives everyone not seen in the last moment; shadow comes back
            relayctl("gc", "--stale", "0s")
            await anyio.sleep(0.6)
            assert _agents(relayctl)["shadow"]["alive"]
        assert not _agents(relayctl)["storm"]["alive"]
    relayctl("gc", "--stale", "0s")
    await anyio.sleep(0.6)
    assert not _agents(relayctl)["shadow"]["alive"]  # the session ended: nobody refreshes it


@pytest.mark.slow
@pytest.mark.anyio
async def test_seed_002_role_variable_and_role_argument(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    relayctl("init", "--preset", "overlord", "--allow-new-agents")  # a team that takes newcomers (scout)
    env = {"RELAY_DIR": relay_env["RELAY_DIR"], "RELAY_SOCKET": relay_env["RELAY_SOCKET"], "BBS_AGENT_ROLE": "glacier"}
    async with Client(StdioServerParameters(command=sys.executable, args=["-m", "mcp_shim"], env=env), mode="legacy") as glacier:
        hub = structured(await glacier.call_tool("check_hub_status", {}))
        assert "glacier" not in {p["name"] for p in hub["team_presence"]}  # it speaks for glacier
    server = StdioServerParameters(command=sys.executable, args=["-m", "mcp_shim", "--role", "scout"], env=dict(env, BBS_AGENT_ROLE="glacier"))
    async with Client(server, mode="legacy"):
        assert _agents(relayctl)["scout"]["alive"]  # --role wins over the environment


@pytest.mark.slow
@pytest.mark.anyio
async def test_seed_002_sender_and_role_arguments_name_the_agent_and_show_its_role(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    relayctl("init", "--preset", "overlord", "--allow-new-agents")  # a team that takes newcomers (alice)
    env = {"RELAY_DIR": relay_env["RELAY_DIR"], "RELAY_SOCKET": relay_env["RELAY_SOCKET"]}
    server = StdioServerParameters(command=sys.executable, args=["-m", "mcp_shim", "-sender", "alice", "-role", "reviewer"], env=env)
    async with Client(server, mode="legacy"):
        alice = _agents(relayctl)["alice"]
        assert alice["alive"] and alice["role"] == "reviewer"  # registered with its role at start
    assert "alice" in relayctl("status").stdout and "role: reviewer" in relayctl("status").stdout
    # an agent already registered gets its role on the next start; the environment's spelling too
    server = StdioServerParameters(command=sys.executable, args=["-m", "mcp_shim", "-sender=inferno"], env=dict(env, BBS_AGENT_ROLE="backend"))
    async with Client(server, mode="legacy") as inferno:
        assert _agents(relayctl)["inferno"]["role"] == "backend"
        team_presence = structured(await inferno.call_tool("check_hub_status", {}))["team_presence"]
        assert {p["name"]: p.get("role") for p in team_presence}["alice"] == "reviewer"
        everyone = structured(await inferno.call_tool("get_status", {}))["agents"]
        assert {a["name"]: a.get("role") for a in everyone}["inferno"] == "backend"
    proc = __import__("subprocess").run([sys.executable, "-m", "mcp_shim", "-sender"], env=relay_env, capture_output=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.decode().strip() == "relay-mcp: error: --sender needs a NAME, e.g. --sender alice"


def test_a_role_argument_without_a_name_is_one_line(relay_env: dict[str, str]) -> None:
    proc = __import__("subprocess").run([sys.executable, "-m", "mcp_shim", "--role"], env=relay_env, capture_output=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.decode().strip() == "relay-mcp: error: --role needs a NAME, e.g. --role inferno"


# -- failed notifications (seed 000) -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_send_message_says_when_the_recipient_could_not_be_notified(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    relayctl("register", "inferno", "--notify", "zellij:3")  # no zellij on this machine
    relayctl("register", "glacier", "--notify", "zellij:4")
    async with mcp_client(relay_env, "strategist", "legacy") as strategist:
        sent = await strategist.call_tool("send_message", {"to": "inferno", "subject": "auth", "body": "take the auth module"})
        assert not sent.is_error
        await check_against_schema(strategist, "send_message", sent)
        result = structured(sent)
        assert result["not_notified"] == [{"to": "inferno", "method": "zellij", "error": "zellij is not installed (not on PATH)"}]
        [warning] = [block.text for block in sent.content[1:] if "not notified" in block.text]
        assert "inferno" in warning and "zellij is not installed" in warning

        everyone = await strategist.call_tool("broadcast", {"subject": "sync", "body": "standup"})
        await check_against_schema(strategist, "broadcast", everyone)
        assert sorted(f["to"] for f in structured(everyone)["not_notified"]) == ["glacier", "inferno"]

        quiet = structured(await strategist.call_tool("send_message", {"to": "storm", "subject": "s", "body": "b"}))
        assert "not_notified" not in quiet  # storm has no pane to notify: nothing failed
    delivered = json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout)
    assert [m["body"] for m in delivered] == ["take the auth module", "standup"]  # stored all the same


@pytest.mark.slow
@pytest.mark.anyio
async def test_send_message_says_how_each_recipient_is_announced_with_relayd_up(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    from support.relayd_proc import Daemon

    relayctl("register", "inferno", "--notify", "cmd:false")  # an announcement that fails
    daemon = Daemon(relay_env).start()
    try:
        async with mcp_client(relay_env, "strategist", "legacy") as strategist:
            sent = await strategist.call_tool("send_message", {"to": "inferno", "subject": "auth", "body": "take the auth module"})
            await check_against_schema(strategist, "send_message", sent)
            [told] = structured(sent)["announced"]
            # relayd announces after the reply; send_message waits a moment for its trigger's
            # outcome (mcp_shim.tools.ANNOUNCE_WAIT), so the failure is in this result, as
            # without relayd: not pending, not "sent" and nothing else
            assert told == {"to": "inferno", "how": "cmd", "ok": False, "error": told["error"]} and "exit" in told["error"]
            assert structured(sent)["not_notified"] == [{"to": "inferno", "method": "cmd", "error": told["error"]}]
            assert not sent.is_error  # stored all the same
            assert any("not notified" in block.text for block in sent.content[1:])
            message_id = structured(sent)["sent"][0]["id"]
            [way] = json.loads(relayctl("--json", "track", message_id).stdout)["recipients"]
            assert way["mechanism"] == "cmd"
            deadline = __import__("time").monotonic() + 30
            while not [m for m in relayctl.setup("read", agent="strategist", last=0)["messages"] if "bounce" in m["tags"]]:
                assert __import__("time").monotonic() < deadline, "no bounce came back"
                await __import__("anyio").sleep(0.05)
            inbox = structured(await strategist.call_tool("check_inbox", {}))
            assert any(message_id in m["body"] and m["from"] == "relay" for m in inbox["messages"])
    finally:
        daemon.kill()


# -- the prompt as instructions (seed 004 §5.3, seed 002 §5) ---------------------------------


@pytest.mark.anyio
async def test_instructions_are_the_mcp_prompt_for_this_role(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    async with mcp_client(relay_env, "inferno", "legacy") as inferno:
        assert inferno.instructions is not None
        assert agent_prompt("mcp", "en", "inferno") in inferno.instructions
    printed = relayctl("--agent", "inferno", "prompt", "--for", "mcp").stdout.strip()
    assert printed == agent_prompt("mcp", "en", "inferno")


# -- wording: only what the tools offer ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_errors_name_only_what_the_tools_can_do(team: None, relay_env: dict[str, str], relayctl: Any, short_tmp: Any) -> None:
    repo = str(short_tmp)
    async with mcp_client(relay_env, "inferno", "legacy") as inferno, mcp_client(relay_env, "glacier", "legacy") as glacier:
        await inferno.call_tool("reserve_files", {"pattern": "src/**", "repo": repo})
        refused = await glacier.call_tool("reserve_files", {"pattern": "src/a.py", "repo": repo})
        assert refused.is_error and "inferno" in refused.content[0].text
        assert "--force" not in refused.content[0].text and "send_message" in refused.content[0].text
        not_mine = await glacier.call_tool("release_files", {"pattern": "src/**", "repo": repo})
        assert not_mine.is_error and "--force" not in not_mine.content[0].text

        empty = await inferno.call_tool("send_message", {"to": "glacier", "subject": "", "body": " "})
        assert empty.is_error and "empty message" in empty.content[0].text and "--subject" not in empty.content[0].text
    # The CLI, which has --force, still offers it.
    cli = relayctl("reserve", "src/b.py", "--repo", repo, agent="storm", check=False)
    assert cli.returncode == 1 and "use --force" in cli.stderr


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_config_server_only_is_what_claude_mcp_add_json_takes(team: None, relay_env: dict[str, str], relayctl: Any) -> None:
    entry = msgspec.json.decode(relayctl("mcp-config", "--role", "storm", "--server-only").stdout)
    assert set(entry) == {"type", "command", "args", "env"} and entry["type"] == "stdio"
    assert entry["env"]["OVLD_ROLE"] == "storm" and entry["env"]["RELAY_DIR"] == relay_env["RELAY_DIR"]
    async with Client(StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"]), mode="legacy") as storm:
        assert structured(await storm.call_tool("check_hub_status", {}))["unread_count"] == 0
    refused = relayctl("mcp-config", "--preset", "overlord", "--server-only", check=False)
    assert refused.returncode == 2 and "--role" in refused.stderr


def test_2025_03_26_clients_get_no_output_schema(relay_env: dict[str, str]) -> None:
    requests = b"\n".join(
        [
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"old","version":"0"}}}',
            b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}',
        ]
    )
    replies = [msgspec.json.decode(line) for line in run_shim(dict(relay_env, OVLD_ROLE="inferno"), requests + b"\n").stdout.splitlines()]
    assert replies[0]["result"]["protocolVersion"] == "2025-03-26"
    assert all("outputSchema" not in tool for tool in replies[1]["result"]["tools"])
