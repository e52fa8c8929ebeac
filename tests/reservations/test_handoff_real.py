"""A handoff to an agent whose session is the real Codex, in real tmux: the brief reaches its
model, the sender's `track` shows it read, and the real pre-commit guard of a real git
repository refuses the old owner's commit on a handed-over path and lets through the one
Codex's model makes from its own shell.

Codex CLI 0.169.0 (tests/agents) runs against the scripted model server with relay's hooks
installed as `relayctl hooks install --for codex` writes them; every relayctl and git here
runs with RELAY_AGENT set as `relayctl up` sets it (the Codex session's own environment
for the new owner's commit), never with `--agent`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from support.agent_programs import program
from support.git_repo import Repo
from support.model_openai import codex_config, function_call, message, responses_responder
from support.relayd_proc import Daemon
from support.scripted_model import ScriptedModel
from support.tmux_pane import Tmux, kill_strays
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.real_program]

OLD, NEW = "inferno", "coder"
READY = "Ask Codex to do anything"
BRIEF = "Auth is yours: login works, logout is half done"
COMMITTED = "coder-commit-went-through"


def as_agent(relay_env: dict[str, str], name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """relayctl as an agent's session runs it: RELAY_AGENT in its environment."""
    done = subprocess.run([sys.executable, "-m", "relayctl", *args], env=dict(relay_env, RELAY_AGENT=name), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def _outputs(request) -> list[str]:
    """What the tools the model called printed, as Codex sends it back (one Responses request)."""
    return [json.dumps(i.get("output")) for i in (request.json() or {}).get("input", []) if i.get("type") == "function_call_output"]


def test_a_handoff_to_a_real_codex_session_moves_the_files_and_the_brief_reaches_its_model(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    repo = Repo(short_tmp / "repo", relay_env)
    # The new owner's model, once the brief is in its context, commits the half-done logout
    # from its own shell (RELAY_AGENT=coder there, as `up` sets it; the guard hook reads it).
    commit = (f"cd {shlex.quote(str(repo.path))} && echo 'logout done' > src/auth/logout.py && git add -A"
              f" && git -c user.name=coder -c user.email=coder@example.org commit -qm 'auth: logout' && echo {COMMITTED}")

    def turn(body: dict) -> list[dict]:
        briefed = BRIEF in json.dumps(body)
        done = any(i.get("type") == "function_call_output" for i in body.get("input", []))
        tools = bool(body.get("tools"))  # (Codex's side requests carry none: they are no turn to act in)
        return [function_call("exec_command", {"cmd": commit})] if briefed and tools and not done else [message("Noted.")]

    relayctl("init")
    relayctl("register", OLD)
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    project, home = short_tmp / "project", short_tmp / "home"
    project.mkdir()
    (home / ".codex").mkdir(parents=True)
    tmux = Tmux(short_tmp, "cx")
    model = ScriptedModel(responses_responder(turn))
    try:
        with model:
            trusted = f'[projects."{project}"]\ntrust_level = "trusted"\n'
            (home / ".codex" / "config.toml").write_text('approval_policy = "never"\nsandbox_mode = "danger-full-access"\n' + codex_config(model.url) + trusted)
            relayctl("hooks", "install", "--for", "codex", "--agent", NEW, "--project", str(project))
            env = {k: v for k, v in relay_env.items() if not k.startswith("TMUX")}
            env.update({"HOME": str(home), "CODEX_HOME": str(home / ".codex"), "SCRIPTED_API_KEY": "sk-scripted",
                        "RELAY_AGENT": NEW, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
            tmux.start([str(program("codex"))], project, env, size=(150, 45))
            relayctl("register", NEW, "--notify", f"tmux:{tmux.target()}")
            tmux.wait_for("Hooks need review", timeout=90, settle=1)
            tmux.keys("Down", "Enter")  # trust the hooks, as a person does once
            tmux.wait_for(READY, timeout=90, settle=1)
            tmux.type_line("Carry on with the release work.", "Carry on with the release work.")
            door = store_dir / "agents" / NEW / "codex-queue"
            wait_for("the session's thread reported by relay's hook", door.exists, timeout=90)
            reported = json.loads(door.read_text())["at"]

            def at_rest() -> bool:
                """At its prompt with that turn's Stop hook run: the brief goes through the queue,
                not into the turn (as its hooks would hand it over)."""
                state = store_dir / "agents" / NEW / "program-state"
                now = json.loads(state.read_text()) if state.exists() else {}
                return READY in tmux.screen() and now.get("event") == "Stop" and now.get("at", "") > reported

            wait_for("Codex back at its prompt, its turn ended", at_rest, timeout=90)

            as_agent(relay_env, OLD, "reserve", "src/auth/**", "--repo", str(repo.path), "--reason", "auth refactor")
            as_agent(relay_env, OLD, "guard", "install", "--repo", str(repo.path))
            handed = json.loads(as_agent(relay_env, OLD, "--json", "handoff", NEW, "src/auth/**", BRIEF, "--repo", str(repo.path), "--thread", "auth").stdout)
            assert [(r["pattern"], r["agent"]) for r in handed["handed"]] == [("src/auth/**", NEW)]

            briefed = wait_for("the brief at Codex's model", lambda: next((r for r in model.requests if BRIEF in r.text), None), timeout=90, every=0.2)
            assert "src/auth/** (exclusive, until" in briefed.text  # the brief itself, with what coder now holds
            ran = wait_for("the output of the model's commit", lambda: next((o for r in model.requests for o in _outputs(r)), None), timeout=90, every=0.2)
            assert COMMITTED in ran  # the guard let the new owner's commit through
            assert repo.head_files().split() == ["src/auth/logout.py"]

            tracked = wait_for("the brief read, as its sender's track says",
                               lambda: (t := json.loads(as_agent(relay_env, OLD, "--json", "track", handed["brief"]).stdout))["recipients"][0]["read"] and t, timeout=60)
            assert [r["to"] for r in tracked["recipients"]] == [NEW] and tracked["recipients"][0]["announced"]["how"] == "codex-queue"

            refused = repo.commit("src/auth/session.py", agent=OLD)
            assert refused.returncode != 0
            assert f"{NEW} holds src/auth/**" in refused.stderr and f"handed over by {OLD}" in refused.stderr and "thread auth" in refused.stderr
            assert repo.head_files().split() == ["src/auth/logout.py"]  # the old owner's commit did not land
    finally:
        tmux.kill()
        kill_strays(home)
        daemon.proc.terminate()
        daemon.proc.wait(timeout=20)
