"""`relayctl mcp-config --for claude|codex|gemini`: each program's own configuration shape,
and the real Codex CLI and Gemini CLI starting relay-mcp from it and reading mail with it."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from support import agent_programs, model_gemini, model_openai
from support.scripted_model import ScriptedModel
from support.tmux_pane import kill_group

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop

SUBJECT = "Freeze main at 17:00"


def test_each_program_gets_the_same_server_in_its_own_shape(relayctl) -> None:
    claude = json.loads(relayctl("mcp-config", "--role", "inferno", "--session", "agent:main:main").stdout)
    assert json.loads(relayctl("mcp-config", "--for", "claude", "--role", "inferno", "--session", "agent:main:main").stdout) == claude
    entry = claude["mcpServers"]["relay"]
    codex = tomllib.loads(relayctl("mcp-config", "--for", "codex", "--role", "inferno", "--session", "agent:main:main").stdout)
    assert codex == {"mcp_servers": {"relay": {"command": entry["command"], "env": entry["env"], "default_tools_approval_mode": "approve"}}}
    gemini = json.loads(relayctl("mcp-config", "--for", "gemini", "--role", "inferno", "--session", "agent:main:main").stdout)
    assert gemini == {"mcpServers": {"relay": {"command": entry["command"], "args": entry["args"], "env": entry["env"], "trust": True}}}
    assert entry["env"] == {"OVLD_ROLE": "inferno", "RELAY_DIR": relayctl.env["RELAY_DIR"], "RELAY_SOCKET": relayctl.env["RELAY_SOCKET"], "OVLD_SESSION": "agent:main:main"}
    assert json.loads(relayctl("mcp-config", "--for", "copilot", "--role", "inferno", "--session", "agent:main:main").stdout) == claude
    opencode = json.loads(relayctl("mcp-config", "--for", "opencode", "--role", "inferno", "--session", "agent:main:main").stdout)
    assert opencode == {"mcp": {"relay": {"type": "local", "command": [entry["command"], *entry["args"]], "environment": entry["env"], "enabled": True}}}


def test_relayctl_up_gives_codex_the_same_server_as_one_inline_table() -> None:
    """`relayctl up` starts codex with `-c mcp_servers.relay=TABLE`: the table `mcp-config
    --for codex` writes, quotes and all."""
    from relayctl.cmd_mcp import config, inline

    where = ('/tmp/a "store"', "/tmp/b\\sock", "team \x7f")
    table = tomllib.loads(f"relay = {inline('codex', 'inferno', *where)}")["relay"]
    written = tomllib.loads(config("codex", "inferno", *where))["mcp_servers"]["relay"]
    assert table == {"args": [], **written}
    assert table["env"] == {"OVLD_ROLE": "inferno", "RELAY_DIR": where[0], "RELAY_SOCKET": where[1], "OVLD_SESSION": where[2]}


def test_a_preset_writes_one_codex_profile_per_role(relayctl, short_tmp: Path) -> None:
    refused = relayctl("mcp-config", "--for", "codex", "--preset", "overlord", check=False)
    assert refused.returncode == 2 and "--out-dir" in refused.stderr and refused.stdout == ""
    relayctl("mcp-config", "--for", "codex", "--preset", "overlord", "--out-dir", str(short_tmp / "codex"))
    files = sorted(os.listdir(short_tmp / "codex"))
    assert files == sorted(f"{role}.config.toml" for role in ("overlord", "strategist", "inferno", "glacier", "shadow", "storm"))
    storm = tomllib.loads((short_tmp / "codex" / "storm.config.toml").read_text())
    assert storm["mcp_servers"]["relay"]["env"]["OVLD_ROLE"] == "storm"
    gemini = json.loads(relayctl("mcp-config", "--for", "gemini", "--preset", "overlord").stdout)
    assert gemini["glacier"]["mcpServers"]["relay"]["env"]["OVLD_ROLE"] == "glacier"


def test_server_only_is_for_claude(relayctl) -> None:
    proc = relayctl("mcp-config", "--for", "gemini", "--role", "inferno", "--server-only", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "claude mcp add-json" in proc.stderr


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=150)
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _team(relayctl, short_tmp: Path) -> tuple[Path, Path]:
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", SUBJECT, agent="strategist")
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    return home, project


def test_codex_runs_relay_mcp_from_the_printed_toml_and_reads_the_mail(relayctl, short_tmp: Path) -> None:
    home, project = _team(relayctl, short_tmp)
    toml = relayctl("mcp-config", "--for", "codex", "--role", "inferno").stdout
    seen: dict[str, Any] = {}

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        outputs = [item for item in body["input"] if item.get("type") == "function_call_output"]
        if not outputs:
            seen["tools"] = {t.get("name"): [x["name"] for x in t.get("tools", [])] for t in body["tools"]}
            return [model_openai.function_call("check_inbox", {}, namespace="mcp__relay")]
        seen["output"] = json.dumps(outputs)
        return [model_openai.message("read it")]

    with ScriptedModel(model_openai.responses_responder(turn)) as model:
        codex_home = home / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(model_openai.codex_config(model.url) + "\n" + toml)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "sk-scripted"}
        proc = _run([str(agent_programs.program("codex")), "exec", "--skip-git-repo-check", "Check your mail."], project, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "check_inbox" in seen["tools"]["mcp__relay"]
    assert SUBJECT in seen["output"]  # the tool call ran, unprompted, and returned the mail
    assert json.loads(relayctl("--json", "read", "--unread", agent="inferno").stdout) == []


def _gemini_home(home: Path, project: Path | None) -> None:
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    if project is not None:
        (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))


def test_gemini_runs_relay_mcp_from_the_printed_settings_in_a_trusted_folder(relayctl, short_tmp: Path) -> None:
    home, project = _team(relayctl, short_tmp)
    (project / ".gemini").mkdir()
    (project / ".gemini" / "settings.json").write_text(relayctl("mcp-config", "--for", "gemini", "--role", "inferno").stdout)
    _gemini_home(home, project)
    seen: dict[str, Any] = {}

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        parts = [p for c in body.get("contents", []) for p in c.get("parts", [])]
        answers = [p for p in parts if "functionResponse" in p]
        if not answers:
            seen["tools"] = [f["name"] for t in body.get("tools", []) for f in t.get("functionDeclarations", [])]
            return [model_gemini.function_call("mcp_relay_check_inbox", {})]
        seen["output"] = json.dumps(answers)
        return [model_gemini.text("read it")]

    with ScriptedModel(model_gemini.gemini_responder(turn)) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "GOOGLE_GEMINI_BASE_URL": model.url, "GEMINI_API_KEY": "scripted-key"}
        proc = _run([str(agent_programs.program("gemini")), "-m", "gemini-2.5-flash", "-p", "Check your mail."], project, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mcp_relay_check_inbox" in seen["tools"]
    assert SUBJECT in seen["output"]


def test_gemini_in_an_untrusted_folder_refuses_to_run_headless(relayctl, short_tmp: Path) -> None:
    """What docs/mcp.md tells Gemini users: project settings (relay's server and hooks)
    need a trusted folder; a one-shot run in an untrusted one stops and says how."""
    home, project = _team(relayctl, short_tmp)
    (project / ".gemini").mkdir()
    (project / ".gemini" / "settings.json").write_text(relayctl("mcp-config", "--for", "gemini", "--role", "inferno").stdout)
    _gemini_home(home, None)
    with ScriptedModel(model_gemini.gemini_responder()) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "GOOGLE_GEMINI_BASE_URL": model.url, "GEMINI_API_KEY": "scripted-key"}
        proc = _run([str(agent_programs.program("gemini")), "-m", "gemini-2.5-flash", "-p", "Check your mail."], project, env)
        assert model.requests == []
    assert proc.returncode != 0 and "trusted directory" in proc.stderr and "GEMINI_CLI_TRUST_WORKSPACE" in proc.stderr


def test_copilot_runs_relay_mcp_from_the_printed_config_and_reads_the_mail(relayctl, short_tmp: Path) -> None:
    """`copilot -p` with `--additional-mcp-config @FILE` (the file `mcp-config --for copilot`
    prints) offers relay's tools as `relay-<tool>`; --allow-all-tools lets them run unasked."""
    home, project = _team(relayctl, short_tmp)
    config = short_tmp / "inferno.json"
    config.write_text(relayctl("mcp-config", "--for", "copilot", "--role", "inferno").stdout)
    seen: dict[str, Any] = {}

    def turn(body: dict[str, Any]) -> dict[str, Any]:
        answers = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if not answers:
            seen["tools"] = [t["function"]["name"] for t in body.get("tools", [])]
            return model_openai.chat_tool_call("relay-check_inbox", {})
        seen["output"] = json.dumps(answers)
        return model_openai.chat_text("read it")

    with ScriptedModel(model_openai.chat_responder(turn)) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), **agent_programs.copilot_env(home, model.url)}
        proc = _run([str(agent_programs.program("copilot")), "-p", "Check your mail.", "--allow-all-tools",
                     "--additional-mcp-config", f"@{config}"], project, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "relay-check_inbox" in seen["tools"]
    assert SUBJECT in seen["output"]


def test_opencode_runs_relay_mcp_from_the_printed_block_and_reads_the_mail(relayctl, short_tmp: Path) -> None:
    """`opencode run` with the `mcp` block `mcp-config --for opencode` prints in its
    opencode.json offers relay's tools as `relay_<tool>` and runs them unasked."""
    home, project = _team(relayctl, short_tmp)
    block = json.loads(relayctl("mcp-config", "--for", "opencode", "--role", "inferno").stdout)
    seen: dict[str, Any] = {}

    def turn(body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):
            return model_openai.chat_text("a title")  # OpenCode's title request
        answers = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if not answers:
            seen["tools"] = [t["function"]["name"] for t in body["tools"]]
            return model_openai.chat_tool_call("relay_check_inbox", {})
        seen["output"] = json.dumps(answers)
        return model_openai.chat_text("read it")

    with ScriptedModel(model_openai.chat_responder(turn)) as model:
        agent_programs.opencode_config(project, model.url, block)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), **agent_programs.opencode_env(project, home)}
        proc = _run([str(agent_programs.program("opencode")), "run", "Check your mail."], project, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "relay_check_inbox" in seen["tools"]
    assert SUBJECT in seen["output"]
