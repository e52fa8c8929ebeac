"""`up` watching new panes (relayctl.team.up._watch_panes) through the first-start questions
of each program (relayd.programs: `Screen.first_start`), in memory: a scripted pane shows
what the program showed, screen by screen, on an injected clock. The real programs go
through the same questions in tests/team/test_team.py."""

from __future__ import annotations

import pytest

from relayctl.team import clients, up
from relayctl.team.teamfile import Agent, Team
from relayd.programs.program import Question
from relayd.programs.registry import PROGRAMS


class ScriptedPanes:
    """One pane whose screen is `script(now)`; the keys typed into it are kept."""

    def __init__(self, script, clock) -> None:
        self.script, self.clock, self.keys = script, clock, []

    def exit_status(self, pane_id: str):
        return False, None

    def capture(self, pane_id: str, history: int = 0) -> str:
        return self.script(self.clock.now, self.keys)

    def send_keys(self, pane_id: str, *keys: str) -> None:
        self.keys.append((self.clock.now, keys))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(up.time, "sleep", clock.sleep)
    return clock


def watch(program: str, script, clock: Clock, monkeypatch, prompts: list[Question] = (), start_wait: float = 40, person_wait: float = 300):
    agent = Agent(name="alpha", program=program)
    team = Team(name="crew", multiplexer="tmux", repo="/nonexistent", agents=[agent], path="x")
    monkeypatch.setattr(clients, "startup_prompts", lambda a, t: list(prompts))
    said: list[str] = []
    panes = ScriptedPanes(script, clock)
    problems, failed = up._watch_panes(panes, team, [(agent, "%1")], said.append, start_wait, person_wait, clock)
    return said, problems, panes.keys


def test_gemini_drawing_its_trust_dialog_after_its_prompt_is_named_not_taken_as_ready(clock: Clock, monkeypatch) -> None:
    def gemini(now, keys):
        if now < 1.0:
            return " > Type your message or @path/to/file"  # the prompt first
        return " > Type your message\n Do you trust the files in this folder?\n ● 1. Trust folder (repo)"

    said, problems, keys = watch("gemini", gemini, clock, monkeypatch, person_wait=5)
    assert len(said) == 1 and "waits at Gemini CLI's folder trust question" in said[0] and "relayctl up --trust" in said[0]
    assert problems == ["alpha (pane %1) still waits at its folder trust question: answer it there"] and keys == []


def test_claude_codes_auto_mode_question_is_named_with_what_to_do_and_never_answered(clock: Clock, monkeypatch) -> None:
    def claude(now, keys):
        if now < 30:
            return " Make auto mode your default permission mode?\n ❯ 1. Yes, set auto mode as my default permission mode\n   2. No"
        return " ❯ \n ? for shortcuts"  # the person answered

    said, problems, keys = watch("claude", claude, clock, monkeypatch)
    assert len(said) == 1 and "waits at Claude Code's question 'Make auto mode your default permission mode?'" in said[0]
    assert "Yes is preselected" in said[0] and keys == [] and problems == []


def test_relays_own_question_after_a_late_answer_is_still_answered(clock: Clock, monkeypatch) -> None:
    """The person answers Codex's folder trust after 100 s, well past the 40 s start window;
    the hook review that comes next is relay's, and answered."""
    review = Question("6 hooks are new or changed", ["Down", "Enter"])

    def codex(now, keys):
        if now < 100:
            return " Trust this folder?\n › 1. Yes, continue"
        if not keys:
            return " Hooks need review\n 6 hooks are new or changed\n › 1. Review"
        return " › Ask Codex to do anything"

    said, problems, keys = watch("codex", codex, clock, monkeypatch, prompts=[review])
    assert len(said) == 1 and "Codex CLI's folder trust question" in said[0]
    assert [k for _, k in keys] == [("Down", "Enter")] and keys[0][0] > 100 and problems == []


@pytest.mark.parametrize("program", sorted(p for p in PROGRAMS if PROGRAMS[p].trust is not None))
def test_every_program_with_a_trust_record_names_its_trust_question(program: str) -> None:
    """`up --trust` answers the folder trust ahead for exactly the programs that ask one."""
    assert [q for q in PROGRAMS[program].screen.first_start if q.trust] != []
