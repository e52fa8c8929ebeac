"""OpenCode with relay's plugin, installed by `relayctl hooks install --for opencode`: mail reaches the model.

The real program (tests/agents, pinned) runs against the scripted model; see hook_sessions.py
for the scenarios. `opencode run` ends at its session's first idle, so the one-shot run has
no continuation: the mail waiting then must stay unread rather than count as read.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from support import agent_programs, model_openai
from support.hook_sessions import AGENT, PROGRAMS, SENDER, SUBJECTS, program_state, run_scenario
from support.scripted_model import Reply, ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.real_program]  # real agent programs in tmux: not in the quick loop


def _start_opencode(tmux: Tmux, project: Path, home: Path, model_url: str, config: dict | None = None) -> None:
    """OpenCode in the tmux pane, on the scripted model, as `up` starts an agent's session (RELAY_AGENT set)."""
    agent_programs.opencode_config(project, model_url, config)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": AGENT,
           **agent_programs.opencode_env(project, home)}
    tmux.start([str(agent_programs.program("opencode"))], project, env)


def test_one_shot_mail_reaches_the_model_at_the_prompt_and_after_the_tool_and_the_rest_stays_unread(relayctl, short_tmp: Path) -> None:
    session = run_scenario(PROGRAMS["opencode"], relayctl, short_tmp)
    assert session.returncode == 0, session.stderr[-2000:]
    texts = [r.text for r in session.turns]
    assert len(texts) == 2, session.stderr[-2000:]
    first, after_tool = texts
    assert SUBJECTS[0] in first  # chat.message: with the prompt
    assert SUBJECTS[1] not in first and SUBJECTS[1] in after_tool  # tool.execute.after: with the tool's output
    assert after_tool.count(SUBJECTS[0]) == first.count(SUBJECTS[0])  # handed over once
    assert session.unread == [SUBJECTS[2]]  # came during the last request: `opencode run` exits at idle, so it waits


@pytest.mark.timeout(300)
def test_mail_to_an_idle_interactive_session_starts_a_turn_that_carries_it(relayctl, daemon, store_dir: Path, short_tmp: Path) -> None:
    """`opencode` in tmux with relayd running: mail sent before it started starts a turn once
    it is up, with no prompt of the person's (an agent started by `up` does not sit idle with
    mail waiting); once the session sits idle (the plugin recorded it so), mail sent then
    starts a new turn by itself, within 10 s, with nothing typed into the pane, and is read once."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "opencode", "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    agent = store_dir / "agents" / AGENT
    tmux = Tmux(short_tmp)
    with ScriptedModel(model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))) as model:
        _start_opencode(tmux, project, home, model.url)
        try:
            # (no prompt of the test's: the plugin's own prompt, relay's hand-over, carries it)
            first = model.wait_for(lambda r: PROGRAMS["opencode"].is_turn(r) and SUBJECTS[0] in r.text, timeout=90)
            assert f"1 new message for {AGENT}" in first.text
            # (OpenCode's first turn also snapshots the project and asks the model for a title:
            # on a loaded machine its end can take a while after the request)
            wait_for("the session at rest", lambda: program_state(agent) == "idle", timeout=120,
                     explain=lambda: f"program-state: {program_state(agent)}; model requests: {len(model.requests)}\n{tmux.screen()}")
            screen = tmux.screen()
            relayctl("send", AGENT, SUBJECTS[1], agent=SENDER)
            second = model.wait_for(lambda r: PROGRAMS["opencode"].is_turn(r) and SUBJECTS[1] in r.text, timeout=10)
            assert second.text.count(SUBJECTS[1]) == 1
            assert SUBJECTS[0] in screen  # the session relay's turn ran in is the one shown
            # read once the model's answer began (after its request): a moment after the request
            wait_for("the mail read", lambda: json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == [], timeout=30)
        finally:
            tmux.kill()
            kill_strays(home)


_SLOW_STEP = """#!/bin/sh
# relayctl, whose report of a turn's first step (message.part.updated) ends 5 s late, as one
# may on a loaded machine: the turn's end comes meanwhile
case " $* " in *" hook opencode "*) ;; *) exec {real} "$@" ;; esac
input=$(cat)
case "$input" in
  *'"message.part.updated"'*) sleep 5; printf '%s' "$input" | {real} "$@"; status=$?; touch {done}; exit $status ;;
esac
printf '%s' "$input" | exec {real} "$@"
"""


@pytest.mark.timeout(300)
def test_a_late_report_of_the_turns_first_step_does_not_leave_the_resting_session_working(relayctl, daemon, store_dir: Path,
                                                                                        short_tmp: Path) -> None:
    """OpenCode calls the plugin's handlers without waiting for the one before: the report of
    the turn's first step ("working") may still run when the turn's end ("idle") is reported.
    The plugin reports in OpenCode's order: the mail is read before the turn's end is asked
    about it (asked first, the end found it unread and started turns for it again, one after
    another), and the session at its prompt reads as idle, not as the "working" of a report
    that ended last (relayd's trigger would tell it of no mail, `status` would show it busy)."""
    home, project = _project(relayctl, short_tmp)
    plugin = project / ".opencode" / "plugin" / "relay.js"
    marker = re.search(r"^const RELAYCTL = (\[.*\])$", plugin.read_text(), re.MULTILINE)
    assert marker is not None
    argv = json.loads(marker.group(1))
    wrapper, done = short_tmp / "slow-relayctl", short_tmp / "step-reported"
    wrapper.write_text(_SLOW_STEP.format(real=shlex.quote(argv[0]), done=shlex.quote(str(done))))
    wrapper.chmod(0o755)
    plugin.write_text(plugin.read_text().replace(marker.group(1), json.dumps([str(wrapper), *argv[1:]])))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    agent = store_dir / "agents" / AGENT
    tmux = Tmux(short_tmp)
    with ScriptedModel(model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))) as model:
        _start_opencode(tmux, project, home, model.url)
        try:
            # the mail waited for OpenCode: the plugin starts a turn for it once it is up
            model.wait_for(lambda r: PROGRAMS["opencode"].is_turn(r) and SUBJECTS[0] in r.text, timeout=90)
            wait_for("the late report of the first step", done.exists, timeout=60)
            wait_for("the session at rest", lambda: program_state(agent) == "idle", timeout=120,
                     explain=lambda: f"program-state: {(agent / 'program-state').read_text()}\n{tmux.screen()}")
            assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []  # the step's "read" counted
            # Reported out of order, the turn's end found the mail still unread and started a
            # turn for it again, and again, until the late report said it was read.
            carrying = [r for r in model.requests if PROGRAMS["opencode"].is_turn(r) and SUBJECTS[0] in r.text]
            assert len(carrying) == 1, f"{len(carrying)} turns carried the mail"
        finally:
            tmux.kill()
            kill_strays(home)


def test_mail_while_a_permission_question_is_open_starts_no_turn_and_comes_with_the_tools_output(relayctl, daemon, store_dir: Path, short_tmp: Path) -> None:
    """The model asks to run a command OpenCode must ask the person about (`permission`
    bash = "ask"); mail arrives while the question is open. For 10 s no turn starts and the
    question stays; once the person allows it, the mail comes with the command's output."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "opencode", "--agent", AGENT, "--project", str(project))
    agent = store_dir / "agents" / AGENT
    is_turn = PROGRAMS["opencode"].is_turn

    def turn(body: dict) -> dict:
        if any(m.get("role") == "tool" for m in body.get("messages", [])):
            return model_openai.chat_text("ran it")
        return model_openai.chat_tool_call("bash", {"command": "echo release-check", "description": "Check the release"})

    tmux = Tmux(short_tmp)
    with ScriptedModel(model_openai.chat_responder(turn)) as model:
        _start_opencode(tmux, project, home, model.url, {"permission": {"bash": "ask"}})
        try:
            tmux.wait_for("Ask anything", settle=1)
            tmux.type_line("Check the release.", "Check the release.")
            tmux.wait_for("Allow once")
            wait_for("the question recorded", lambda: program_state(agent) == "asking", timeout=20)
            turns = len([r for r in model.requests if is_turn(r)])
            relayctl("send", AGENT, SUBJECTS[1], agent=SENDER)
            with pytest.raises(AssertionError, match="no request to the scripted model matched"):
                model.wait_for(lambda r: is_turn(r) and SUBJECTS[1] in r.text, timeout=10)  # the hold: 10 s
            assert "Allow once" in tmux.screen() and len([r for r in model.requests if is_turn(r)]) == turns
            tmux.keys("Enter")  # "Allow once", preselected
            after = model.wait_for(lambda r: is_turn(r) and SUBJECTS[1] in r.text, timeout=60)
            assert "release-check" in after.text and after.text.count(SUBJECTS[1]) == 1
            wait_for("the mail read", lambda: json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == [], timeout=30)
        finally:
            tmux.kill()
            kill_strays(home)


def _receipts(store_dir: Path, step: str) -> list[dict]:
    log = store_dir / "delivery.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [r for r in map(json.loads, lines) if r.get("step") == step and r.get("to") == AGENT]


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _project(relayctl, short_tmp: Path) -> tuple[Path, Path]:
    """A scratch HOME and project with relay's plugin installed for the agent: (home, project)."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl("register", AGENT, "--notify", "hook")
    relayctl("hooks", "install", "--for", "opencode", "--agent", AGENT, "--project", str(project))
    return home, project


def test_the_read_receipt_comes_no_earlier_than_the_model_request_that_carries_the_mail(relayctl, daemon, store_dir: Path,
                                                                                        short_tmp: Path) -> None:
    """OpenCode runs its chat.message hook a second or more before its model request: the
    mail handed over there counts as read (the receipt `track` and `send --wait read` show)
    only once that request went out, at the model's first streamed step."""
    home, project = _project(relayctl, short_tmp)
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    is_turn = PROGRAMS["opencode"].is_turn
    asked_at: list[tuple[float, str]] = []  # (wall time, text) of each turn's request, as the model got it
    answer = model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))

    def respond(request):
        if is_turn(request):
            asked_at.append((time.time(), request.text))
        return answer(request)

    tmux = Tmux(short_tmp)
    with ScriptedModel(respond) as model:
        _start_opencode(tmux, project, home, model.url)
        try:
            # the mail waited for OpenCode: the plugin starts a turn for it once it is up
            model.wait_for(lambda r: is_turn(r) and SUBJECTS[0] in r.text, timeout=90)
            wait_for("the read receipt", lambda: _receipts(store_dir, "read"), timeout=30)
        finally:
            tmux.kill()
            kill_strays(home)
    carried = min(at for at, text in asked_at if SUBJECTS[0] in text)
    read = _at(_receipts(store_dir, "read")[0]["ts"])
    # the receipt's time has milliseconds: compare at that precision
    assert read >= datetime.fromtimestamp(int(carried * 1000) / 1000, timezone.utc), (read, carried)
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []


def test_a_turn_whose_model_call_fails_leaves_its_mail_unread_and_the_sender_told_why(relayctl, daemon, store_dir: Path,
                                                                                      short_tmp: Path) -> None:
    """The model's answer to the request that carries the mail to an idle session breaks off
    with an error (OpenCode reports session.error): the mail is unread again, relay starts no
    turn for it again meanwhile, the sender's `track` says the turn failed, and the person's
    next prompt brings it to the model."""
    home, project = _project(relayctl, short_tmp)
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"held_after": "1s"}}))
    is_turn = PROGRAMS["opencode"].is_turn
    failing = {"on": True}
    answer = model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))

    def respond(request):
        if failing["on"] and is_turn(request) and SUBJECTS[0] in request.text:
            # the answer begins (a step starts), then breaks off with the provider's error
            return Reply(200, "text/event-stream", [b'data: {"error": {"message": "refused for this test", "type": "invalid_request_error"}}\n\n'])
        return answer(request)

    tmux = Tmux(short_tmp)
    with ScriptedModel(respond) as model:
        _start_opencode(tmux, project, home, model.url)
        try:
            tmux.wait_for("Ask anything", timeout=90, settle=1)
            # mail to the idle program: relay's plugin starts a turn for it
            message_id = json.loads(relayctl("--json", "send", AGENT, SUBJECTS[0], agent=SENDER).stdout)["id"]
            model.wait_for(lambda r: is_turn(r) and SUBJECTS[0] in r.text, timeout=60)
            unread = lambda: [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)]  # noqa: E731
            try:
                wait_for("the failed turn's mail unread", lambda: unread() == [SUBJECTS[0]] and (store_dir / "agents" / AGENT / "held").exists(),
                         timeout=30)
            except AssertionError:
                raise AssertionError(f"unread {unread()}; state {program_state(store_dir / 'agents' / AGENT)}\n{tmux.screen()}") from None
            tried = sum(1 for r in model.requests if is_turn(r) and SUBJECTS[0] in r.text)
            try:
                wait_for("the sender told why", lambda: "last turn failed" in relayctl("track", message_id, agent=SENDER).stdout, timeout=15)
            except AssertionError:
                raise AssertionError(relayctl("track", message_id, agent=SENDER).stdout + (store_dir / "delivery.jsonl").read_text()) from None
            time.sleep(5)  # a while: relay starts no turn that would fail the same way
            assert sum(1 for r in model.requests if is_turn(r) and SUBJECTS[0] in r.text) == tried
            assert unread() == [SUBJECTS[0]]
            failing["on"] = False
            tmux.type_line("Try again.", "Try again.")
            model.wait_for(lambda r: is_turn(r) and "Try again." in r.text and SUBJECTS[0] in r.text, timeout=60)
            wait_for("the mail read", lambda: unread() == [], timeout=30)
        finally:
            tmux.kill()
            kill_strays(home)


@pytest.mark.timeout(300)
def test_a_turn_the_person_stops_before_the_model_answers_is_not_started_again_and_its_mail_comes_with_their_next_prompt(
        relayctl, daemon, store_dir: Path, short_tmp: Path) -> None:
    """Mail to the idle session starts a turn; the person stops it (Esc) before the model's
    answer begins, so the model never saw the mail. relay starts no turn for it again (that
    would undo the person's stop: the plugin did so at once, twice), the session reads as at
    rest, the mail stays unread, its sender's `track` says the person stopped the turn, and
    the person's next prompt carries it."""
    home, project = _project(relayctl, short_tmp)
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"held_after": "1s"}}))
    is_turn = PROGRAMS["opencode"].is_turn
    answer = model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))
    stop = threading.Event()

    def silent(request):
        stop.wait(60)  # no answer begins before the person stops the turn
        yield b""

    def respond(request):
        if is_turn(request) and SUBJECTS[0] in request.text and "Carry on" not in request.text:
            return Reply(200, "text/event-stream", silent(request))
        return answer(request)

    agent = store_dir / "agents" / AGENT
    unread = lambda: [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)]  # noqa: E731
    tmux = Tmux(short_tmp)
    with ScriptedModel(respond) as model:
        _start_opencode(tmux, project, home, model.url)
        try:
            tmux.wait_for("Ask anything", timeout=90, settle=1)
            # to the idle program: the plugin starts a turn
            message_id = json.loads(relayctl("--json", "send", AGENT, SUBJECTS[0], agent=SENDER).stdout)["id"]
            first = model.wait_for(lambda r: is_turn(r) and SUBJECTS[0] in r.text, timeout=60)
            for _ in range(2):  # OpenCode stops a turn at a second Esc
                tmux.keys("Escape")
                time.sleep(0.3)
            tmux.wait_for("interrupted", timeout=30)
            wait_for("the session at rest", lambda: program_state(agent) == "idle", timeout=30,
                     explain=lambda: f"program-state: {program_state(agent)}\n{tmux.screen()}")
            with pytest.raises(AssertionError, match="no request to the scripted model matched"):
                model.wait_for(lambda r: is_turn(r) and SUBJECTS[0] in r.text and r is not first, timeout=10)
            assert len([r for r in model.requests if is_turn(r) and SUBJECTS[0] in r.text]) == 1
            assert unread() == [SUBJECTS[0]]
            track = lambda: relayctl("track", message_id, agent=SENDER).stdout  # noqa: E731
            wait_for("the sender told why", lambda: f"{AGENT}'s person stopped the turn" in track(), timeout=15, explain=track)
            assert "next prompt" in track()
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            model.wait_for(lambda r: is_turn(r) and "Carry on with the release work." in r.text, timeout=60)
            # read only by being handed over again, with that prompt, and its answer begun
            wait_for("the mail read", lambda: unread() == [], timeout=30)
            # the reason is gone with the wait (the read comes first, then the report that clears it)
            wait_for("the reason gone", lambda: not (agent / "held").exists(), timeout=15,
                     explain=lambda: (agent / "held").read_text() if (agent / "held").exists() else "")
        finally:
            stop.set()
            tmux.kill()
            kill_strays(home)


def test_a_session_without_an_agent_name_shows_relays_line_once_and_the_mail_stays_unread(relayctl, store_dir: Path, short_tmp: Path) -> None:
    """A person's own OpenCode (no RELAY_AGENT) in a project with relay's plugin: at its
    session's start the plugin shows relay's line on how to start it as an agent (a toast in
    OpenCode's TUI), and hands nothing over."""
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl.setup("init", preset="overlord")
    relayctl("hooks", "install", "--for", "opencode", "--project", str(project))
    relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)
    is_turn = PROGRAMS["opencode"].is_turn
    tmux = Tmux(short_tmp)
    with ScriptedModel(model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))) as model:
        agent_programs.opencode_config(project, model.url)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_DIR": str(store_dir),
               **agent_programs.opencode_env(project, home)}
        tmux.start([str(agent_programs.program("opencode"))], project, env)
        try:
            tmux.wait_for("Ask anything", timeout=90, settle=1)
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            first = model.wait_for(lambda r: is_turn(r) and "Carry on with the release work." in r.text, timeout=60)
            try:
                screen = wait_for("relay's line", lambda: (lambda s: s if "has no agent name" in s else "")(" ".join(tmux.screen().split())), timeout=20)
            except AssertionError:
                raise AssertionError(tmux.screen()) from None
            assert "RELAY_AGENT=NAME" in screen and screen.count("has no agent name") == 1
            assert SUBJECTS[0] not in first.text
        finally:
            tmux.kill()
            kill_strays(home)
    assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECTS[0]]


def test_a_turn_the_person_stops_is_no_failed_call_and_its_mail_stays_read(relayctl, daemon, store_dir: Path, short_tmp: Path) -> None:
    """The model's answer to the request carrying the mail (in the turn relay's plugin started
    for it) is still coming when the person stops the turn (Esc): OpenCode reports the abort as session.error, which is no failed
    model call: the mail stays read, and no failure is named to its sender."""
    home, project = _project(relayctl, short_tmp)
    is_turn = PROGRAMS["opencode"].is_turn
    answer = model_openai.chat_responder(lambda body: model_openai.chat_text("on it"))
    stop = threading.Event()

    def slow(request):
        # an answer that begins (a step starts) and then takes its time, until the test ends
        yield b'data: {"id": "chatcmpl-slow", "object": "chat.completion.chunk", "created": 1, "model": "scripted-model", ' \
              b'"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Thinking"}, "finish_reason": null}]}\n\n'
        stop.wait(60)

    def respond(request):
        if is_turn(request) and SUBJECTS[0] in request.text:
            return Reply(200, "text/event-stream", slow(request))
        return answer(request)

    tmux = Tmux(short_tmp)
    with ScriptedModel(respond) as model:
        _start_opencode(tmux, project, home, model.url)
        try:
            tmux.wait_for("Ask anything", timeout=90, settle=1)
            relayctl("send", AGENT, SUBJECTS[0], agent=SENDER)  # to the idle program: the plugin starts a turn
            model.wait_for(lambda r: is_turn(r) and SUBJECTS[0] in r.text, timeout=60)
            unread = lambda: json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)  # noqa: E731
            wait_for("the mail read at the model's first step", lambda: unread() == [], timeout=30)
            tmux.wait_for("Thinking", timeout=30)
            for _ in range(2):  # OpenCode stops a turn at a second Esc
                tmux.keys("Escape")
                time.sleep(0.3)
            wait_for("the turn stopped", lambda: program_state(store_dir / "agents" / AGENT) == "idle", timeout=30)
            time.sleep(2)  # the plugin's report of the abort has come and gone
            assert unread() == []
            assert not (store_dir / "agents" / AGENT / "held").exists()
        finally:
            stop.set()
            tmux.kill()
            kill_strays(home)
