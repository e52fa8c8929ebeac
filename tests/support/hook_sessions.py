"""Real agent-program sessions with relay's hooks installed, against the scripted model.

Two scenarios, run by each program's test file (test_claude_hooks.py, test_codex_hooks.py,
test_gemini_hooks.py). `run_scenario`: the hooks are installed with `relayctl hooks install` into a
scratch project, the program runs one-shot in it with a scratch HOME, and mail for the
agent is sent before the session and while the model "thinks":

    before the session   mail 1  -> must be in the first model request (session start / prompt hook)
    model request 1      mail 2, the model calls a tool -> must be in request 2 (after-tool hook)
    model request 2      mail 3, the model answers       -> the stop hook continues the session once:
                                                             request 3 carries mail 3
    model request 3      mail 4, the model answers       -> the session ends; mail 4 stays unread

`run_interactive`: the program in tmux, driven as a person would (see its docstring).

`Program` holds what differs between the programs: how to point them at the scripted
model, the tool call and text reply in their API's shape, and their command line.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import agent_programs, model_anthropic, model_gemini, model_openai
from .scripted_model import Recorded, ScriptedModel
from .tmux_pane import Tmux, kill_group, kill_strays

AGENT = "inferno"
SENDER = "strategist"
SUBJECTS = ("Rebase before the 3.2 release", "Auth tests are red on main", "Take bd-57 next", "Lunch order closes at noon")


@dataclass
class Program:
    name: str
    responder: Callable[[Callable[[dict[str, Any]], list[dict[str, Any]]]], Callable[[Recorded], Any]]
    tool_call: Callable[[Path], dict[str, Any]]
    reply: Callable[[str], dict[str, Any]]
    is_turn: Callable[[Recorded], bool]  # a request of the session's own turns (not a title or side request)
    prepare: Callable[[Path, Path, str], dict[str, str]]  # (home, project, model url) -> environment
    argv: Callable[[str], list[str]]


def _claude_env(home: Path, project: Path, url: str) -> dict[str, str]:
    # The hooks are what these scenarios test: Claude Code's own inbox, which relay uses
    # first where a session has one (tests/arrival/test_claude_inbox_real.py), is off.
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-scripted", "CLAUDE_CODE_HARBOR_KITE": "0"}


def _codex_env(home: Path, project: Path, url: str) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(model_openai.codex_config(url))
    # RELAY_CODEX_QUEUE=0: these sessions test the hooks and the pane trigger, not the queue
    # door (tests/arrival/test_codex_queue_real.py), whose notice would name the mail again.
    return {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "sk-scripted", "RELAY_CODEX_QUEUE": "0"}


def _gemini_env(home: Path, project: Path, url: str) -> dict[str, str]:
    gemini_home = home / ".gemini"
    gemini_home.mkdir(parents=True)
    # An API key is the auth a scripted server can take; GOOGLE_GEMINI_BASE_URL points it here.
    (gemini_home / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    # The folder trust a person gives in Gemini's dialog: project settings (and hooks) load only then.
    (gemini_home / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    return {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "scripted-key"}


def _copilot_env(home: Path, project: Path, url: str) -> dict[str, str]:
    return agent_programs.copilot_env(home, url, trusted=project)


def _opencode_env(home: Path, project: Path, url: str) -> dict[str, str]:
    agent_programs.opencode_config(project, url)
    return agent_programs.opencode_env(project, home)


def _chat(turn: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda body: [model_openai.chat_text("OK")]) -> Callable[[Recorded], Any]:
    return model_openai.chat_responder(lambda body: turn(body)[0])


PROGRAMS = {
    "claude": Program(
        "claude",
        model_anthropic.messages_responder,
        lambda project: model_anthropic.tool_use("Read", {"file_path": str(project / "NOTES.md")}),
        model_anthropic.text,
        lambda r: r.path.split("?")[0].endswith("/v1/messages") and bool((r.json() or {}).get("tools")),
        _claude_env,
        lambda prompt: [str(agent_programs.program("claude")), "-p", prompt],
    ),
    "codex": Program(
        "codex",
        model_openai.responses_responder,
        lambda project: model_openai.function_call("exec_command", {"cmd": "cat NOTES.md"}),
        model_openai.message,
        lambda r: r.path.split("?")[0].endswith("/responses"),
        _codex_env,
        # --trust: the project trust `codex` asks for on its first interactive start;
        # --dangerously-bypass-hook-trust: the hook review it asks for then (docs/mcp.md).
        lambda prompt: [str(agent_programs.program("codex")), "exec", "--skip-git-repo-check", "--trust", "--dangerously-bypass-hook-trust", prompt],
    ),
    "gemini": Program(
        "gemini",
        model_gemini.gemini_responder,
        lambda project: model_gemini.function_call("read_file", {"file_path": str(project / "NOTES.md")}),
        model_gemini.text,
        lambda r: ":streamGenerateContent" in r.path,
        _gemini_env,
        # A fixed model: without one Gemini CLI first asks a router model which to use.
        lambda prompt: [str(agent_programs.program("gemini")), "-m", "gemini-2.5-flash", "-p", prompt],
    ),
    "copilot": Program(
        "copilot",
        _chat,
        lambda project: model_openai.chat_tool_call("view", {"path": str(project / "NOTES.md")}),
        model_openai.chat_text,
        lambda r: r.path.split("?")[0].endswith("/chat/completions") and bool((r.json() or {}).get("tools")),
        _copilot_env,
        lambda prompt: [str(agent_programs.program("copilot")), "-p", prompt, "--allow-all-tools"],
    ),
    "opencode": Program(
        "opencode",
        _chat,
        lambda project: model_openai.chat_tool_call("read", {"filePath": str(project / "NOTES.md")}),
        model_openai.chat_text,
        lambda r: r.path.split("?")[0].endswith("/chat/completions") and bool((r.json() or {}).get("tools")),
        _opencode_env,
        lambda prompt: [str(agent_programs.program("opencode")), "run", prompt],
    ),
}


@dataclass
class Session:
    returncode: int
    stdout: str
    stderr: str
    turns: list[Recorded] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    hooks_seen: str = ""  # what relay's hooks left in the agent's folder (whether they ran at all)


def run_scenario(program: Program, relayctl: Any, root: Path, timeout: float = 150, hooks_for: str | None = None) -> Session:
    """The scenario of the module docstring; returns what the model was sent. `hooks_for`:
    install another program's hooks into the project instead of the program's own."""
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    (project / "NOTES.md").write_text("release checklist\n")
    relayctl.setup("init", preset="overlord")
    relayctl.setup("register", name=AGENT, notify="hook")
    relayctl("hooks", "install", "--for", hooks_for or program.name, "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    turns: list[Recorded] = []

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        n = len([r for r in model.requests if program.is_turn(r)])
        if n <= len(SUBJECTS) - 1:
            relayctl("send", AGENT, SUBJECTS[n], agent=SENDER)  # arrives while the model works
        if n == 1:
            return [program.tool_call(project)]
        return [program.reply(f"answer {n}")]

    answer_turn = program.responder(turn)
    answer_aside = program.responder(lambda body: [program.reply("side answer")])

    def respond(request: Recorded) -> Any:
        return answer_turn(request) if program.is_turn(request) else answer_aside(request)

    with ScriptedModel(respond) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb", "RELAY_AGENT": AGENT, **program.prepare(home, project, model.url)}
        proc = subprocess.Popen(program.argv("Carry on with the release work."), cwd=project, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            kill_group(proc)
            kill_strays(home)
        turns = [r for r in model.requests if program.is_turn(r)]
    unread = [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)]
    return Session(proc.returncode, stdout, stderr, turns, unread, _hooks_seen(Path(relayctl.env["RELAY_DIR"]) / "agents" / AGENT))


def program_state(agent: Path) -> str | None:
    state = agent / "program-state"
    return json.loads(state.read_text())["state"] if state.exists() else None


def _hooks_seen(agent: Path) -> str:
    state = agent / "program-state"
    files = sorted(p.name for p in agent.iterdir())
    return f"files {files}; program-state {state.read_text().strip() if state.exists() else 'none'}"


def run_interactive(program: Program, relayctl: Any, root: Path, *, answer_dialogs: Callable[[Tmux], None], ready: str,
                    configure: Callable[[Path], None] = lambda home: None, settle_after_answer: float = 0) -> None:
    """A person's session in tmux, set up as the docs say: `answer_dialogs` gets the program
    past its start-up questions, `ready` is what its screen shows when it takes a prompt,
    `configure(home)` adds what a person's earlier use left in the scratch HOME. Mail sent
    before the first prompt and mail sent after the first answer each reach the model once."""
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    relayctl.setup("init", preset="overlord")
    relayctl.setup("register", name=AGENT, notify="hook")
    relayctl("hooks", "install", "--for", program.name, "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    tmux = Tmux(root)
    with ScriptedModel(program.responder()) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT, **program.prepare(home, project, model.url)}
        configure(home)
        tmux.start([str(agent_programs.program(program.name))], project, env)
        try:
            answer_dialogs(tmux)
            tmux.wait_for(ready, settle=1)
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            first = model.wait_for(lambda r: program.is_turn(r) and "Carry on with the release work." in r.text, timeout=60)
            assert SUBJECTS[0] in first.text
            tmux.wait_for(ready, settle=settle_after_answer)
            # Mail after the answer: the end-of-turn hook may still catch it (and continue
            # once), or the next prompt's hook does; either way the model gets it once.
            relayctl("send", AGENT, SUBJECTS[1], agent=SENDER)
            tmux.type_line("Any news", "Any news")
            try:
                second = model.wait_for(lambda r: program.is_turn(r) and "Any news" in r.text, timeout=60)
            except AssertionError as missed:
                agent = Path(relayctl.env["RELAY_DIR"]) / "agents" / AGENT
                raise AssertionError(f"{missed}\nrelay's hooks: {_hooks_seen(agent)}\nthe screen:\n{tmux.screen()}") from None
            assert second.text.count(SUBJECTS[1]) == 1 and second.text.count(SUBJECTS[0]) == first.text.count(SUBJECTS[0])
        finally:
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []


def assert_mail_reached_the_model(session: Session) -> None:
    """What every program must show: each mail in the request right after it arrived,
    the stop continued once, and not again for mail that came during the continuation."""
    assert session.returncode == 0, f"the program failed ({session.returncode}): {session.stderr[-2000:]}"
    texts = [r.text for r in session.turns]
    seen = [[subject for subject in SUBJECTS if subject in text] for text in texts]
    assert len(texts) == 3, (f"expected 3 model turns (tool, answer, one continuation), got {len(texts)} carrying {seen}; "
                             f"unread after: {session.unread}; the agent's folder: {session.hooks_seen}; the program's stderr: {session.stderr[-2000:]}")
    first, after_tool, continued = texts
    assert SUBJECTS[0] in first  # session start / prompt hook
    assert SUBJECTS[1] not in first and SUBJECTS[1] in after_tool  # after-tool hook
    assert SUBJECTS[2] not in after_tool and SUBJECTS[2] in continued  # stop hook: continued with the mail
    assert all(SUBJECTS[3] not in t for t in texts)  # the continuation's own stop did not continue again
    assert session.unread == [SUBJECTS[3]]  # handed-over mail is read; the last waits for the next prompt
    # Each message was handed over once: a later request repeats the conversation, but no
    # hook added the same message a second time.
    assert continued.count(SUBJECTS[0]) == first.count(SUBJECTS[0])


def run_without_an_agent(program: Program, relayctl: Any, root: Path, configure: Callable[[Path, Path], None] = lambda home, project: None) -> None:
    """A person's own session of `program` (no RELAY_AGENT) in a project with relay's hooks:
    relay's line on how to start it as an agent shows in the session once, and the mail
    waiting for the agent stays unread. `configure(home, project)` gets the program to its
    prompt (signed in, the folder trusted)."""
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    relayctl.setup("init", preset="overlord")
    relayctl("hooks", "install", "--for", program.name, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    tmux = Tmux(root)
    with ScriptedModel(program.responder()) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8",
               "RELAY_DIR": relayctl.env["RELAY_DIR"], **program.prepare(home, project, model.url)}
        configure(home, project.resolve())
        tmux.start([str(agent_programs.program(program.name))], project, env)
        try:
            told = f"RELAY_AGENT=NAME {program.name}"
            screen = " ".join(tmux.wait_for(told, timeout=90, settle=1).split())
            assert "has no agent name" in screen and screen.count(told) == 1, screen
        finally:
            tmux.kill()
            kill_strays(home)
    assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECTS[0]]
