"""Real Claude Code sessions with relay-mcp: what the model is sent.

Claude Code (the version pinned in tests/agents/package.json) runs interactively in a
private tmux server, configured as docs/mcp.md says: the file `relayctl
mcp-config --role inferno` prints, passed with `--mcp-config`, and `--dangerously-load-
development-channels server:relay`. Its model is the scripted one on 127.0.0.1
(tests/support/scripted_model.py), which records every request; relayd runs. The scratch HOME holds
what a signed-in user's `~/.claude.json` would: onboarding done, the API key approved, the
project trusted, and the account-side switch for channels (`tengu_harbor` in
`cachedGrowthBookFeatures`) on, as Claude Code's own service sets it.

ENABLE_TOOL_SEARCH=false makes Claude Code list MCP tools to the model directly (else it
defers them behind its ToolSearch tool), so the scripted model can call them in one step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from support import agent_programs
from support.model_anthropic import conversation, messages_responder, text, texts, tool_result, tool_use
from support.scripted_model import Recorded, ScriptedModel
from support.tmux_pane import Tmux
from support.paths import DOCS

pytestmark = [pytest.mark.slow, pytest.mark.real_program]  # real agent programs in tmux: not in the quick loop

API_KEY = "sk-ant-relay-tests-0123456789abcdef"
DEV_CHANNELS = ["--dangerously-load-development-channels", "server:relay"]
ALLOWED = ["--allowedTools", "Bash,mcp__relay__check_hub_status,mcp__relay__check_inbox"]


class ClaudeCode:
    """One interactive Claude Code in a tmux pane of a private tmux server."""

    def __init__(self, root: Path, relay_env: dict[str, str], model: ScriptedModel, mcp_config: str, channels: bool = True) -> None:
        self.root = root
        self.project = root / "project"
        self.home = root / "home"
        self.project.mkdir()
        agent_programs.claude_signed_in(self.home, API_KEY, trusted=self.project, channels=channels)
        self.config = root / "relay-mcp.json"
        self.config.write_text(mcp_config)
        self.debug_log = root / "claude-debug.log"
        self.tmux = Tmux(root, "claude")
        # relay-mcp learns its store from the configuration file, not from this environment.
        self.env = {k: v for k, v in relay_env.items() if not k.startswith(("RELAY_", "OVLD_", "TMUX"))}
        self.env.update(HOME=str(self.home), ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=API_KEY, ENABLE_TOOL_SEARCH="false", TERM="xterm-256color")

    def start(self, *flags: str) -> None:
        argv = [str(agent_programs.program("claude")), "--mcp-config", str(self.config), *flags, "--debug-file", str(self.debug_log)]
        self.tmux.start(argv, self.project, self.env, size=(200, 50))

    def screen(self) -> str:
        return self.tmux.screen(history=200)

    def log(self) -> str:
        try:
            return self.debug_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def relay_lines(self) -> str:
        return "\n".join(line for line in self.log().splitlines() if '"relay"' in line)

    def wait(self, what: str, seen: Callable[[], bool], timeout: float = 45) -> None:
        deadline = time.monotonic() + timeout
        while not seen():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen within {timeout} s; the pane shows:\n{self.screen()}\nClaude Code's log of relay:\n{self.relay_lines()}")
            time.sleep(0.1)

    def type(self, line: str) -> None:
        self.tmux.literal(line)
        self.tmux.keys("Enter")

    def start_with_channels(self) -> None:
        """Start as the docs say, pass the development-channels warning, and wait until
        Claude Code has registered relay's channel."""
        self.start(*DEV_CHANNELS, *ALLOWED)
        # Claude Code asks at every start; no setting skips the question.
        self.wait("the development-channels warning", lambda: "I am using this for local development" in self.screen())
        self.type("")  # Enter on the preselected "I am using this for local development"
        self.wait("relay's channel registration", lambda: 'MCP server "relay": Channel notifications registered' in self.log() or "Channel notifications skipped" in self.log())
        assert "Channel notifications skipped" not in self.log(), self.relay_lines()

    def close(self) -> None:
        self.tmux.kill()


def session_turn(script: dict[str, dict[str, Any]]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """The scripted model: a prompt holding a key of `script` gets that tool call; a tool
    result telling it to call check_inbox gets that call, as a model following relay's
    instructions would; anything else gets "OK"."""

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        if not body.get("tools"):
            return [text("relay session")]  # a side request (the session title) offers no tools
        last = conversation(body)[-1]
        if last["role"] != "user":
            return [text("OK")]
        said = "\n".join(texts(last))
        results = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(last["content"], list) else []
        if results:
            return [tool_use("mcp__relay__check_inbox", {})] if "call check_inbox" in said else [text("OK")]
        for trigger, call in script.items():
            if trigger in said:
                return [tool_use(call["name"], call["input"])]
        return [text("OK")]

    return turn


def request_json(request: Recorded) -> dict[str, Any]:
    return request.json() if request.path.split("?")[0].endswith("/v1/messages") and request.body else {}


def said(request: Recorded) -> str:
    """All the text of a request for a turn of the session (side requests, such as the
    session's title, offer no tools and count as saying nothing)."""
    body = request_json(request)
    return "\n".join(texts(body)) if body.get("tools") else ""


def tool_call_in(request: Recorded, name: str) -> str | None:
    """The id of the last call of tool `name` the model made in the conversation of `request`."""
    calls = [b["id"] for m in conversation(request_json(request)) if m["role"] == "assistant" and isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_use" and b.get("name") == name]
    return calls[-1] if calls else None


def result_of(request: Recorded, name: str) -> dict[str, Any] | None:
    call = tool_call_in(request, name)
    return tool_result(request_json(request), call) if call else None


@pytest.fixture
def claude_code(short_tmp: Path, relay_env: dict[str, str], relayctl: Any, daemon: Any) -> Iterator[Callable[[dict[str, dict[str, Any]]], tuple[ClaudeCode, ScriptedModel]]]:
    """A factory: (Claude Code, its scripted model) for a script of tool calls; both are
    stopped afterwards, with every process the session started."""
    started: list[tuple[ClaudeCode, ScriptedModel]] = []
    mcp_config = relayctl("mcp-config", "--role", "inferno").stdout

    def make(script: dict[str, dict[str, Any]], channels: bool = True) -> tuple[ClaudeCode, ScriptedModel]:
        model = ScriptedModel(messages_responder(session_turn(script))).__enter__()
        session = ClaudeCode(short_tmp, relay_env, model, mcp_config, channels)
        started.append((session, model))
        return session, model

    try:
        yield make
    finally:
        for session, model in started:
            session.close()
            model.__exit__(None, None, None)


def send(relayctl: Any, subject: str, body: str) -> dict[str, Any]:
    return json.loads(relayctl("--json", "send", "inferno", "--subject", subject, body, agent="strategist").stdout)


@pytest.mark.timeout(150)
def test_mail_reaches_the_model_as_a_channel_event(claude_code: Any, relayctl: Any) -> None:
    session, model = claude_code({})
    session.start_with_channels()
    assert '"protocolEra":"legacy","negotiatedProtocolVersion":"2025-11-25"' in session.log()  # after server/discover

    message = send(relayctl, "deploy window moved", "ship the hotfix at 14:00")
    request = model.wait_for(lambda r: "deploy window moved" in said(r), timeout=30)
    event = f'<channel source="relay" from="strategist" message_id="{message["id"]}" priority="normal">'
    assert event in said(request)
    assert "ship the hotfix at 14:00" in said(request)  # the preview; check_inbox has the whole message
    # "announced by channel" on Claude Code's own word that it took the event (its log of relay-mcp)
    try:
        session.wait("the channel announcement", lambda: (json.loads(relayctl("--json", "track", message["id"]).stdout)["recipients"][0].get("announced") or {}).get("ok"), timeout=15)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; track says: {relayctl('--json', 'track', message['id']).stdout}") from None
    [way] = json.loads(relayctl("--json", "track", message["id"]).stdout)["recipients"]
    assert way["announced"]["how"] == "channel"


@pytest.mark.timeout(150)
def test_without_channels_the_unread_notice_in_a_tool_result_reaches_the_model(claude_code: Any, relayctl: Any) -> None:
    """Started without the development-channels flag (Claude Code skips relay's events), the
    model learns of new mail from the notice in the next relay tool result, and reads it."""
    session, model = claude_code({"look at the team": {"name": "mcp__relay__check_hub_status", "input": {}}})
    session.start(*ALLOWED)
    session.wait("relay's connection", lambda: 'MCP server "relay": Channel notifications skipped' in session.log())
    assert "not in --channels list for this session" in session.log()

    send(relayctl, "schema review", "please review the schema change")
    session.type("look at the team")
    request = model.wait_for(lambda r: result_of(r, "mcp__relay__check_inbox") is not None, timeout=45)
    hub = result_of(request, "mcp__relay__check_hub_status")
    assert hub is not None and not hub.get("is_error")
    shown = json.loads("".join(texts(hub["content"])))  # what Claude Code made of structuredContent
    assert shown["notice"] == "[relay] 1 unread message waiting: call check_inbox."
    inbox = "".join(texts(result_of(request, "mcp__relay__check_inbox")["content"]))  # type: ignore[index]
    assert "schema review" in inbox and "please review the schema change" in inbox
    assert not any('<channel source="relay" from=' in said(r) for r in model.requests)  # (the instructions name the tag)


@pytest.mark.timeout(180)
def test_a_refused_channel_is_never_announced_and_the_pane_trigger_brings_the_mail(claude_code: Any, relayctl: Any) -> None:
    """An API-key user's Claude Code refuses channels ("Channels are not currently available")
    even with the development flag: relay-mcp reads that in Claude Code's own log, records no
    "announced by channel", and the session's tmux pane takes over: relayd types its trigger,
    and the model reads the mail."""
    session, model = claude_code({"Call check_inbox": {"name": "mcp__relay__check_inbox", "input": {}}}, channels=False)
    session.env.update(TMUX=f"{session.tmux.socket},0,0", TMUX_PANE="%0")  # what tmux sets in its (first) pane; the helper's env -i drops them
    session.start(*DEV_CHANNELS, *ALLOWED)
    session.wait("Claude Code's decision about relay's channel", lambda: "Channel notifications skipped" in session.log() or "I am using this for local development" in session.screen())
    if "I am using this for local development" in session.screen():
        session.type("")
        session.wait("Claude Code's decision about relay's channel", lambda: "Channel notifications skipped" in session.log())
    assert "channels feature is not currently available" in session.relay_lines()

    def inferno() -> dict[str, Any]:
        return relayctl.setup("agents", name="inferno")[0]

    session.wait("relay-mcp to fall back to the pane", lambda: str(inferno().get("notify", "")).startswith("tmux:"))
    message = send(relayctl, "deploy window moved", "ship the hotfix at 14:00")
    request = model.wait_for(lambda r: result_of(r, "mcp__relay__check_inbox") is not None, timeout=60)
    assert "ship the hotfix at 14:00" in "".join(texts(result_of(request, "mcp__relay__check_inbox")["content"]))  # type: ignore[index]
    [way] = json.loads(relayctl("--json", "track", message["id"]).stdout)["recipients"]
    assert way["announced"]["how"] == "tmux" and way["announced"]["ok"]
    receipts = [json.loads(line) for line in (Path(relayctl.env["RELAY_DIR"]) / "delivery.jsonl").read_text().splitlines()]
    channel = [r for r in receipts if r.get("step") == "announced" and r.get("how") == "channel"]
    assert channel and not any(r.get("ok", True) for r in channel), channel  # the refusal only: never "announced by channel, ok"
    assert "Claude Code refused relay's channel (channels feature is not currently available)" in channel[0]["error"]


@pytest.mark.timeout(150)
def test_mail_arriving_during_a_long_tool_call_does_not_interrupt_it(claude_code: Any, relayctl: Any) -> None:
    session, model = claude_code({"run the slow build": {"name": "Bash", "input": {"command": "sleep 8; echo build-finished", "description": "slow build"}}})
    session.start_with_channels()
    session.type("run the slow build")
    session.wait("the tool call running", lambda: "sleep 8" in session.screen())

    send(relayctl, "while you build", "no rush, read this after the build")
    assert not any(result_of(r, "Bash") for r in model.requests), "the tool finished before the mail arrived: the test proves nothing"

    after = model.wait_for(lambda r: result_of(r, "Bash") is not None, timeout=30)
    result = result_of(after, "Bash")
    assert result is not None and not result.get("is_error") and "".join(texts(result["content"])).strip() == "build-finished"
    model.wait_for(lambda r: '<channel source="relay" from="strategist"' in said(r) and "while you build" in said(r), timeout=30)
    assert "Interrupted" not in session.screen()


def _docs_block(section: str, index: int) -> str:
    """The `index`-th ```sh block of docs/mcp.md's section `section`."""
    text = (DOCS / "mcp.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return body.split("```sh\n")[index + 1].split("```", 1)[0]


OVERLORD = ["overlord", "strategist", "inferno", "glacier", "shadow", "storm"]


@pytest.mark.timeout(240)
def test_the_claude_code_team_walkthrough(relay_env: dict[str, str], short_tmp: Path) -> None:
    """docs/mcp.md's six-pane team as written (minus `pip install` and `tmux attach`): six real
    Claude Code sessions in a private tmux server, one scripted model behind them all; the
    docs' `relayctl send` reaches inferno's model, and only inferno's. (Each session's
    debug log, under the scratch HOME with DEBUG=1, says when it has registered relay's
    channel; only then is the mail sent.)"""
    setup = "\n".join(line for line in _docs_block("A Claude Code team", 1).splitlines() if not line.startswith(("pip install", "tmux attach")))
    project, home = short_tmp / "project", short_tmp / "home"
    project.mkdir()
    agent_programs.claude_signed_in(home, API_KEY, trusted=project, channels=True)
    (home / ".tmux.conf").write_text("set -g default-size 240x90\n")  # a person's terminal: six panes share it
    debug_logs = home / ".claude" / "debug"  # where DEBUG=1 makes each session log
    claude_bin = agent_programs.program("claude").parent

    def answer(request: Recorded) -> Any:
        session = request.headers.get("x-claude-code-session-id")
        return messages_responder(lambda body: [text(f"answered in session {session}")])(request)

    with ScriptedModel(answer) as model:
        env = dict(relay_env, PATH=f"{claude_bin}:{Path(sys.executable).parent}:{relay_env['PATH']}", TMUX_TMPDIR=str(short_tmp), HOME=str(home),
                   ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=API_KEY, DEBUG="1", TERM="xterm-256color")
        env.pop("TMUX", None)

        def tmux(*args: str) -> str:
            return subprocess.run(["tmux", *args], env=env, capture_output=True, text=True, timeout=30).stdout

        def panes() -> dict[str, str]:
            return {pane: tmux("capture-pane", "-p", "-J", "-t", pane) for pane in tmux("list-panes", "-t", "team", "-F", "#{pane_id}").split()}

        def registered() -> int:
            return sum(log.read_text(errors="replace").count('MCP server "relay": Channel notifications registered') for log in debug_logs.glob("*.txt")) if debug_logs.is_dir() else 0

        with open(short_tmp / "setup.log", "w") as log:
            done = subprocess.run(["bash", "-ec", setup + "\necho $! > relayd.pid\n"], cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=60)
        relayd_pid = int((project / "relayd.pid").read_text())
        pane_pids = [int(pid) for pid in tmux("list-panes", "-t", "team", "-F", "#{pane_pid}").split()]
        try:
            assert done.returncode == 0, (short_tmp / "setup.log").read_text()
            assert len(pane_pids) == 6
            accepted: set[str] = set()
            deadline = time.monotonic() + 120
            while registered() < 6:
                assert time.monotonic() < deadline, f"{registered()} of 6 sessions registered relay's channel; panes:\n" + "\n".join(panes().values())
                for pane, shown in panes().items():
                    if pane not in accepted and "I am using this for local development" in shown:
                        tmux("send-keys", "-t", pane, "Enter")  # each session asks at its start
                        accepted.add(pane)
                time.sleep(0.2)

            for line in _docs_block("A Claude Code team", 2).splitlines():
                if line.startswith("relayctl --agent overlord send"):
                    subprocess.run(line.split("#")[0], shell=True, cwd=project, env=env, check=True, capture_output=True, timeout=60)
            event = '<channel source="relay" from="overlord"'
            request = model.wait_for(lambda r: event in said(r), timeout=60)
            assert 'priority="normal"' in said(request) and "deploy" in said(request) and "ship the hotfix" in said(request)
            # The session whose model got it is the one in inferno's pane: the pane shows the
            # model's answer to that request, which names the request's session.
            session = request.headers["x-claude-code-session-id"]
            roles = {pane: command.split(".relay-mcp/")[1].split(".json")[0] for pane, command in (line.split(" ", 1) for line in tmux("list-panes", "-t", "team", "-F", "#{pane_id} #{pane_start_command}").splitlines())}
            assert sorted(roles.values()) == sorted(OVERLORD)
            deadline = time.monotonic() + 30
            while not any(f"answered in session {session}" in shown for shown in panes().values()):
                assert time.monotonic() < deadline, panes()
                time.sleep(0.2)
            shown = panes()
            assert [roles[pane] for pane, text in shown.items() if f"answered in session {session}" in text] == ["inferno"]
            assert [roles[pane] for pane, text in shown.items() if "New message from overlord" in text] == ["inferno"]
            assert {r.headers["x-claude-code-session-id"] for r in model.requests if event in said(r)} == {session}
        finally:
            tmux("kill-server")
            os.kill(relayd_pid, signal.SIGTERM)
            for pid in pane_pids:
                for _ in range(100):
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.1)
                else:
                    os.kill(pid, signal.SIGKILL)
