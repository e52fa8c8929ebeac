"""The edges of a session's life, with the real programs in real tmux (relayd.arrival.program_state,
relayd.arrival.asking, relayd.arrival.notify, relayd.inbox.reread):

* a permission question declined (Esc) runs no hook in Claude Code, Gemini CLI and Copilot
  CLI: mail sent during the question still reaches the model soon after, by the trigger,
  and the question was never answered by relay;
* mail waiting before Claude Code starts: nothing is typed before its input box is drawn,
  the mail reaches the model, and nothing of relay's is left in the input line;
* a turn that fails after the hook handed mail over (Claude Code's StopFailure): that mail
  is unread again;
* a hook run with bob's name from a process tree that is not bob's program changes nothing.

The programs run as in test_safe_delivery.py: relay's hooks installed as `relayctl hooks
install` writes them, RELAY_AGENT set as `up` sets it, relayd running with its default
retry interval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support import agent_programs
from support.relayd_proc import Daemon
from support.scripted_model import Reply, ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for
from test_safe_delivery import AGENT, ASKING, REPLY, SENDER, SUBJECT, TRIGGER, _mail_in, _relay_for, _state

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

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
            relayctl.setup("register", name=AGENT, notify=f"tmux:{tmux.target()}")
            relayctl("send", AGENT, SUBJECT, agent=SENDER)
            try:
                model.wait_for(lambda r: spec.is_turn(r) and _mail_in(r), timeout=90)
            except AssertionError:
                raise AssertionError(f"the mail never reached the model:\n{tmux.screen()}\n{daemon.log()[-3000:]}") from None
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
        daemon = Daemon(relay_env).start()
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
            time.sleep(7)  # past a retry round: no trigger starts the failing turn again
            assert sum(1 for r in model.requests if spec.is_turn(r) and _mail_in(r)) == tried
            assert [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)] == [SUBJECT]
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
