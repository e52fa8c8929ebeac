"""What relay's tools cost a model, measured on what a real agent program sends its model.

Claude Code 2.1.332 (-p, against the scripted model on 127.0.0.1) is started with relay-mcp
as an MCP server; the test reads the request Claude Code makes to its model and checks that
relay's tools arrive there as exactly `mcp_shim.tools.model_visible()` (name, description,
input schema; no output schema), so `model_visible_chars()` — the one measure docs/mcp.md
and the benchmark quote — counts what the model is really given, and that it is within
DESIGN §6's budget of 600 tokens (characters / 4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.agent_programs import program
from support.model_anthropic import messages_responder
from support.scripted_model import ScriptedModel

from mcp_shim.tools import TOOLS, model_visible, model_visible_chars

TOKEN_BUDGET = 600
PREFIX = "mcp__relay__"  # how Claude Code names an MCP server's tools


@pytest.mark.slow
def test_the_tools_claude_code_gives_its_model_are_what_relay_counts(relayctl, relay_env: dict[str, str], short_tmp: Path) -> None:
    relayctl("init", "--preset", "overlord")
    bin_dir = os.path.dirname(sys.executable)
    config = {"mcpServers": {"relay": {"command": os.path.join(bin_dir, "relay-mcp"), "args": [], "env": {"OVLD_ROLE": "inferno", "RELAY_DIR": relay_env["RELAY_DIR"], "RELAY_SOCKET": relay_env["RELAY_SOCKET"]}}}}
    (short_tmp / "mcp.json").write_text(json.dumps(config))
    home = short_tmp / "home"
    home.mkdir()
    with ScriptedModel(messages_responder()) as model:
        # ENABLE_TOOL_SEARCH=false: every tool in the request (by default Claude Code may defer
        # MCP tools behind its ToolSearch tool and send only their names at first)
        env = dict(relay_env, HOME=str(home), ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="sk-test-not-a-key", ENABLE_TOOL_SEARCH="false")
        proc = subprocess.run([str(program("claude")), "-p", "hello", "--mcp-config", str(short_tmp / "mcp.json"), "--strict-mcp-config"], env=env, cwd=short_tmp, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
        request = model.wait_for(lambda r: any(t.get("name", "").startswith(PREFIX) for t in ((r.json() or {}).get("tools") or [])), timeout=30)
    sent = {t["name"].removeprefix(PREFIX): t for t in request.json()["tools"] if t["name"].startswith(PREFIX)}
    assert set(sent) == {t.name for t in TOOLS}
    assert all(set(t) == {"name", "description", "input_schema"} for t in sent.values())  # no output schema reaches the model
    shown = [{"name": name, "description": sent[name]["description"], "inputSchema": sent[name]["input_schema"]} for name in (t.name for t in TOOLS)]
    assert shown == model_visible()
    assert len(json.dumps(shown, ensure_ascii=False)) == model_visible_chars()
    assert model_visible_chars() / 4 < TOKEN_BUDGET, f"relay's tools cost a model {model_visible_chars() / 4:.0f} tokens"
