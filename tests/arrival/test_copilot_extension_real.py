"""relay's mail through relay's Copilot CLI extension, in the real Copilot CLI, in real tmux.

GitHub Copilot CLI 1.0.102 (tests/agents) runs interactively with --experimental against the
scripted model server, with relay's hooks and extension installed as `relayctl hooks install
--for copilot --extension` writes them and RELAY_AGENT set as `relayctl up` sets it. The
agent's notify target is its pane, but the extension reports itself and relayd enqueues a
notice through it: no keystroke.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.agent_programs import copilot_env, program
from support.model_openai import chat_responder, chat_text, chat_tool_call
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.real_program]

TRIGGER = "relay-test: new mail, call check_inbox"
AGENT, SENDER = "inferno", "strategist"
READY = "/ commands"
QUESTION = "Do you want to run this command?"  # Copilot 1.0.102's permission question  # Copilot's prompt line (relayd.programs.copilot: Screen.ready)


def _user_texts(body: dict) -> list[str]:
    """The user turns' texts of one chat completions request (Copilot puts a
    `<current_datetime>` line before each, and a hook's context after it)."""
    out = []
    for m in body.get("messages", []):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        out += [content] if isinstance(content, str) else [c.get("text", "") for c in content or [] if isinstance(c, dict)]
    return out


def _notice_turn(model: ScriptedModel, subject: str):
    return next((r for r in model.requests if r.path.endswith("/chat/completions")
                 and any("[relay]" in t and subject in t for t in _user_texts(r.json() or {}))), None)


def _asks_to_run(command: str):
    """The scripted model's turns: asked to "Make the marker.", it calls bash with `command`
    (which Copilot asks the person about) until the tool's result comes; otherwise "Noted."."""
    def turn(body: dict) -> dict:
        done = any(m.get("role") == "tool" for m in body.get("messages", []))
        if "Make the marker." in json.dumps(body) and not done:
            return chat_tool_call("bash", {"command": command, "description": "make the marker"})
        return chat_text("Noted.")

    return turn


class Session:
    """A Copilot session for AGENT in tmux, with relay's hooks and extension, against a scripted model."""

    def __init__(self, relayctl, relay_env: dict[str, str], root: Path, turn, experimental: bool = True, pane: str = "cp",
                 told_late: bool = False) -> None:
        """`pane`: the tmux session's name; another one in the same `root` is the person's
        next start of Copilot in the same project, HOME and runtime folder. `told_late`: the
        extension process hears of a permission question only after it was answered, as a
        loaded machine once showed (Copilot runs relay's hook, then shows the question, then
        tells the extension): its own watch for the question is taken out of the file."""
        self.relayctl, self.project, self.home = relayctl, root / "project", root / "home"
        self.project.mkdir(exist_ok=True)
        self.runtime = root / "run"  # the extension's socket folder: this test's own
        self.runtime.mkdir(mode=0o700, exist_ok=True)
        self.experimental = experimental
        self.told_late = told_late
        self.tmux = Tmux(root, pane)
        self.model = ScriptedModel(chat_responder(turn))
        self.env = {k: v for k, v in relay_env.items() if not k.startswith("TMUX")}
        self.env.update({"HOME": str(self.home), "RELAY_AGENT": AGENT, "TERM": "xterm-256color", "LANG": "C.UTF-8",
                         "XDG_RUNTIME_DIR": str(self.runtime)})
        self.agent_dir = Path(relay_env["RELAY_DIR"]) / "agents" / AGENT

    def __enter__(self) -> "Session":
        self.model.__enter__()
        self.env.update(copilot_env(self.home, self.model.url, trusted=self.project))
        self.relayctl("hooks", "install", "--for", "copilot", "--extension", "--agent", AGENT, "--project", str(self.project))
        if self.told_late:
            extension = self.project / ".github" / "extensions" / "relay" / "extension.mjs"
            watch = 'if (event?.data?.hookType === "permissionRequest") asking = true'
            assert watch in extension.read_text()
            extension.write_text(extension.read_text().replace(watch, "void event"))
        argv = [str(program("copilot")), *(["--experimental"] if self.experimental else [])]
        self.tmux.start(argv, self.project, self.env, size=(150, 45))
        self.relayctl("register", AGENT, "--notify", f"tmux:{self.tmux.target()}")
        self.tmux.wait_for(READY, timeout=90, settle=1)
        return self

    def prompt(self, text: str) -> None:
        self.tmux.type_line(text, text)

    def door(self) -> dict | None:
        path = self.agent_dir / "copilot-extension"
        return json.loads(path.read_text()) if path.exists() else None

    def state(self) -> dict:
        path = self.agent_dir / "program-state"
        return json.loads(path.read_text()) if path.exists() else {}

    def explain(self) -> str:
        """What a timed-out wait needs to be understood: relay's records, how many model
        requests came, Copilot's own record of its hooks and messages (its session's
        events.jsonl), its log's warnings and errors, and the pane."""
        events = []
        for log in sorted((self.home / ".copilot" / "session-state").glob("*/events.jsonl")):
            for raw in log.read_text(errors="replace").splitlines():
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                data = event.get("data") or {}
                said = {k: data[k] for k in ("hookType", "success", "error", "content", "toolName") if k in data}
                events.append(f"  {str(event.get('timestamp', ''))[11:23]} {event.get('type')} {json.dumps(said)[:160]}")
        warnings = [line[:220] for log in sorted((self.home / ".copilot" / "logs").glob("*.log"))
                    for line in log.read_text(errors="replace").splitlines() if "[ERROR]" in line or "[WARNING]" in line]
        return "\n".join([f"program-state: {self.state()}", f"door: {self.door()}", f"model requests: {len(self.model.requests)}",
                          "Copilot's events:", *events[-40:], "Copilot's log, warnings and errors:", *warnings[-15:], self.tmux.screen()])

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


def _unread(relayctl) -> list[str]:
    return [m["subject"] for m in json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout)]


def test_idle_mail_reaches_the_model_through_the_extension_and_nothing_is_typed(team, relay_env, short_tmp: Path) -> None:
    with Session(team, relay_env, short_tmp, lambda body: chat_text("Noted.")) as s:
        door = wait_for("relay's extension reporting itself", lambda: s.door(), timeout=90, explain=s.explain)
        assert door.get("unusable") is None, door
        assert door["socket"] == str(s.runtime / "relay-copilot" / f"{AGENT}.sock")
        screens: list[str] = []
        for n in range(2):
            team("send", AGENT, f"idle mail {n}\n\nbody of mail {n}", agent=SENDER)
            turn = wait_for(f"mail {n} at the model as an enqueued notice",
                            lambda: (screens.append(s.tmux.screen()), _notice_turn(s.model, f"idle mail {n}"))[1], timeout=90, every=0.2, explain=s.explain)
            notice = next(t for t in _user_texts(turn.json()) if "[relay]" in t and f"idle mail {n}" in t)
            assert f"from {SENDER}: idle mail {n}" in notice and "relayctl read --unread --mark-read" in notice
            assert f"body of mail {n}" in turn.text  # the notice turn's prompt hook handed the mail itself over
            wait_for("Copilot done with the turn", lambda: s.state().get("state") == "idle", timeout=90, explain=s.explain)
        assert not any(TRIGGER in screen for screen in screens)  # relay typed nothing into the pane
        assert not any(TRIGGER in r.text for r in s.model.requests)
        assert _unread(team) == []  # read through the hook, as it came
        status = _status_of(team, AGENT)
        assert status["arrives_by"] == "copilot-extension" and status.get("door_unusable") is None
        sent = json.loads(team("--json", "send", AGENT, "one more", agent=SENDER).stdout)["id"]
        told = wait_for("the announcement", lambda: json.loads(team("--json", "track", sent).stdout)["recipients"][0].get("announced"), timeout=60, explain=s.explain)
        assert told["how"] == "copilot-extension" and told["ok"]


def test_a_draft_in_the_prompt_is_left_as_it_is(team, relay_env, short_tmp: Path) -> None:
    with Session(team, relay_env, short_tmp, lambda body: chat_text("Noted.")) as s:
        wait_for("relay's extension reporting itself", lambda: s.door(), timeout=90, explain=s.explain)
        s.tmux.literal("half a thought of mine")
        s.tmux.wait_for("half a thought of mine", timeout=30, settle=0.5)
        team("send", AGENT, "mail beside a draft", agent=SENDER)
        wait_for("the notice at the model", lambda: _notice_turn(s.model, "mail beside a draft"), timeout=90, every=0.2, explain=s.explain)
        wait_for("Copilot done with the turn", lambda: s.state().get("state") == "idle", timeout=90, explain=s.explain)
        assert "half a thought of mine" in s.tmux.cursor_line()  # still in the prompt, unsent
        assert not any("half a thought of mine" in r.text for r in s.model.requests)
        assert TRIGGER not in s.tmux.screen(history=200)


@pytest.mark.parametrize("told_late", [False, True], ids=["told", "told-late"])
def test_a_permission_question_is_never_answered_and_after_a_decline_the_held_notice_goes(team, relay_env, short_tmp: Path,
                                                                                         told_late: bool) -> None:
    """The notice of mail that comes while Copilot asks its permission question is held (Copilot
    drops what was enqueued when the person declines), also when the extension process was not
    told of the question yet (relay's hook was: told-late), and goes once the person declined."""
    with Session(team, relay_env, short_tmp, _asks_to_run("touch marker-made"), told_late=told_late) as s:
        wait_for("relay's extension reporting itself", lambda: s.door(), timeout=90, explain=s.explain)
        s.prompt("Make the marker.")
        wait_for("Copilot asking the person", lambda: s.state().get("state") == "asking", timeout=90, explain=s.explain)
        s.tmux.wait_for(QUESTION, timeout=30, settle=1)
        sent = json.loads(team("--json", "send", AGENT, "mail during the question", agent=SENDER).stdout)["id"]
        told = wait_for("the notice announced", lambda: json.loads(team("--json", "track", sent).stdout)["recipients"][0].get("announced"), timeout=60, explain=s.explain)
        assert told["how"] == "copilot-extension" and told["ok"]
        assert "once the session is idle again" in (told.get("note") or "")  # held while the question is open
        assert "once the session is idle again" in team("track", sent).stdout
        time.sleep(10)  # an enqueued message reaches an idle session's model within a second (the idle test)
        assert not (s.project / "marker-made").exists()  # nobody answered yes
        assert s.state().get("state") == "asking"
        assert QUESTION in s.tmux.screen()  # still asking: nothing picked an answer
        assert _notice_turn(s.model, "mail during the question") is None
        s.tmux.keys("Escape")  # the person declines
        wait_for("the held notice at the model after the decline", lambda: _notice_turn(s.model, "mail during the question"), timeout=60, every=0.2, explain=s.explain)
        assert not (s.project / "marker-made").exists()
        assert _unread(team) == []
        assert TRIGGER not in s.tmux.screen(history=200)


def test_mail_held_at_a_question_when_the_person_closes_copilot_reaches_its_next_session(team, relay_env, short_tmp: Path) -> None:
    """The extension holds the notice while Copilot asks its permission question; the person
    closes Copilot there (the notice goes with its process) and starts it again. The mail
    reaches the new session's model through the new session's extension, without a prompt
    of the person's and with nothing typed: relayd's retries find the old door void and the
    new Copilot at its prompt before its extension reports itself, and wait for that
    (notify.DOOR_WAIT) instead of typing the pane trigger."""
    with Session(team, relay_env, short_tmp, _asks_to_run("touch marker-made")) as first:
        wait_for("relay's extension reporting itself", lambda: first.door(), timeout=90, explain=first.explain)
        first.prompt("Make the marker.")
        first.tmux.wait_for(QUESTION, timeout=90, settle=1)
        sent = json.loads(team("--json", "send", AGENT, "mail across a restart", agent=SENDER).stdout)["id"]
        told = wait_for("the notice held", lambda: json.loads(team("--json", "track", sent).stdout)["recipients"][0].get("announced"),
                        timeout=60, explain=first.explain)
        assert "once the session is idle again" in (told.get("note") or "")
        old_door = first.door()
    assert _notice_turn(first.model, "mail across a restart") is None  # closed at the question: the notice never went
    assert _unread(team) == ["mail across a restart"]
    assert any(line.split()[:2] == [AGENT, "EXITED"] for line in team("status").stdout.splitlines())  # said, while nobody runs it
    with Session(team, relay_env, short_tmp, lambda body: chat_text("Noted."), pane="cp2") as again:
        wait_for("the new session's extension reporting itself", lambda: (again.door() or {}).get("pid") not in (None, old_door["pid"]),
                 timeout=90, explain=again.explain)
        wait_for("the mail at the new session's model", lambda: any(r.path.endswith("/chat/completions") and "mail across a restart" in r.text
                                                                    for r in again.model.requests), timeout=90, every=0.2, explain=again.explain)
        wait_for("the mail read", lambda: _unread(team) == [], timeout=30, explain=again.explain)
        assert not (again.project / "marker-made").exists()
        assert TRIGGER not in again.tmux.screen(history=200)  # through the door, not the keys


def test_mail_during_an_approved_command_follows_the_command(team, relay_env, short_tmp: Path) -> None:
    with Session(team, relay_env, short_tmp, _asks_to_run("touch marker-made && echo marker-done")) as s:
        wait_for("relay's extension reporting itself", lambda: s.door(), timeout=90, explain=s.explain)
        s.prompt("Make the marker.")
        s.tmux.wait_for(QUESTION, timeout=90, settle=1)
        team("send", AGENT, "mail during the command", agent=SENDER)
        wait_for("the notice held", lambda: (s.agent_dir / "copilot-extension-sent").exists(), timeout=60, explain=s.explain)
        assert QUESTION in s.tmux.screen() and not (s.project / "marker-made").exists()
        s.tmux.keys("Enter")  # the person allows it (1. Yes)
        notice = wait_for("the notice at the model", lambda: _notice_turn(s.model, "mail during the command"), timeout=90, every=0.2, explain=s.explain)
        assert (s.project / "marker-made").exists()  # the command ran as the person allowed it, in the foreground
        tool_done = next(r for r in s.model.requests if "marker-done" in r.text)
        assert s.model.requests.index(tool_done) < s.model.requests.index(notice)  # the command's turn first, then the mail
        assert TRIGGER not in s.tmux.screen(history=200)


def test_without_experimental_copilot_keeps_the_pane_trigger_and_status_says_why(team, relay_env, short_tmp: Path) -> None:
    with Session(team, relay_env, short_tmp, lambda body: chat_text("Noted."), experimental=False) as s:
        s.prompt("Carry on with the release work.")
        door = wait_for("the hooks reporting the session has no extension", lambda: s.door(), timeout=90, explain=s.explain)
        assert "without --experimental" in door["unusable"]
        status = _status_of(team, AGENT)
        assert status["arrives_by"].startswith("tmux:") and "without --experimental" in status["door_unusable"]
        assert "without --experimental" in team("status").stdout
        wait_for("Copilot done with the turn", lambda: s.state().get("state") == "idle", timeout=90, explain=s.explain)
        team("send", AGENT, "mail for the pane", agent=SENDER)
        turn = wait_for("the trigger typed and submitted", lambda: next((r for r in s.model.requests if TRIGGER in r.text), None), timeout=90, explain=s.explain)
        assert "mail for the pane" in turn.text  # its prompt hook handed the mail over
