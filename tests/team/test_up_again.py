"""`up`, `down`, `up` again in one project: the second start's programs get their mail.

`down` records every agent as stopped, and Codex CLI, Copilot CLI and OpenCode report
nothing when they start: a state that outlived its program held every trigger back ("its
program is stopped"). A state belongs to its program process now (relayd.arrival.program_state),
so the new processes' panes are judged afresh. Real tmux, real relayd, the five real
programs from npm against scripted model servers.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import pytest

from support.waiting import wait_for
from test_team import FIVE, Team, _claude_home, team  # noqa: F401  (the team fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WITHIN = 10.0  # seconds from the send to the first request carrying the mail at the program's model server


def _answers_done(name: str):
    from support.hook_sessions import PROGRAMS
    from support.model_anthropic import messages_responder, text as claude_text
    from support.model_gemini import gemini_responder, text as gemini_text
    from support.model_openai import chat_responder, chat_text, message, responses_responder

    texts = {"claude": lambda s: [claude_text(s)], "codex": lambda s: [message(s)], "gemini": lambda s: [gemini_text(s)],
             "opencode": chat_text, "copilot": chat_text}
    responders = {"claude": messages_responder, "codex": responses_responder, "gemini": gemini_responder,
                  "opencode": chat_responder, "copilot": chat_responder}
    answer = responders[name](lambda body: texts[name]("Done."))
    return answer, PROGRAMS[name].is_turn


def _started(team: Team, relayctl, screen) -> None:
    started = relayctl("up", "--trust", str(team.file), timeout=240)
    assert started.stderr == "", started.stderr
    for name, ready in (("opencode", "Ask anything"), ("copilot", "/ commands")):  # `up` waits for the others
        try:
            wait_for(f"{name}'s prompt", lambda: ready in screen(name), timeout=90)
        except AssertionError:
            raise AssertionError(f"{ready!r} never showed; {name}'s pane shows:\n{screen(name)}") from None


def test_up_down_up_again_every_programs_model_gets_idle_mail_within_ten_seconds(team: Team, relayctl) -> None:
    from support.agent_programs import copilot_env, opencode_config, opencode_env, program
    from support.model_openai import codex_config
    from support.scripted_model import ScriptedModel

    team.file.write_text('team = "crew"\nrepo = "repo"\n' + "".join(
        f'\n[[agents]]\nname = "{name}"\nprogram = "{name}"\n' + ('model = "gemini-2.5-flash"\n' if name == "gemini" else "")
        + ('lead = true\n' if name == "claude" else "") for name in FIVE))
    with ExitStack() as stack:
        answers = {name: _answers_done(name) for name in FIVE}
        seen_at: dict[int, float] = {}

        def timed(answer):
            def respond(request):
                seen_at[id(request)] = time.monotonic()
                return answer(request)
            return respond

        models = {name: stack.enter_context(ScriptedModel(timed(answers[name][0]))) for name in FIVE}
        home = _claude_home(team, models["claude"].url)
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(codex_config(models["codex"].url))
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        opencode_config(team.repo, models["opencode"].url)
        opencode = opencode_env(team.repo, home)
        opencode.pop("PWD")  # `up` sets it for the pane
        team.env.update(CODEX_HOME=str(home / ".codex"), SCRIPTED_API_KEY="sk-scripted", GOOGLE_GEMINI_BASE_URL=models["gemini"].url,
                        GEMINI_API_KEY="scripted-key", **opencode, **copilot_env(home, models["copilot"].url),
                        PATH=":".join([*{str(program(name).parent) for name in FIVE}, team.env["PATH"]]))
        team.env.pop("CI", None)  # a person's terminal: with CI set, Gemini CLI draws no interactive screen

        def screen(name: str) -> str:
            return team.tmux("capture-pane", "-p", "-J", "-t", team.panes()[name][0])

        _started(team, relayctl, screen)
        relayctl("down", str(team.file))
        _started(team, relayctl, screen)
        time.sleep(2)  # at rest at their prompts: idle mail, not mail at start-up

        relayctl("register", "boss")
        sent_at = {}
        for name in FIVE:
            relayctl("send", name, "--subject", f"AFTER-RESTART-{name}", "anything new?", agent="boss")
            sent_at[name] = time.monotonic()

        def arrived(name: str, turn: bool = False) -> float | None:
            is_turn = answers[name][1]
            return next((seen_at[id(r)] for r in list(models[name].requests) if (is_turn(r) or not turn) and f"AFTER-RESTART-{name}" in r.text), None)

        try:
            wait_for("the mail in a turn of every model", lambda: all(arrived(name, turn=True) for name in FIVE), timeout=60, every=0.25)
        except AssertionError:
            shown = "\n".join(f"--- {name} ({'arrived' if arrived(name) else 'missing'}):\n{screen(name)}" for name in FIVE)
            raise AssertionError(f"mail after a second up never reached some models\n{shown}") from None
        late = {name: round(arrived(name) - sent_at[name], 1) for name in FIVE if arrived(name) - sent_at[name] > WITHIN}
        assert not late, f"{dbg} mail took longer than {WITHIN}s after the second up: {late}"
