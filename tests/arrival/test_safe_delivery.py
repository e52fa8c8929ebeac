"""Keys typed into a terminal act with the person's authority: relay's trigger never answers
a program's question (DESIGN §4, relayd.arrival.program_state, relayd.arrival.notify).

Each test runs the real program from npm (tests/agents, pinned) in real tmux against the
scripted model, with relay's hooks installed as `relayctl hooks install` writes them and
the pane registered as the agent's notify target, relayd running. The model asks to run a
command that needs the person's approval; mail arrives while the question is on the
screen. The question must still be there 10 s later with nothing approved, and once the
person answers, the mail reaches the model (the after-tool hook hands it over).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from support import agent_programs, model_anthropic, model_gemini, model_openai
from support.hook_sessions import PROGRAMS as HOOKED, program_state
from support.relayd_proc import Daemon
from support.scripted_model import Recorded, Reply, ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.real_program]

AGENT = "inferno"
SENDER = "strategist"
TRIGGER = "relay-test: new mail, call check_inbox"
SUBJECT = "Auth tests are red on main"
API_KEY = "sk-ant-relay-test-00000000000000000000"
HOLD = 10.0  # seconds the question must survive the mail (the measure)


@dataclass
class Asking:
    """What differs between the programs for one approval question."""

    name: str
    responder: Callable[[Callable[[dict[str, Any]], list[dict[str, Any]]]], Callable[[Recorded], Any]]
    command_call: Callable[[Path], dict[str, Any]]  # the model's call of a command that needs approval
    configure: Callable[[Path, Path, str], dict[str, str]]  # (home, project, model url) -> environment
    start: Callable[[Tmux], None]  # from the program's start to its empty prompt
    ready: str  # what its screen shows at its prompt
    question: str  # what its screen shows while it asks
    approve: list[str]  # the person's keys that approve
    is_turn: Callable[[Recorded], bool]


def _claude_configure(home: Path, project: Path, url: str) -> dict[str, str]:
    agent_programs.claude_signed_in(home, API_KEY, trusted=project)
    # The person approves each command (Claude Code's manual mode, its default before 2.1.332).
    (home / ".claude").mkdir(exist_ok=True)
    (home / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"defaultMode": "default"}}))
    # The pane trigger is what these tests hold back: Claude Code's own inbox, which relay
    # uses first where a session has one (test_claude_inbox_real.py), is off.
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": API_KEY, "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_HARBOR_KITE": "0"}


def _gemini_configure(home: Path, project: Path, url: str) -> dict[str, str]:
    env = HOOKED["gemini"].prepare(home, project, url)
    settings = home / ".gemini" / "settings.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "model": {"name": "gemini-2.5-flash"}}))
    return env


def _codex_configure(home: Path, project: Path, url: str) -> dict[str, str]:
    env = HOOKED["codex"].prepare(home, project, url)
    config = home / ".codex" / "config.toml"
    # Every command waits for the person's approval; the folder and relay's hooks are trusted.
    config.write_text('approval_policy = "on-request"\nsandbox_mode = "read-only"\n' + config.read_text())
    return env


def _codex_start(tmux: Tmux) -> None:
    tmux.wait_for("Trust this folder?", settle=1)
    tmux.keys("Enter")
    tmux.wait_for("Hooks need review", settle=1)
    tmux.keys("Down", "Enter")


def _copilot_configure(home: Path, project: Path, url: str) -> dict[str, str]:
    return agent_programs.copilot_env(home, url, trusted=project)  # the person approves each command (its default)


def _opencode_configure(home: Path, project: Path, url: str) -> dict[str, str]:
    agent_programs.opencode_config(project, url, {"permission": {"bash": "ask"}})  # OpenCode runs commands unasked by default
    return agent_programs.opencode_env(project, home)


ASKING = {
    "claude": Asking(
        "claude", model_anthropic.messages_responder,
        lambda project: model_anthropic.tool_use("Bash", {"command": f"touch {project}/approved.txt", "description": "Create approved.txt"}),
        _claude_configure, lambda tmux: None, "❯", "Do you want to proceed?", ["Enter"], HOOKED["claude"].is_turn,
    ),
    "gemini": Asking(
        "gemini", model_gemini.gemini_responder,
        lambda project: model_gemini.function_call("run_shell_command", {"command": f"touch {project}/approved.txt", "description": "Create approved.txt"}),
        _gemini_configure, lambda tmux: tmux.wait_for("project-level hooks have been detected"), "Type your message",
        "Allow execution", ["Enter"], HOOKED["gemini"].is_turn,
    ),
    "codex": Asking(
        "codex", model_openai.responses_responder,
        # Outside its read-only sandbox: Codex asks the person first.
        lambda project: model_openai.function_call("exec_command", {"cmd": f"touch {project}/approved.txt", "sandbox_permissions": "require_escalated",
                                                                    "justification": "Create approved.txt?"}),
        _codex_configure, _codex_start, "Ask Codex to do anything", "Would you like to run the following command?", ["Enter"],
        HOOKED["codex"].is_turn,
    ),
    "copilot": Asking(
        "copilot", HOOKED["copilot"].responder,
        lambda project: model_openai.chat_tool_call("bash", {"command": f"touch {project}/approved.txt", "description": "Create approved.txt"}),
        _copilot_configure, lambda tmux: None, "/ commands", "Do you want to run this command?", ["Enter"], HOOKED["copilot"].is_turn,
    ),
    "opencode": Asking(
        "opencode", HOOKED["opencode"].responder,
        lambda project: model_openai.chat_tool_call("bash", {"command": f"touch {project}/approved.txt", "description": "Create approved.txt"}),
        _opencode_configure, lambda tmux: None, "Ask anything", "Allow once", ["Enter"], HOOKED["opencode"].is_turn,
    ),
}
REPLY = {"claude": model_anthropic.text, "gemini": model_gemini.text, "codex": model_openai.message, "copilot": model_openai.chat_text,
         "opencode": model_openai.chat_text}
# relay types nothing into OpenCode: its plugin hands the mail over and starts turns (the
# agent's notify is `hook`, as `relayctl up` registers it).
TYPED_INTO = ("claude", "codex", "copilot", "gemini")


def _notify(name: str, tmux: Tmux) -> str:
    return f"tmux:{tmux.target()}" if name in TYPED_INTO else "hook"


def _mail_in(request: Recorded) -> bool:
    return SUBJECT in request.text


def _relay_for(program: str, relayctl, store_dir: Path, root: Path) -> tuple[Path, Path]:
    """A store with the sender and the agent, relay's hooks for `program` in a new project
    (as `relayctl hooks install` writes them), and a scratch HOME: (home, project)."""
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    relayctl.setup("register", name=SENDER)
    relayctl.setup("register", name=AGENT)
    relayctl("hooks", "install", "--for", program, "--agent", AGENT, "--project", str(project))
    return home, project


# OpenCode is typed nothing, so there is no trigger to hold back; its open permission
# question holds the plugin's turn instead: test_opencode_hooks.py.
@pytest.mark.parametrize("name", TYPED_INTO)
def test_mail_never_answers_a_permission_question_and_reaches_the_model_once_answered(name: str, relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    spec = ASKING[name]
    home, project = _relay_for(name, relayctl, store_dir, short_tmp)
    calls = {"n": 0}

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        calls["n"] += 1
        if calls["n"] == 1:
            return [spec.command_call(project)]
        return [REPLY[name]("Done.")]

    answer_turn = spec.responder(turn)
    answer_aside = spec.responder(lambda body: [REPLY[name]("ok")])
    tmux = Tmux(short_tmp, "a")
    with ScriptedModel(lambda r: answer_turn(r) if spec.is_turn(r) else answer_aside(r)) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT,
               **spec.configure(home, project, model.url)}
        tmux.start([str(agent_programs.program(name))], project, env)
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()
        try:
            spec.start(tmux)
            tmux.wait_for(spec.ready, timeout=90, settle=1)
            relayctl.setup("register", name=AGENT, notify=f"tmux:{tmux.target()}")
            tmux.type_line("Create approved.txt", "Create approved.txt")
            tmux.wait_for(spec.question, timeout=90, settle=1)
            asked = tmux.screen()
            relayctl("send", AGENT, SUBJECT, agent=SENDER)
            time.sleep(HOLD)  # the measure: the question outlives the mail by 10 s
            assert spec.question in tmux.screen(), f"the question is gone:\n{tmux.screen()}\n(it showed:\n{asked})"
            assert not (project / "approved.txt").exists(), "a command was approved that nobody approved"
            assert "trigger held back" in daemon.log()
            assert "session: ASKING the person" in relayctl("status").stdout  # the program's own signal, in status
            assert not any(TRIGGER in r.text for r in model.requests)
            assert not any(_mail_in(r) for r in model.requests)

            tmux.keys(*spec.approve)  # the person approves
            carrying = model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=90)
            assert (project / "approved.txt").exists()
            assert TRIGGER not in carrying.text  # the after-tool hook brought it, not a typed prompt
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []


TRIGGERS = 100  # the measure


def test_a_hundred_triggers_into_an_idle_gemini_cli_all_submit(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    """Gemini CLI takes an Enter that comes within 30 ms of the last key as a newline: relay
    waits for the screen to stand still before Enter, and confirms each submission by the
    prompt hook. Every one of the mails reaches the model by its own trigger; none is left
    standing in the input box."""
    home, project = _relay_for("gemini", relayctl, store_dir, short_tmp)
    tmux = Tmux(short_tmp, "g")
    with ScriptedModel(model_gemini.gemini_responder(lambda body: [model_gemini.text("Noted.")])) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT, **_gemini_configure(home, project, model.url)}
        tmux.start([str(agent_programs.program("gemini"))], project, env)
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()
        try:
            tmux.wait_for("project-level hooks have been detected")
            tmux.wait_for("Type your message", timeout=90, settle=1)
            relayctl.setup("register", name=AGENT, notify=f"tmux:{tmux.target()}")
            for n in range(TRIGGERS):
                subject = f"mail number {n:03d}"
                relayctl.setup("send", agent=SENDER, to=[AGENT], body=subject)
                carrying = model.wait_for(lambda r, s=subject: HOOKED["gemini"].is_turn(r) and s in r.text, timeout=30)
                assert TRIGGER in carrying.text
                wait_for("Gemini back at its prompt", lambda: _state(store_dir) == "idle", timeout=30)
            # Gemini redraws its status line after each turn (once the cursor row read blank
            # while the hooks' toast was drawn), so the empty box is awaited, not sampled.
            try:
                wait_for("the input box empty at the prompt", lambda: "Type your message" in tmux.cursor_line(), timeout=10)
            except AssertionError:
                raise AssertionError(f"something was left in the input box:\n{tmux.screen()}") from None
            turns = [r for r in model.requests if HOOKED["gemini"].is_turn(r)]
            assert len(turns) == TRIGGERS  # one turn per trigger: none stranded, none doubled
            assert not (store_dir / "agents" / AGENT / "trigger-misses").exists()
            assert "did not submit" not in daemon.log()  # each one landed the first time
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []


def _state(store_dir: Path) -> str | None:
    return program_state(store_dir / "agents" / AGENT)


# A stand-in for a program whose Enter sometimes becomes a newline (as Gemini CLI's does
# within its fast-return window): while the file argv[1] is missing, Enter adds a line to
# the input box; once it exists, Enter submits, and the program reports the prompt through
# relay's hook as a hooked program does. Every submitted prompt goes to the file argv[2].
SWALLOWING_PROGRAM = r"""
import json, os, subprocess, sys, tty
submit, received = sys.argv[1], sys.argv[2]
relayctl = os.path.join(os.path.dirname(sys.executable), "relayctl")  # this environment's, whatever PATH says
tty.setraw(0)
box = ""

def hook(event):
    subprocess.run([relayctl, "hook", "claude"], input=json.dumps({"hook_event_name": event, "session_id": "s", "prompt": "p"}),
                   text=True, capture_output=True)

def draw():
    os.write(1, ("\x1b[H\x1b[2J> " + box.replace("\n", "\r\n  ")).encode())

hook("SessionStart")
draw()
while True:
    key = os.read(0, 1).decode()
    if key == "\r" and os.path.exists(submit):
        with open(received, "a") as fh:
            fh.write(box + "\n")
        box = ""
        hook("UserPromptSubmit")
        hook("Stop")
    elif key == "\r":
        box += "\n"
    elif key == "\x7f":
        box = box[:-1]
    else:
        box += key
    draw()
"""


def test_a_trigger_that_does_not_submit_is_removed_retried_and_shown_in_status_and_track(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    relayctl.setup("register", name=SENDER)
    relayctl.setup("register", name=AGENT)
    program, submit, received = short_tmp / "swallow.py", short_tmp / "submit", short_tmp / "received.txt"
    program.write_text(SWALLOWING_PROGRAM)
    received.touch()
    tmux = Tmux(short_tmp, "s")
    tmux.start([sys.executable, str(program), str(submit), str(received)], short_tmp, {**relay_env, "RELAY_AGENT": AGENT, "TERM": "xterm-256color"})
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    try:
        try:
            wait_for("the program at its prompt", lambda: _state(store_dir) == "idle" and tmux.cursor_line() == ">", timeout=30)
        except AssertionError:
            raise AssertionError(f"state {_state(store_dir)!r}, cursor line {tmux.cursor_line()!r}:\n{tmux.screen()}\n{daemon.log()}") from None
        relayctl.setup("register", name=AGENT, notify=f"tmux:{tmux.target()}")
        sent = relayctl("--json", "send", AGENT, SUBJECT, agent=SENDER)
        message_id = json.loads(sent.stdout)["id"]
        wait_for("three triggers that did not submit", lambda: (store_dir / "agents" / AGENT / "trigger-misses").exists()
                 and int((store_dir / "agents" / AGENT / "trigger-misses").read_text()) >= 3, timeout=60)
        # relay keeps retrying (each try types, waits, then clears): what it typed never piles
        # up, and between two tries the box is empty again.
        assert tmux.screen().count(TRIGGER) <= 1, tmux.screen()
        wait_for("the input box cleared of what relay typed", lambda: tmux.screen().strip() == ">", timeout=40)
        assert tmux.screen().count(TRIGGER) <= 1, tmux.screen()
        # The sender learns it from track: relayd writes the failed announcement's receipt right
        # after the miss it counts, so a loaded machine may show the count a moment sooner.
        def tracked() -> str:
            return relayctl("track", message_id, agent=SENDER).stdout

        wait_for("track saying the trigger did not submit", lambda: "did not submit" in tracked(), timeout=30, explain=tracked)
        status = relayctl("status").stdout
        assert "did not submit" in status, status
        assert received.read_text() == ""

        submit.touch()  # the program takes its Enter again: the next retry lands
        wait_for("the trigger submitted", lambda: received.read_text() == TRIGGER + "\n", timeout=30)
        wait_for("the miss count reset", lambda: not (store_dir / "agents" / AGENT / "trigger-misses").exists(), timeout=30)
        wait_for("track saying the trigger landed and the mail was read",
                 lambda: ("announced by tmux" in (t := tracked()) or "announced by hook" in t) and ", read " in t, timeout=30, explain=tracked)
    finally:
        daemon.kill()
        tmux.kill()


TOOL_SECONDS = 6


def _busy_call(name: str, project: Path) -> dict[str, Any]:
    """A command the program runs without asking (allowed below): ./build.sh takes
    TOOL_SECONDS and then writes the time it ended."""
    build = project / "build.sh"
    build.write_text(f"#!/bin/sh\nsleep {TOOL_SECONDS}\n{sys.executable} -c 'import time; print(time.monotonic())' > {project}/tool-ended\n")
    build.chmod(0o755)
    if name == "claude":
        return model_anthropic.tool_use("Bash", {"command": "./build.sh", "description": "Wait for the build"})
    if name == "gemini":
        return model_gemini.function_call("run_shell_command", {"command": "./build.sh", "description": "Wait for the build"})
    if name in ("copilot", "opencode"):
        return model_openai.chat_tool_call("bash", {"command": "./build.sh", "description": "Wait for the build"})
    return model_openai.function_call("exec_command", {"cmd": "./build.sh"})


def _allow_the_busy_command(name: str, home: Path, project: Path) -> list[str]:
    """The person's standing permission for ./build.sh; the program's extra arguments for it."""
    if name == "claude":
        (home / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"defaultMode": "default", "allow": ["Bash(./build.sh)"]}}))
    elif name == "gemini":
        settings = home / ".gemini" / "settings.json"
        settings.write_text(json.dumps({**json.loads(settings.read_text()), "tools": {"allowed": ["run_shell_command(./build.sh)"]}}))
    elif name == "copilot":
        return ["--allow-tool=shell(./build.sh)"]  # Copilot 1.0.102 keeps no such rule in ~/.copilot: its command line only
    elif name == "opencode":
        config = project / "opencode.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "permission": {"bash": {"*": "ask", "./build.sh": "allow"}}}))
    else:
        config = home / ".codex" / "config.toml"
        config.write_text(config.read_text().replace('approval_policy = "on-request"', 'approval_policy = "never"').replace('"read-only"', '"workspace-write"'))
    return []


@pytest.mark.parametrize("name", sorted(ASKING))
def test_read_is_when_the_model_gets_the_mail_not_while_a_tool_still_runs(name: str, relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    """Mail sent while the program runs a tool: no trigger is typed (the program is working),
    the after-tool hook (OpenCode: relay's plugin at `tool.execute.after`) hands the mail over
    with the tool's result, and `send --wait read` returns then: after the tool ended, with
    the model's request that carries it."""
    spec = ASKING[name]
    home, project = _relay_for(name, relayctl, store_dir, short_tmp)
    reply = REPLY[name]
    calls = {"n": 0}
    arrived: dict[int, float] = {}

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        calls["n"] += 1
        return [_busy_call(name, project)] if calls["n"] == 1 else [reply("Done.")]

    answer_turn, answer_aside = spec.responder(turn), spec.responder(lambda body: [reply("ok")])

    def respond(request: Recorded) -> Any:
        arrived[id(request)] = time.monotonic()
        return answer_turn(request) if spec.is_turn(request) else answer_aside(request)

    tmux = Tmux(short_tmp, "b")
    with ScriptedModel(respond) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT, **spec.configure(home, project, model.url)}
        allowed = _allow_the_busy_command(name, home, project)
        tmux.start([str(agent_programs.program(name)), *allowed], project, env)
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()
        try:
            spec.start(tmux)
            tmux.wait_for(spec.ready, timeout=90, settle=1)
            relayctl.setup("register", name=AGENT, notify=_notify(name, tmux))
            tmux.type_line("Wait for the build", "Wait for the build")
            wait_for("the tool to run", lambda: _state(store_dir) == "working" and calls["n"] >= 1, timeout=60)
            time.sleep(1)  # well inside the tool's run
            waited = relayctl("send", AGENT, SUBJECT, "--wait", "read", "--timeout", "90s", agent=SENDER, timeout=120, check=False)
            returned = time.monotonic()
            assert waited.returncode == 0, f"{waited.stderr}\n{tmux.screen()}"
            assert (project / "tool-ended").exists(), tmux.screen()
            carrying = model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=30)
            ended = float((project / "tool-ended").read_text())
            assert returned >= ended, "read was reported while the tool still ran"
            # (the hook hands the mail over and the program then builds its request: on a
            # loaded machine OpenCode took 1.1 s for that, so "well before" is 3 s)
            assert returned >= arrived[id(carrying)] - 3.0, "read was reported well before the model's request carried the mail"
            if name == "opencode":  # read at the model's first streamed step (relayd.programs.opencode): after its request
                assert returned >= arrived[id(carrying)], "read was reported before the model's request carried the mail"
            assert not any(TRIGGER in r.text for r in model.requests)  # nothing typed into a working program
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)


# The edges of a session's life (relayd.arrival.program_state, relayd.arrival.asking,
# relayd.arrival.notify, relayd.inbox.reread):
# * a permission question declined (Esc) runs no hook in Claude Code, Gemini CLI and Copilot
# CLI: mail sent during the question still reaches the model soon after, by the trigger,
# and the question was never answered by relay;
# * mail waiting before Claude Code starts: nothing is typed before its input box is drawn,
# the mail reaches the model, and nothing of relay's is left in the input line;
# * a turn that fails after the hook handed mail over (Claude Code's StopFailure, Gemini CLI's
# AfterAgent with no response text, Copilot CLI's errorOccurred): that mail is unread again;
# * a hook run with bob's name from a process tree that is not bob's program changes nothing.


AUTO_MODE_QUESTION = "Make auto mode your default permission mode?"  # Claude Code 2.1.332, at some first starts
AFTER_DECLINE = 15.0  # seconds from the person's Esc to the model's request carrying the mail


@pytest.mark.parametrize("name", ["claude", "gemini", "copilot"])
def test_mail_sent_during_a_declined_question_reaches_the_model_soon_after_the_decline(name: str, relayctl, relay_env, store_dir: Path,
                                                                                       short_tmp: Path) -> None:
    spec = ASKING[name]
    home, project = _relay_for(name, relayctl, store_dir, short_tmp)
    calls = {"n": 0}
    seen_at: dict[int, float] = {}

    def turn(body: dict[str, Any]) -> list[dict[str, Any]]:
        calls["n"] += 1
        return [spec.command_call(project)] if calls["n"] == 1 else [REPLY[name]("Done.")]

    answer_turn, answer_aside = spec.responder(turn), spec.responder(lambda body: [REPLY[name]("ok")])

    def respond(request):
        seen_at[id(request)] = time.monotonic()
        return answer_turn(request) if spec.is_turn(request) else answer_aside(request)

    tmux = Tmux(short_tmp, "d")
    with ScriptedModel(respond) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT,
               **spec.configure(home, project, model.url)}
        tmux.start([str(agent_programs.program(name))], project, env)
        daemon = Daemon(relay_env).start()  # the default retry interval (5 s)
        try:
            spec.start(tmux)
            tmux.wait_for(spec.ready, timeout=90, settle=1)
            relayctl.setup("register", name=AGENT, notify=f"tmux:{tmux.target()}")
            tmux.type_line("Create approved.txt", "Create approved.txt")
            tmux.wait_for(spec.question, timeout=90, settle=1)
            relayctl("send", AGENT, SUBJECT, agent=SENDER)
            time.sleep(6)  # a person reading the question; the mail is held back meanwhile
            assert spec.question in tmux.screen() and not any(_mail_in(r) for r in model.requests)
            tmux.keys("Escape")  # the person declines
            declined = time.monotonic()
            try:
                carrying = model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=60)
            except AssertionError:
                raise AssertionError(f"the mail never reached the model after the decline:\n{tmux.screen()}\n{daemon.log()[-3000:]}") from None
            took = seen_at[id(carrying)] - declined
            assert took <= AFTER_DECLINE, f"the mail reached the model {took:.1f}s after the decline"
            assert TRIGGER in carrying.text  # by the trigger, typed at the prompt after the decline
            assert not (project / "approved.txt").exists(), "the declined command ran: someone answered the question"
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)


def test_mail_waiting_before_claude_code_starts_reaches_the_model_and_leaves_the_input_line_empty(relayctl, relay_env, store_dir: Path,
                                                                                                   short_tmp: Path) -> None:
    spec = ASKING["claude"]
    home, project = _relay_for("claude", relayctl, store_dir, short_tmp)
    tmux = Tmux(short_tmp, "s")
    with ScriptedModel(lambda r: spec.responder(lambda body: [REPLY["claude"]("Done.")])(r)) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT,
               **spec.configure(home, project, model.url)}
        daemon = Daemon(relay_env).start()
        try:
            # The pane exists and is the agent's before the program in it has drawn anything.
            tmux.start(["sh", "-c", f"sleep 1; exec {agent_programs.program('claude')}"], project, env)
            # as `relayctl up` registers a team's agent: with its program, and its pane
            relayctl.setup("register", name=AGENT, program="claude-code", notify=f"tmux:{tmux.target()}")
            relayctl("send", AGENT, SUBJECT, agent=SENDER)
            # Claude Code may open with its first-start question: relay names it and waits; the
            # person answers it (keeps manual mode), and only then does relay's trigger go in.
            mail_in = lambda: any(spec.is_turn(r) and _mail_in(r) for r in list(model.requests))  # noqa: E731
            wait_for("Claude Code's first-start question or the mail at the model", lambda: AUTO_MODE_QUESTION in tmux.screen() or mail_in(), timeout=90)
            if AUTO_MODE_QUESTION in tmux.screen():
                tmux.wait_for(AUTO_MODE_QUESTION, timeout=10, settle=1)  # drawn whole and taking keys
                assert TRIGGER not in tmux.screen()  # nothing typed into the question
                tmux.keys("Down", "Enter")
                wait_for("the question answered", lambda: AUTO_MODE_QUESTION not in tmux.screen(), timeout=20)
            try:
                model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=90)
            except AssertionError:
                told = (store_dir / "delivery.jsonl").read_text() if (store_dir / "delivery.jsonl").exists() else ""
                state = (store_dir / "agents" / AGENT / "program-state").read_text() if (store_dir / "agents" / AGENT / "program-state").exists() else ""
                raise AssertionError(f"the mail never reached the model:\n{tmux.screen()}\n{daemon.log()[-3000:]}\ndelivery log:\n{told[-3000:]}\nstate: {state}") from None
            wait_for("Claude Code back at its prompt", lambda: _state(store_dir) == "idle", timeout=60)
            try:
                wait_for("an empty input line", lambda: tmux.cursor_line() in ("❯", ">"), timeout=10)
            except AssertionError:
                raise AssertionError(f"something was left in the input line:\n{tmux.screen()}") from None
            assert TRIGGER not in tmux.cursor_line()
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []


def test_a_claude_code_turn_that_fails_after_the_hook_handed_mail_over_leaves_that_mail_unread(relayctl, relay_env, store_dir: Path,
                                                                                               short_tmp: Path) -> None:
    """The model call fails (the API refuses the request, as it refuses one not logged in):
    Claude Code runs StopFailure, and the mail its prompt hook handed over is unread again."""
    spec = ASKING["claude"]
    home, project = _relay_for("claude", relayctl, store_dir, short_tmp)
    refused = {"on": False}
    answer = spec.responder(lambda body: [REPLY["claude"]("Done.")])

    def respond(request):
        if refused["on"] and spec.is_turn(request):
            # (a 401 Claude Code retries ten times over minutes; a refused request it does not retry)
            return Reply.json({"type": "error", "error": {"type": "invalid_request_error", "message": "refused for this test"}}, status=400)
        return answer(request)

    tmux = Tmux(short_tmp, "f")
    with ScriptedModel(respond) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT,
               **spec.configure(home, project, model.url)}
        tmux.start([str(agent_programs.program("claude"))], project, env)
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()  # (retry rounds every second: the check below spans three)
        try:
            tmux.wait_for(spec.ready, timeout=90, settle=1)
            if AUTO_MODE_QUESTION in tmux.screen():
                tmux.keys("Down", "Enter")  # the person keeps manual mode
                wait_for("the question answered", lambda: AUTO_MODE_QUESTION not in tmux.screen(), timeout=20)
                tmux.wait_for(spec.ready, timeout=30, settle=1)
            relayctl.setup("register", name=AGENT, notify=f"tmux:{tmux.target()}")
            refused["on"] = True
            relayctl("send", AGENT, SUBJECT, agent=SENDER)
            try:
                model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=60)  # handed over: in the refused request
            except AssertionError:
                raise AssertionError(f"the mail never reached the model:\n{tmux.screen()}\n{daemon.log()[-3000:]}") from None
            try:
                wait_for("the mail unread again", lambda: [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECT],
                         timeout=30)
            except AssertionError:
                state = (store_dir / "agents" / AGENT / "program-state").read_text()
                raise AssertionError(f"the failed turn's mail stayed read; state {state}\n{tmux.screen()}") from None
            tried = sum(1 for r in model.requests if spec.is_turn(r) and _mail_in(r))  # (Claude Code retries a refused call itself)
            time.sleep(3)  # past retry rounds: no trigger starts the failing turn again
            assert sum(1 for r in model.requests if spec.is_turn(r) and _mail_in(r)) == tried
            assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECT]
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)


# The model's refusal in each program's API (a 400, which none of them retries).
REFUSED = {
    "gemini": lambda: Reply.json({"error": {"code": 400, "message": "refused for this test", "status": "INVALID_ARGUMENT"}}, status=400),
    "copilot": lambda: Reply.json({"error": {"message": "refused for this test", "type": "invalid_request_error"}}, status=400),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_turn_whose_model_call_fails_after_the_hook_handed_mail_over_leaves_that_mail_unread(name: str, relayctl, relay_env, store_dir: Path,
                                                                                            short_tmp: Path) -> None:
    """The trigger starts a turn, the prompt hook hands the mail over, the model refuses the
    call: the program's own evidence of the failure (Gemini CLI's AfterAgent with no response
    text, Copilot CLI's errorOccurred for a model call; relayd.programs) puts the mail back as
    unread, the sender's `track` says the turn failed, and no trigger starts it again."""
    spec = ASKING[name]
    home, project = _relay_for(name, relayctl, store_dir, short_tmp)
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}, "delivery": {"held_after": "1s"}}))
    refused = {"on": False}
    answer = spec.responder(lambda body: [REPLY[name]("Done.")])

    def respond(request):
        return REFUSED[name]() if refused["on"] and spec.is_turn(request) else answer(request)

    tmux = Tmux(short_tmp, "r")
    with ScriptedModel(respond) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT,
               **spec.configure(home, project, model.url)}
        tmux.start([str(agent_programs.program(name))], project, env)
        daemon = Daemon(relay_env, "--retry-interval", "1s").start()  # (retry rounds every second: the check below spans three)
        try:
            spec.start(tmux)
            tmux.wait_for(spec.ready, timeout=90, settle=1)
            relayctl.setup("register", name=AGENT, notify=_notify(name, tmux))
            refused["on"] = True
            message_id = json.loads(relayctl("--json", "send", AGENT, SUBJECT, agent=SENDER).stdout)["id"]
            try:
                model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=60)  # handed over: in the refused request
            except AssertionError:
                raise AssertionError(f"the mail never reached the model:\n{tmux.screen()}\n{daemon.log()[-3000:]}") from None
            unread = lambda: [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)]  # noqa: E731
            try:
                wait_for("the mail unread again", lambda: unread() == [SUBJECT], timeout=30)
            except AssertionError:
                state = (store_dir / "agents" / AGENT / "program-state").read_text()
                raise AssertionError(f"the failed turn's mail stayed read; state {state}\n{tmux.screen()}") from None
            wait_for("the sender told why", lambda: "last turn failed" in relayctl("track", message_id, agent=SENDER).stdout, timeout=15)
            tried = sum(1 for r in model.requests if spec.is_turn(r) and _mail_in(r))
            time.sleep(3)  # past retry rounds: no trigger starts the failing turn again
            assert sum(1 for r in model.requests if spec.is_turn(r) and _mail_in(r)) == tried
            assert unread() == [SUBJECT]
        finally:
            daemon.kill()
            tmux.kill()
            kill_strays(home)


# A stand-in for an agent program: it runs relay's hook as programs do (a child, through a
# shell), once per line it reads: the line is the hook event's name.
HOOK_RUNNER = r"""
import json, os, subprocess, sys
relayctl = os.path.join(os.path.dirname(sys.executable), "relayctl")
n = 0
while True:
    try:
        name = input("> ").strip()
    except EOFError:
        break
    done = subprocess.run(["sh", "-c", f"{relayctl} hook claude; echo status $?"], input=json.dumps({"hook_event_name": name, "session_id": "s"}),
                          capture_output=True, text=True)
    n += 1
    print(f"RESULT-{n}", done.stdout.strip() or "-", done.stderr.strip().replace(chr(10), " ") or "-", flush=True)
"""


def test_a_hook_run_with_bobs_name_outside_bobs_program_changes_nothing(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    """Another session of the same user (another pane, its own program) runs bob's hook command
    with bob's name: bob's state stays as bob's program reported it, and bob's mail stays unread."""
    runner = short_tmp / "runner.py"
    runner.write_text(HOOK_RUNNER)
    relayctl.setup("init")
    relayctl.setup("register", name=SENDER)
    env = {"PATH": os.environ["PATH"], "HOME": str(short_tmp), "LANG": "C.UTF-8", "RELAY_DIR": relay_env["RELAY_DIR"],
           "RELAY_SOCKET": relay_env["RELAY_SOCKET"]}
    bob, other = Tmux(short_tmp, "bob"), Tmux(short_tmp, "alice")
    daemon = Daemon(relay_env).start()
    try:
        bob.start([sys.executable, str(runner)], short_tmp, {**env, "RELAY_AGENT": AGENT})
        other.start([sys.executable, str(runner)], short_tmp, {**env, "RELAY_AGENT": AGENT})  # bob's name, not bob's pane
        bob.wait_for(">")
        other.wait_for(">")
        relayctl.setup("register", name=AGENT, notify=f"tmux:{bob.target()}")
        bob.type_line("PermissionRequest", "PermissionRequest")
        assert "status 0" in bob.wait_for("RESULT-1")
        assert _state(store_dir) == "asking"
        relayctl("send", AGENT, SUBJECT, agent=SENDER)

        other.type_line("Stop", "Stop")
        other.wait_for("RESULT-1")
        other.type_line("UserPromptSubmit", "UserPromptSubmit")
        assert other.wait_for("RESULT-2").count("not inferno's program") == 2, other.screen()
        assert _state(store_dir) == "asking"  # bob's program still asks its person
        assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECT]
        # Nor from outside any pane: the test's own process.
        forged = subprocess.run([str(Path(sys.executable).parent / "relayctl"), "hook", "claude"], input=json.dumps({"hook_event_name": "Stop"}),
                                capture_output=True, text=True, env={**env, "RELAY_AGENT": AGENT})
        assert forged.returncode == 1 and "not inferno's program" in forged.stderr and forged.stdout == ""
        assert _state(store_dir) == "asking"
        assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECT]
        bob.type_line("UserPromptSubmit", "UserPromptSubmit")
        assert "relay: 1 new message" in bob.wait_for("RESULT-2")  # bob's own program: the mail is its
        assert _state(store_dir) == "working"
    finally:
        daemon.kill()
        other.kill()  # (its pane first: the last kill ends the server both share)
        bob.kill()
