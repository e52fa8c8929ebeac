"""relay's mail through Codex's own queue (`codex queue`), in the real Codex, in real tmux.

Codex CLI 0.169.0 (tests/agents) runs interactively against the scripted model server, with
relay's hooks installed as `relayctl hooks install --for codex` writes them and RELAY_AGENT
set as `relayctl up` sets it. The agent's notify target is its pane, but the session reports
its thread through the hooks and relayd queues a notice into it: no keystroke.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.agent_programs import program
from support.model_openai import codex_config, function_call, message, responses_responder
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.real_program]

TRIGGER = "relay-test: new mail, call check_inbox"
AGENT, SENDER = "inferno", "strategist"
NOTICE = "[relay] 1 new message for inferno"
READY = "Ask Codex to do anything"
QUESTION = "Would you like to run the following command?"  # Codex 0.169.0's approval question


def _user_texts(request) -> list[str]:
    """The user turns' texts of one Responses request (what the person, or a queued message, said)."""
    out = []
    for item in (request.json() or {}).get("input", []):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            out += [c.get("text", "") for c in item.get("content", []) if isinstance(c, dict)]
    return out


def _notice_turn(model: ScriptedModel, subject: str):
    return next((r for r in model.requests if any(t.startswith("[relay]") and subject in t for t in _user_texts(r))), None)


class Session:
    """A Codex session for AGENT in tmux, with relay's hooks, against a scripted model."""

    def __init__(self, relayctl, relay_env: dict[str, str], root: Path, turn, config: str = "") -> None:
        self.relayctl, self.project, self.home = relayctl, root / "project", root / "home"
        self.project.mkdir()
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir(parents=True)
        self.config = config
        self.tmux = Tmux(root, "cx")
        self.model = ScriptedModel(responses_responder(turn))
        self.env = {k: v for k, v in relay_env.items() if not k.startswith("TMUX")}
        self.env.update({"HOME": str(self.home), "CODEX_HOME": str(self.codex_home), "SCRIPTED_API_KEY": "sk-scripted",
                         "RELAY_AGENT": AGENT, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
        self.agent_dir = Path(relay_env["RELAY_DIR"]) / "agents" / AGENT

    def __enter__(self) -> "Session":
        self.model.__enter__()
        trusted = f'[projects."{self.project}"]\ntrust_level = "trusted"\n'  # the folder trust a person gives once
        (self.codex_home / "config.toml").write_text(self.config + codex_config(self.model.url) + trusted)
        self.relayctl("hooks", "install", "--for", "codex", "--agent", AGENT, "--project", str(self.project))
        # A plain `codex`, as people start it: its session runs in the local app-server daemon
        # Codex starts, which takes a queued message at once. (A `codex` given flags such as
        # --dangerously-bypass-hook-trust hosts its own app server, which looks at the queue
        # only about every 10 s.)
        self.tmux.start([str(program("codex"))], self.project, self.env, size=(150, 45))
        self.relayctl("register", AGENT, "--notify", f"tmux:{self.tmux.target()}")
        self.tmux.wait_for("Hooks need review", timeout=90, settle=1)
        self.tmux.keys("Down", "Enter")  # 2. Trust all and continue (docs/mcp.md), as a person does once
        self.tmux.wait_for(READY, timeout=90, settle=1)
        return self

    def prompt(self, text: str) -> None:
        self.tmux.type_line(text, text)

    def door(self) -> dict | None:
        path = self.agent_dir / "codex-queue"
        return json.loads(path.read_text()) if path.exists() else None

    def explain(self, message_id: str) -> str:
        """What relay and Codex had done with a message, for a failed wait."""
        store = self.agent_dir.parent.parent
        delivery = (store / "delivery.jsonl").read_text() if (store / "delivery.jsonl").exists() else ""
        state = self.agent_dir / "program-state"
        return "\n".join([
            "track: " + self.relayctl("track", message_id, check=False).stdout,
            f"door: {self.door()}", f"program-state: {state.read_text() if state.exists() else None}",
            "delivery log (end): " + "".join(delivery.splitlines(True)[-8:]),
            f"model requests: {len(self.model.requests)}", "screen:\n" + self.tmux.screen(),
        ])

    def __exit__(self, *exc) -> None:
        self.tmux.kill()
        kill_strays(self.home)
        self.model.__exit__(*exc)


@pytest.fixture
def team(relayctl, relay_env, store_dir: Path):
    relayctl("init")
    relayctl("register", SENDER)
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    try:
        yield relayctl
    finally:
        daemon.proc.terminate()
        daemon.proc.wait(timeout=20)


def _status_of(relayctl, name: str) -> dict:
    return next(a for a in json.loads(relayctl("--json", "status").stdout)["agents"] if a["name"] == name)


def _at_rest(s, after: str) -> bool:
    """Codex at its prompt with the Stop hook run of a turn that ended after `after` (relay's
    time stamp): mail sent before that hook goes with the turn (its hooks hand it over), not
    through the queue. (The state file's "idle" from the session's start, or from the turn
    before, is not the end of this turn: mail sent then went into the turn's own prompt.)"""
    return READY in s.tmux.screen() and _stopped_since(s, after)


def _stopped_since(s, after: str) -> bool:
    """The Stop hook of a turn that ended after `after` (relay's time stamp) has run."""
    state = s.agent_dir / "program-state"
    if not state.exists():
        return False
    now = json.loads(state.read_text())
    return now["state"] == "idle" and now.get("event") == "Stop" and now["at"] > after


def _unread(relayctl) -> list[str]:
    return [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)]


def test_idle_mail_reaches_the_model_through_the_queue_and_nothing_is_typed(team, relay_env, short_tmp: Path) -> None:
    with Session(team, relay_env, short_tmp, lambda body: [message("Noted.")]) as s:
        s.prompt("Carry on with the release work.")
        door = wait_for("the session's thread reported by relay's hook", lambda: s.door(), timeout=90)
        assert door.get("unusable") is None, door
        assert door["codex_home"] == str(s.codex_home) and door["codex"].endswith("/codex")
        wait_for("Codex back at its prompt, its turn ended", lambda: _at_rest(s, door["at"]), timeout=90)
        screens: list[str] = []
        for n in range(2):
            rested = json.loads((s.agent_dir / "program-state").read_text())["at"]
            sent = json.loads(team("--json", "send", AGENT, f"idle mail {n}\n\nbody of mail {n}", agent=SENDER).stdout)["id"]
            turn = wait_for(f"mail {n} at the model as a queued notice",
                            lambda: (screens.append(s.tmux.screen()), _notice_turn(s.model, f"idle mail {n}"))[1], timeout=90, every=0.2,
                            explain=lambda: s.explain(sent))
            notice = next(t for t in _user_texts(turn) if t.startswith("[relay]") and f"idle mail {n}" in t)
            assert f"from {SENDER}: idle mail {n}" in notice and "relayctl read --unread --mark-read" in notice
            assert f"body of mail {n}" in turn.text  # the notice turn's prompt hook handed the mail itself over
            wait_for("Codex back at its prompt, its turn ended", lambda: _at_rest(s, rested), timeout=90)
        assert not any(TRIGGER in screen for screen in screens)  # relay typed nothing into the pane
        assert not any(TRIGGER in r.text for r in s.model.requests)
        assert _unread(team) == []  # read through the hook, as it came
        status = _status_of(team, AGENT)
        assert status["arrives_by"] == "codex-queue" and status.get("door_unusable") is None


def test_a_draft_in_the_prompt_is_left_as_it_is(team, relay_env, short_tmp: Path) -> None:
    with Session(team, relay_env, short_tmp, lambda body: [message("Noted.")]) as s:
        s.prompt("Carry on with the release work.")
        door = wait_for("the session's thread reported by relay's hook", lambda: s.door(), timeout=90)
        wait_for("Codex back at its prompt, its turn ended", lambda: _at_rest(s, door["at"]), timeout=90)
        s.tmux.literal("half a thought of mine")
        s.tmux.wait_for("half a thought of mine", timeout=30, settle=0.5)
        rested = json.loads((s.agent_dir / "program-state").read_text())["at"]
        sent = json.loads(team("--json", "send", AGENT, "mail beside a draft", agent=SENDER).stdout)["id"]
        wait_for("the notice at the model", lambda: _notice_turn(s.model, "mail beside a draft"), timeout=90, every=0.2,
                 explain=lambda: s.explain(sent))
        # (the draft stands where Codex's READY placeholder would: the state file alone says the turn ended)
        wait_for("the notice's turn ended", lambda: _stopped_since(s, rested), timeout=90)
        assert "half a thought of mine" in s.tmux.cursor_line()  # still in the prompt, unsent
        assert not any("half a thought of mine" in r.text for r in s.model.requests)
        assert TRIGGER not in s.tmux.screen(history=200)


def test_mail_during_a_tool_waits_for_the_tool_and_follows_it(team, relay_env, short_tmp: Path) -> None:
    def turn(body: dict) -> list[dict]:
        done = any(i.get("type") == "function_call_output" for i in body.get("input", []))
        if "Run the slow step." in json.dumps(body) and not done:
            return [function_call("exec_command", {"cmd": "sleep 6; echo slow-step-done"})]
        return [message("Noted.")]

    with Session(team, relay_env, short_tmp, turn, config='approval_policy = "never"\nsandbox_mode = "danger-full-access"\n') as s:
        s.prompt("Carry on with the release work.")
        wait_for("the session's thread", lambda: s.door(), timeout=90)
        wait_for("Codex back at its prompt", lambda: READY in s.tmux.screen(), timeout=90)
        s.prompt("Run the slow step.")
        wait_for("the tool running", lambda: (s.agent_dir / "program-state").exists()
                 and json.loads((s.agent_dir / "program-state").read_text())["state"] == "working", timeout=90)
        team("send", AGENT, "mail during the tool", agent=SENDER)
        notice = wait_for("the notice at the model", lambda: _notice_turn(s.model, "mail during the tool"), timeout=60, every=0.2)
        outputs = [i.get("output") for i in (notice.json() or {}).get("input", []) if i.get("type") == "function_call_output"]
        assert any("slow-step-done" in json.dumps(o) for o in outputs)  # the tool ran to its end before the notice
        tool_done = next(r for r in s.model.requests if "slow-step-done" in r.text)
        assert s.model.requests.index(tool_done) < s.model.requests.index(notice)
        assert TRIGGER not in s.tmux.screen(history=200)


def test_a_permission_question_is_never_answered_and_after_a_decline_track_says_the_mail_waits(team, relay_env, short_tmp: Path) -> None:
    def turn(body: dict) -> list[dict]:
        done = any(i.get("type") == "function_call_output" for i in body.get("input", []))
        if "Make the marker." in json.dumps(body) and not done:
            return [function_call("exec_command", {"cmd": "touch marker-made", "sandbox_permissions": "require_escalated",
                                                   "justification": "to make the marker"})]
        return [message("Noted.")]

    with Session(team, relay_env, short_tmp, turn, config='approval_policy = "on-request"\nsandbox_mode = "read-only"\n') as s:
        s.prompt("Carry on with the release work.")
        wait_for("the session's thread", lambda: s.door(), timeout=90)
        wait_for("Codex back at its prompt", lambda: READY in s.tmux.screen(), timeout=90)
        s.prompt("Make the marker.")
        state = s.agent_dir / "program-state"
        wait_for("Codex asking the person", lambda: state.exists() and json.loads(state.read_text())["state"] == "asking", timeout=90)
        s.tmux.wait_for(QUESTION, timeout=30, settle=1)
        sent = team("--json", "send", AGENT, "mail during the question", agent=SENDER)
        message_id = json.loads(sent.stdout)["id"]
        # The daemon takes a queued message within a second when it may (the idle test); a
        # question stands for 15 s meanwhile and stays unanswered.
        time.sleep(15)
        assert not (s.project / "marker-made").exists()  # nobody answered yes
        assert json.loads(state.read_text())["state"] == "asking"
        assert QUESTION in s.tmux.screen()  # still asking: nothing queued picked an answer
        assert _notice_turn(s.model, "mail during the question") is None
        s.tmux.keys("Escape")  # the person declines
        wait_for("the decline recorded", lambda: json.loads(state.read_text()).get("event") == "Interrupt", timeout=90)
        later = json.loads(team("--json", "send", AGENT, "mail after the decline", agent=SENDER).stdout)["id"]
        tracked = wait_for("the announcement recorded", lambda: json.loads(team("--json", "track", later).stdout)["recipients"][0].get("announced"), timeout=90)
        assert tracked["how"] == "codex-queue" and "until the person's next prompt" in (tracked.get("note") or "")
        assert "until the person's next prompt" in team("track", later).stdout
        assert not (s.project / "marker-made").exists()
        s.prompt("Any news?")
        wait_for("the held notices at the model after the person's prompt",
                 lambda: _notice_turn(s.model, "mail after the decline"), timeout=60, every=0.2)
        first = json.loads(team("--json", "track", message_id).stdout)["recipients"][0]["announced"]
        assert first["how"] == "codex-queue" and first["ok"]  # queued during the question, which it left alone
