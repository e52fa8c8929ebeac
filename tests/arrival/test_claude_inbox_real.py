"""relay's mail through Claude Code's own inbox, in the real Claude Code, in real tmux.

Claude Code 2.1.332 (tests/agents) runs interactively against the scripted model server,
with relay's hooks installed as `relayctl hooks install` writes them and RELAY_AGENT set as
`relayctl up` sets it. The agent's notify target is its pane, but the session reports its
cross-session inbox through the hooks, and relayd writes the mail there: no keystroke.
"""

from __future__ import annotations

from contextlib import contextmanager

import json
import os
import time
from pathlib import Path

import pytest

from support.agent_programs import claude_signed_in, program
from support.model_anthropic import conversation, messages_responder, text, texts, tool_use
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from relayd.arrival.for_models import HEADER
from support.waiting import wait_for

AUTO_MODE_QUESTION = "Make auto mode your default permission mode?"  # Claude Code 2.1.332, at some first starts
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.real_program]

API_KEY = "sk-ant-relay-test-00000000000000000000"
TRIGGER = "relay-test: new mail, call check_inbox"
AGENT, SENDER = "inferno", "strategist"
PEER_NOTICE = "Another Claude session sent a message"  # how Claude Code 2.1.332 opens a peer message


def _user_texts(request) -> list[str]:
    return [t for m in conversation(request.json() or {}) if m.get("role") == "user" for t in texts(m.get("content"))]


def _peer_turn(model: ScriptedModel, subject: str):
    """The first model request with relay's mail for `subject` as a peer message."""
    return next((r for r in model.requests if any(_is_peer(t, subject) for t in _user_texts(r))), None)


def _is_peer(text: str, subject: str) -> bool:
    return text.startswith(PEER_NOTICE) and f"subject: {subject}" in text


class Session:
    """A Claude Code session for AGENT in tmux, with relay's hooks, against a scripted model."""

    def __init__(self, relayctl, relay_env: dict[str, str], root: Path, turn=lambda body: [text("Noted.")], settings: dict | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.root, self.relayctl = root, relayctl
        self.project, self.home, self.run = root / "project", root / "home", root / "run"
        self.project.mkdir()
        self.run.mkdir(mode=0o700)
        claude_signed_in(self.home, API_KEY, trusted=self.project)
        if settings is not None:
            (self.home / ".claude").mkdir(parents=True, exist_ok=True)
            (self.home / ".claude" / "settings.json").write_text(json.dumps(settings))
        self.tmux = Tmux(root, "c")
        self.model = ScriptedModel(messages_responder(turn))
        self.env = {k: v for k, v in relay_env.items() if not k.startswith("TMUX")}
        self.env.update({"HOME": str(self.home), "ANTHROPIC_API_KEY": API_KEY, "DISABLE_AUTOUPDATER": "1",
                         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "XDG_RUNTIME_DIR": str(self.run),
                         "RELAY_AGENT": AGENT, "TERM": "xterm-256color", "LANG": "C.UTF-8", **(extra_env or {})})
        self.agent_dir = Path(relay_env["RELAY_DIR"]) / "agents" / AGENT

    def __enter__(self) -> "Session":
        self.model.__enter__()
        self.env["ANTHROPIC_BASE_URL"] = self.model.url
        self.relayctl("hooks", "install", "--for", "claude", "--agent", AGENT, "--project", str(self.project))
        return self

    def start(self, notify: str | None = "pane") -> None:
        # The agent exists before its program starts, as `up` makes it: a SessionStart hook
        # that ran before the register would report for an agent relay does not know.
        self.relayctl("register", AGENT)
        self.tmux.start([str(program("claude"))], self.project, self.env, size=(120, 40))
        self.relayctl("register", AGENT, "--notify", f"tmux:{self.tmux.target()}" if notify == "pane" else notify)
        try:
            wait_for("Claude Code's empty prompt or its first-start question",
                     lambda: self.tmux.cursor_line() == "❯" or AUTO_MODE_QUESTION in self.tmux.screen(), timeout=90)
            if AUTO_MODE_QUESTION in self.tmux.screen():  # at some first starts: the person keeps manual mode
                self.tmux.wait_for(AUTO_MODE_QUESTION, timeout=10, settle=1)
                self.tmux.keys("Down", "Enter")
            wait_for("Claude Code's empty prompt", lambda: self.tmux.cursor_line() == "❯" and AUTO_MODE_QUESTION not in self.tmux.screen(), timeout=30)
        except AssertionError as missed:
            raise AssertionError(f"{missed}; the screen:\n{self.tmux.screen()}") from None

    def door(self) -> dict | None:
        path = self.agent_dir / "claude-inbox"
        return json.loads(path.read_text()) if path.exists() else None

    def __exit__(self, *exc) -> None:
        self.tmux.kill()
        kill_strays(self.home)
        self.model.__exit__(*exc)


@pytest.fixture
def team(relayctl):
    relayctl("init")
    relayctl("register", SENDER)
    return relayctl


@contextmanager
def ended(daemon):
    try:
        yield daemon
    finally:
        daemon.kill()


def _status_of(relayctl, name: str) -> dict:
    return next(a for a in json.loads(relayctl("--json", "status").stdout)["agents"] if a["name"] == name)


def test_idle_mail_reaches_the_model_through_the_inbox_and_nothing_is_typed(team, relay_env, store_dir: Path, short_tmp: Path) -> None:
    # Each mail through the door, one after another: no interrupt interval between them (the
    # screen shows the prompt before the turn's Stop hook has run, so the next mail may come
    # while the session still counts as working; test_coordination_budget.py holds one).
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}, "coordination": {"interrupt_interval": "0s"}}))
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp) as s:  # relayd ends even when the session cannot start
        try:
            s.start()
            door = wait_for("the session's inbox reported by relay's hook", lambda: (s.door() or {}).get("proc_start") and s.door(), timeout=90)
            assert door.get("unusable") is None, door
            assert Path(door["socket"]).parent == s.run / "cc-socks"
            lines_seen: list[str] = []
            for n in range(3):
                team("send", AGENT, f"idle mail {n}\n\nbody of mail {n}", agent=SENDER)
                turn = wait_for(f"mail {n} at the model as a peer message", lambda: (lines_seen.append(s.tmux.cursor_line()), _peer_turn(s.model, f"idle mail {n}"))[1], timeout=90)
                peer = next(t for t in _user_texts(turn) if _is_peer(t, f"idle mail {n}"))
                assert f"relay mail for {AGENT} from {SENDER}" in peer and f"body of mail {n}" in peer
                # the same turn's prompt hook marks it read and names it: the mail is not shown a second time
                assert "is now marked read in relay: no need to read it again" in turn.text
                # at its prompt with its turn's Stop hook run: mail sent before that goes with the turn's end, not the door
                state = s.agent_dir / "program-state"
                wait_for("Claude Code back at its prompt, its turn ended", lambda: s.tmux.cursor_line() == "❯" and state.exists()
                         and json.loads(state.read_text())["state"] == "idle", timeout=90)
            assert not any("relay mail" in line or TRIGGER in line for line in lines_seen)  # never in the input line
            assert not any(TRIGGER in t for r in s.model.requests for t in _user_texts(r))  # no pane trigger at all
            assert not any(HEADER in r.text for r in s.model.requests)  # no mail rendered again by a hook
            assert json.loads(team("--json", "read", "--unread", agent=AGENT).stdout) == []
            status = _status_of(team, AGENT)
            assert status["arrives_by"] == "claude-inbox", status
        finally:
            daemon.kill()


def test_mail_waiting_before_the_session_starts_arrives_at_its_prompt(team, relay_env, short_tmp: Path) -> None:
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp) as s:  # relayd ends even when the session cannot start
        try:
            team("register", AGENT, "--notify", "hook")
            team("send", AGENT, "waiting since before", agent=SENDER)
            # The hooks as the fallback: a pane trigger registered while mail waits is typed
            # at once, before Claude Code has drawn its input box (its hooks have not run yet).
            s.start(notify="hook")
            try:
                wait_for("the waiting mail at the model", lambda: _peer_turn(s.model, "waiting since before"), timeout=60)
            except AssertionError as missed:
                files = {p.name: p.read_text()[:300] for p in s.agent_dir.iterdir() if p.is_file() and p.name != "inbox.jsonl"}
                raise AssertionError(f"{missed}\n{files}\n{daemon.log()[-3000:]}\n{s.tmux.screen()}") from None
            time.sleep(2)  # a second round must not write it again
            assert sum(1 for r in s.model.requests if any(_is_peer(t, "waiting since before") for t in _user_texts(r)[-1:])) == 1
        finally:
            daemon.kill()


def test_during_a_permission_question_the_mail_waits_and_the_question_stays(team, relay_env, short_tmp: Path) -> None:
    def turn(body):
        asked = any("run the probe" in t for t in _user_texts_of(body))
        done = any(m.get("role") == "user" and isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"]) for m in conversation(body))
        if asked and not done and not any(PEER_NOTICE in t for t in _user_texts_of(body)):
            return [tool_use("Bash", {"command": "touch probe-ran", "description": "make the probe file"})]
        return [text("Noted.")]

    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp, turn=turn, settings={"permissions": {"defaultMode": "default"}}) as s:  # relayd ends even when the session cannot start
        try:
            s.start()
            wait_for("the session's inbox reported", lambda: (s.door() or {}).get("proc_start"), timeout=90)
            s.tmux.type_line("run the probe", "run the probe")
            s.tmux.wait_for("Do you want to proceed?", timeout=60, settle=1)
            team("send", AGENT, "mail during the question", agent=SENDER)
            time.sleep(10)
            screen = s.tmux.screen()
            assert "Do you want to proceed?" in screen, screen
            assert not (s.project / "probe-ran").exists()
            assert _peer_turn(s.model, "mail during the question") is None
            s.tmux.keys("Escape")  # the person declines
            wait_for("the mail at the model after the question", lambda: _peer_turn(s.model, "mail during the question"), timeout=5)
            assert not (s.project / "probe-ran").exists()
        finally:
            daemon.kill()


def _user_texts_of(body: dict) -> list[str]:
    return [t for m in conversation(body) if m.get("role") == "user" for t in texts(m.get("content"))]


def test_mail_during_a_ten_second_tool_follows_the_tools_result_and_the_tool_runs_to_its_end(team, relay_env, short_tmp: Path) -> None:
    def turn(body):
        asked = any("run the slow step" in t for t in _user_texts_of(body))
        done = any(m.get("role") == "user" and isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"]) for m in conversation(body))
        if asked and not done:
            return [tool_use("Bash", {"command": "sleep 10; echo slow-step-done", "description": "the slow step"})]
        return [text("Noted.")]

    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp, turn=turn, settings={"permissions": {"allow": ["Bash"]}}) as s:
        try:
            s.start()
            wait_for("the session's inbox reported", lambda: (s.door() or {}).get("proc_start"), timeout=90)
            s.tmux.type_line("run the slow step", "run the slow step")
            wait_for("the slow step asked for", lambda: any("run the slow step" in r.text for r in s.model.requests), timeout=60)
            state = s.agent_dir / "program-state"
            wait_for("the tool running", lambda: state.exists() and json.loads(state.read_text())["state"] == "working", timeout=30)
            sent_at = time.monotonic()
            team("send", AGENT, "mail during the tool", agent=SENDER)
            # Claude Code 2.1.332 puts a peer message that came during a tool right after the tool's
            # result, in the same request ("... sent a message while you were working")
            turn_with_mail = wait_for("the mail at the model", lambda: next((r for r in s.model.requests if any(
                _is_peer(t, "mail during the tool") for m in (r.json() or {}).get("messages", []) for t in texts(m.get("content")))), None), timeout=60)
            assert any("slow-step-done" in t for t in _tool_results(turn_with_mail.json() or {}))  # the tool ran to its end, and the mail came after it
            tool_done = next(r for r in s.model.requests if any("slow-step-done" in t for t in _tool_results(r.json() or {})))
            assert s.model.requests.index(tool_done) <= s.model.requests.index(turn_with_mail)
            assert time.monotonic() - sent_at > 3  # it waited for the tool (sent at most a second or two into its 10 s)
            assert not any(HEADER in r.text for r in s.model.requests)  # and came once: no hook handed it over again
            assert TRIGGER not in s.tmux.screen(history=200)
        finally:
            daemon.kill()


def test_a_persons_draft_stays_in_the_input_box_while_mail_comes_through_the_inbox(team, relay_env, short_tmp: Path) -> None:
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp) as s:
        try:
            s.start()
            wait_for("the session's inbox reported", lambda: (s.door() or {}).get("proc_start"), timeout=90)
            s.tmux.literal("half a thought of mine")
            s.tmux.wait_for("half a thought of mine", timeout=30, settle=0.5)
            team("send", AGENT, "mail beside a draft", agent=SENDER)
            wait_for("the mail at the model", lambda: _peer_turn(s.model, "mail beside a draft"), timeout=60)
            wait_for("the turn over", lambda: json.loads((s.agent_dir / "program-state").read_text())["state"] == "idle", timeout=60)
            assert "half a thought of mine" in s.tmux.cursor_line()  # still in the input box, unsent
            assert not any("half a thought of mine" in r.text for r in s.model.requests)
        finally:
            daemon.kill()


def test_with_the_inbox_refused_in_settings_relay_falls_back_and_status_says_why(team, relay_env, short_tmp: Path) -> None:
    (Path(relay_env["RELAY_DIR"]) / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp, settings={"crossSessionInbound": "refuse"}) as s:  # relayd ends even when the session cannot start
        try:
            s.start()
            door = wait_for("the session's inbox reported", lambda: s.door(), timeout=90)
            assert "crossSessionInbound is refuse" in (door.get("unusable") or ""), door
            team("send", AGENT, "mail by the pane", agent=SENDER)
            wait_for("the pane trigger at the model", lambda: any(TRIGGER in t for r in s.model.requests for t in _user_texts(r)), timeout=60)
            status = _status_of(team, AGENT)
            assert status["arrives_by"].startswith("tmux:") and "crossSessionInbound is refuse" in (status.get("door_unusable") or ""), status
        finally:
            daemon.kill()


def test_with_cross_session_messaging_switched_off_the_pane_trigger_works_and_status_says_why(team, relay_env, short_tmp: Path) -> None:
    (Path(relay_env["RELAY_DIR"]) / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp, extra_env={"CLAUDE_CODE_HARBOR_KITE": "0"}) as s:  # relayd ends even when the session cannot start
        try:
            s.start()
            try:
                door = wait_for("the hook's report of no inbox", lambda: s.door(), timeout=90)
            except AssertionError:
                raise AssertionError(f"Claude Code's hooks never reported; its pane shows:\n{s.tmux.screen()}\nrelayd's log:\n{daemon.log()[-2000:]}") from None
            assert door["socket"] == "" and "CLAUDE_CODE_HARBOR_KITE=0" in door["unusable"]
            assert not (s.run / "cc-socks").exists()  # Claude Code made no inbox at all
            team("send", AGENT, "mail by the pane", agent=SENDER)
            wait_for("the pane trigger at the model", lambda: any(TRIGGER in t for r in s.model.requests for t in _user_texts(r)), timeout=60)
            shown = team("status").stdout
            assert "not its Claude Code inbox: CLAUDE_CODE_HARBOR_KITE=0 turns its inbox off" in shown, shown
        finally:
            daemon.kill()


def _door_statuses(relayctl, message_id: str) -> list[str]:
    way = next(w for w in json.loads(relayctl("--json", "track", message_id).stdout)["recipients"] if w["to"] == AGENT)
    return [d["status"] for d in way.get("door", [])]


def test_mail_claude_code_holds_for_the_person_shows_held_in_track_and_the_sender_hears_of_it(team, relay_env, short_tmp: Path) -> None:
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    with ended(daemon), Session(team, relay_env, short_tmp, settings={"crossSessionInbound": "hold"}) as s:  # relayd ends even when the session cannot start
        try:
            s.start()
            door = wait_for("the session's inbox reported", lambda: (s.door() or {}).get("proc_start") and s.door(), timeout=90)
            assert door.get("unusable") is None, door  # a held message is still relay's to report: the door is used
            sent = json.loads(team("--json", "send", AGENT, "held for the person", agent=SENDER).stdout)
            message_id = sent["messages"][0]["id"] if "messages" in sent else sent["id"]
            try:
                wait_for("Claude Code's held receipt in track", lambda: "held" in _door_statuses(team, message_id), timeout=60)
            except AssertionError as missed:
                raise AssertionError(f"{missed}\n{team('track', message_id).stdout}\n{daemon.log()[-3000:]}\n{s.tmux.screen()}") from None
            shown = team("track", message_id).stdout
            assert "Claude Code: held for the person's approval" in shown, shown
            notice = json.loads(team("--json", "read", "--unread", agent=SENDER).stdout)
            assert any(m["from"] == "relay" and message_id in m["body"] and "held" in m["subject"] for m in notice), notice
            time.sleep(3)  # nothing lets it in: it stays held, away from the model
            assert _peer_turn(s.model, "held for the person") is None
            assert _door_statuses(team, message_id) == ["held"]
            way = next(w for w in json.loads(team("--json", "track", message_id).stdout)["recipients"] if w["to"] == AGENT)
            assert way["read"] is False
            # The person lets it in: 2.1.332 releases what it held once the setting accepts
            (s.home / ".claude" / "settings.json").write_text(json.dumps({"crossSessionInbound": "accept"}))
            wait_for("the held mail at the model", lambda: _peer_turn(s.model, "held for the person"), timeout=30)
            wait_for("Claude Code's delivered receipt", lambda: _door_statuses(team, message_id) == ["held", "delivered"], timeout=30)
            assert "Claude Code: held for the person's approval" in team("track", message_id).stdout
        finally:
            daemon.kill()


SCRIPT = "scribe"  # a script agent of the same team: no Claude Code of its own


def _tools_called(body: dict) -> list[str]:
    return [b.get("name") for m in conversation(body) if m.get("role") == "assistant" and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]


def _tool_results(body: dict) -> list[str]:
    return [t for m in conversation(body) if m.get("role") == "user" and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result" for t in texts(b.get("content"))]


def test_the_models_send_message_to_a_script_agent_lands_in_its_relay_inbox_from_the_sessions_agent(team, relay_env, short_tmp: Path) -> None:
    def turn(body):
        if not any("tell the scribe" in t for t in _user_texts_of(body)):
            return [text("Noted.")]
        called = _tools_called(body)
        if "ListAgents" not in called:
            return [tool_use("ListAgents", {})]
        if "SendMessage" not in called:
            return [tool_use("SendMessage", {"to": SCRIPT, "message": "hello scribe, from the model"})]
        return [text("Sent.")]

    told = short_tmp / "scribe-told"
    team("register", SCRIPT, "--program", "script", "--task", "writes the notes", "--notify", f"cmd:touch {told}")
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    allowed = {"permissions": {"defaultMode": "acceptEdits", "allow": ["ListAgents", "SendMessage"]}}  # the person allows messaging
    with ended(daemon), Session(team, relay_env, short_tmp, turn=turn, settings=allowed) as s:  # relayd ends even when the session cannot start
        try:
            s.start()
            wait_for("the session's inbox reported", lambda: (s.door() or {}).get("proc_start"), timeout=90)
            records = s.home / ".claude" / "sessions"
            mine = wait_for("relay's record for the script agent", lambda: [json.loads(p.read_text()) for p in records.glob("*.json")
                                                                            if json.loads(p.read_text()).get("name") == SCRIPT], timeout=30)
            assert mine[0]["peerProtocol"] == 1 and mine[0]["agent"] == "script" and "writes the notes" in mine[0]["detail"]
            s.tmux.type_line("tell the scribe hello", "tell the scribe hello")
            try:
                inbox = wait_for("the model's message in the script agent's relay inbox",
                                 lambda: json.loads(team("--json", "read", agent=SCRIPT).stdout), timeout=90)
            except AssertionError as missed:
                last = s.model.requests[-1].json() if s.model.requests else {}
                raise AssertionError(f"{missed}\ntools called: {_tools_called(last)}\nresults: {_tool_results(last)}\n"
                                     f"{daemon.log()[-3000:]}\n{s.tmux.screen()}") from None
            [mail] = inbox
            assert mail["from"] == AGENT and "hello scribe, from the model" in mail["body"] and "via-claude-code" in mail["tags"]
            wait_for("the script agent told by its own mechanism (its cmd)", told.exists, timeout=30)
            listed = " ".join(r for req in s.model.requests for r in _tool_results(req.json() or {}))
            assert SCRIPT in listed, listed  # ListAgents named it
            assert daemon.stop() == 0
        finally:
            daemon.kill()
        assert not [p for p in records.glob("*.json") if json.loads(p.read_text()).get("name") == SCRIPT]  # removed when relayd stopped
