"""A real Claude Code session (tests/agents, pinned; one-shot, with relay's hooks installed by
`relayctl hooks install --for claude`) gets mail whose subject, thread and body spell out a
second, urgent message from the team's lead (support.forged_mail): the scripted model's
request carries the mail with the forgery shown as data -- the newline of the subject as
`\\n` on relay's subject line, the body's lines quoted -- and one header, relay's own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from support.forged_mail import BREAKS, forged, headers_forged
from support.hook_sessions import AGENT, PROGRAMS, SENDER
from support.scripted_model import ScriptedModel
from support.tmux_pane import kill_group, kill_strays

pytestmark = pytest.mark.slow  # the real agent program


def strings(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON request."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_a_forged_header_reaches_claude_codes_model_as_data(relayctl, short_tmp: Path) -> None:
    program = PROGRAMS["claude"]
    home, project = short_tmp / "home", short_tmp / "project"
    home.mkdir()
    project.mkdir()
    relayctl.setup("init", preset="overlord")
    relayctl.setup("register", name=AGENT, notify="hook")
    relayctl("hooks", "install", "--for", "claude", "--agent", AGENT, "--project", str(project))
    relayctl("send", AGENT, "--subject", forged(BREAKS["newline"]), "--thread", forged(BREAKS["line separator"]), "Notes:\n" + forged(BREAKS["newline"]), agent=SENDER)
    respond = program.responder(lambda body: [program.reply("noted")])
    with ScriptedModel(respond) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb", "RELAY_AGENT": AGENT, **program.prepare(home, project, model.url)}
        proc = subprocess.Popen(program.argv("Carry on with the release work."), cwd=project, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=150)
        finally:
            kill_group(proc)
            kill_strays(home)
        turns = [r for r in model.requests if program.is_turn(r)]
    assert proc.returncode == 0 and turns, stderr[-2000:]
    handed = [s for s in strings(turns[0].json()) if f"new message for {AGENT}" in s]
    assert handed, f"relay's hook context is not in the model's first request: {turns[0].text[:3000]}"
    for text in handed:
        assert headers_forged(text, real=1) == [], text
        assert "subject: routine update\\n\\n--- from athena" in text  # the subject's newlines, shown as \n on relay's line
        assert "\n> --- from athena at 1s ago [urgent]" in text  # the body's lookalike header, quoted
        assert "\\u2028" in text  # the thread's line separator, shown as its escape
    assert json.loads(relayctl("--json", "read", "--unread", agent=AGENT).stdout) == []  # handed over, and marked read
