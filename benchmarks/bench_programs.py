"""Idle mail -> the model, in the real agent programs (DESIGN §4, §10).

Each program from npm (tests/agents, pinned) runs interactively in tmux against the
scripted model server, with relay's hooks installed and relayd running, the way `relayctl
up` sets it up: Claude Code by its own cross-session inbox (relay's default for it), by its
channel and by the pane trigger (those two with the inbox off, CLAUDE_CODE_HARBOR_KITE=0); Codex CLI, Gemini CLI and
GitHub Copilot CLI by the pane trigger; OpenCode by relay's plugin (it starts a turn for mail
to an idle session; nothing is typed); Codex CLI also by its own queue (`codex queue`, a
notice queued into the session's thread: nothing is typed; relayd.arrival.codex_queue), and Copilot CLI
also by relay's extension (`copilot --experimental`, a notice enqueued into the session:
nothing is typed; relayd.arrival.copilot_extension). The program sits idle at its prompt; one message at a time is sent
(through relayd, timed from the send), and the time until the model's request carries it is
measured. A message that does not reach the model within MISS_AFTER seconds is a miss.
Between sends the program is let back to its prompt (its hooks report `idle`).

A program or tmux that is not installed makes its row say so; the rest still runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from relayd.arrival.claude_inbox_format import REFILL_PER_SECOND
from relayd.arrival.notify import START_GRACE

from .common import PYTHON, Row, child_env, median_ms, p99_ms, scratch_dir

AREA = "programs"
TRIGGER = "relay: new mail, call check_inbox"
MISS_AFTER = 10.0
MISS_AFTER_QUEUE = 20.0  # Codex looks at its queue on a timer (about 10 s): a later arrival is measured, not a miss
CASES = (("claude", "inbox"), ("claude", "channel"), ("claude", "pane"), ("codex", "queue"), ("codex", "pane"), ("gemini", "pane"), ("opencode", "plugin"), ("copilot", "pane"),
         ("copilot", "extension"))
TITLES = {"claude": "Claude Code", "codex": "Codex CLI", "gemini": "Gemini CLI", "opencode": "OpenCode", "copilot": "Copilot CLI"}
TARGETS = {"inbox": 0.25, "channel": 0.25, "pane": 0.5, "plugin": 0.5, "queue": 0.25, "extension": 0.25}  # p99 seconds (issues: safe delivery, the doors; OpenCode and Copilot)
READY = {"claude": "❯", "codex": "Ask Codex to do anything", "gemini": "Type your message", "opencode": "Ask anything", "copilot": "/ commands"}
API_KEY = "sk-ant-relay-bench-00000000000000000000"


def run(quick: bool, cases: tuple[tuple[str, str], ...] = CASES) -> list[Row]:
    sends = 10 if quick else 50
    # [codex-queue] A session hosting its own app server takes queued mail only on a timer
    # (relayd.arrival.codex_queue_format): fewer sends by the queue with --quick.
    rows = []
    for program, way in cases:
        count = 5 if quick and way == "queue" else sends
        paced = f", one every {1 / REFILL_PER_SECOND:.0f} s (Claude Code's rate for one sender)" if way == "inbox" else ""
        name = f"idle mail -> model, {TITLES[program]} by {way}, median / p99 / misses of {count}{paced}"
        missing = _missing(program)
        if missing:
            rows.append(Row(AREA, name, float("nan"), "ms", f"p99 <= {TARGETS[way] * 1000:.0f} ms, 0 misses", None, f"not run: {missing}"))
            continue
        try:
            latencies, misses, why_missed = _measure(program, way, count)
        except _NotRun as why:
            rows.append(Row(AREA, name, float("nan"), "ms", f"p99 <= {TARGETS[way] * 1000:.0f} ms, 0 misses", None, f"not run: {why}"))
            continue
        p99 = p99_ms(latencies) if latencies else float("nan")
        median = median_ms(latencies) if latencies else float("nan")
        ok = bool(latencies) and misses == 0 and p99 <= TARGETS[way] * 1000
        # The first send starts the session's first turn (Copilot CLI starts its session then):
        # said apart, so a tail that is the program's start-up reads as that.
        first = f"; the first send {latencies[0] * 1000:.0f} ms, the others' p99 {p99_ms(latencies[1:]):.0f} ms" if len(latencies) > 2 and not misses else ""
        rows.append(Row(AREA, name, round(p99, 1), "ms p99", f"p99 <= {TARGETS[way] * 1000:.0f} ms, 0 misses", ok,
                        f"median {median:.0f} ms, {misses} missed{first}" + (f"; the first miss: {why_missed}" if why_missed else "")))
    return rows


class _NotRun(Exception):
    """The case could not be set up (its reason is the row's note)."""


def _missing(program: str) -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from tests.support import agent_programs

    if agent_programs.installed_version(program) is None:
        return f"{agent_programs.PACKAGES[program]} is not installed (npm install --prefix tests/agents)"
    return None


def _responder(program: str):
    from tests.support import model_anthropic, model_gemini, model_openai

    if program == "claude":
        return model_anthropic.messages_responder(lambda body: [model_anthropic.text("Noted.")])
    if program == "codex":
        return model_openai.responses_responder(lambda body: [model_openai.message("Noted.")])
    if program in ("opencode", "copilot"):
        return model_openai.chat_responder(lambda body: model_openai.chat_text("Noted."))
    return model_gemini.gemini_responder(lambda body: [model_gemini.text("Noted.")])


def _measure(program: str, way: str, sends: int) -> tuple[list[float], int, str]:
    """The latencies, the misses, and what relay's `track` said of the first miss."""
    from tests.support import agent_programs
    from tests.support.hook_sessions import PROGRAMS
    from tests.support.scripted_model import ScriptedModel
    from tests.support.tmux_pane import Tmux, kill_strays

    from relayd.client.full import Client

    root = Path(scratch_dir("rbp-"))
    store, sock = str(root / "store"), str(root / "relayd.sock")
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    env = child_env(store, sock)

    def relayctl(*args: str) -> str:
        return subprocess.run([PYTHON, "-m", "relayctl", *args], env=env, check=True, capture_output=True, text=True).stdout

    relayctl("init")
    Path(store, "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    relayctl("register", "sender")
    relayctl("register", "inferno")
    relayctl("hooks", "install", "--for", program, "--agent", "inferno", "--project", str(project), *(["--extension"] if way == "extension" else []))
    daemon = subprocess.Popen([PYTHON, "-m", "relayd.daemon", "--dir", store, "--socket", sock], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmux = Tmux(root, "bench")
    latencies: list[float] = []
    misses, why_missed = 0, ""
    is_turn = PROGRAMS[program].is_turn
    try:
        with ScriptedModel(_responder(program)) as model:
            pane_env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm-256color", "LANG": "C.UTF-8", "RELAY_AGENT": "inferno"}
            argv = [str(agent_programs.program(program))]
            if program == "claude":
                agent_programs.claude_signed_in(home, API_KEY, trusted=project, channels=way == "channel")
                pane_env.update(ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=API_KEY, DISABLE_AUTOUPDATER="1")
                if way != "inbox":  # Claude Code's own inbox is relay's first way in where a session has one
                    pane_env["CLAUDE_CODE_HARBOR_KITE"] = "0"
                if way == "channel":
                    (root / "relay.json").write_text(relayctl("mcp-config", "--role", "inferno"))
                    argv += ["--mcp-config", str(root / "relay.json"), "--dangerously-load-development-channels", "server:relay"]
            else:
                pane_env.update(PROGRAMS[program].prepare(home, project, model.url))
                if way == "queue":
                    pane_env.pop("RELAY_CODEX_QUEUE", None)  # the tests' sessions turn the door off; here it is measured
                if way == "extension":
                    (root / "run").mkdir(mode=0o700)
                    pane_env["XDG_RUNTIME_DIR"] = str(root / "run")  # the extension's socket folder: this run's own
                    argv.append("--experimental")
                if program == "gemini":
                    settings = home / ".gemini" / "settings.json"
                    settings.write_text(json.dumps({**json.loads(settings.read_text()), "model": {"name": "gemini-2.5-flash"}}))
            tmux.start(argv, project, pane_env)
            started = time.monotonic()
            _past_start_up(tmux, program, way)
            relayctl("register", "inferno", "--notify", {"channel": "channel", "plugin": "hook"}.get(way, f"tmux:{tmux.target()}"))
            if way == "inbox":
                _wait_for_inbox(Path(store))
            if way == "queue":
                _learn_the_thread(Path(store), tmux)
            if way == "extension":
                _wait_for_extension(Path(store))
            # Claude Code admits one sender's peer messages 30 at once, then one every 2 s
            # (relayd.arrival.claude_inbox_format): faster sends wait for it in relay, and the
            # row would measure Claude Code's rate, not the way in. The inbox row keeps to it.
            pace = 1 / REFILL_PER_SECOND if way == "inbox" else 0.0
            if way == "pane":
                # relay types nothing into a program in its first START_GRACE seconds (it may not
                # have drawn its input box yet): the first send would measure that wait, not idle mail
                time.sleep(max(0.0, started + START_GRACE - time.monotonic()))
            last = -pace
            with Client(store, sock) as client:
                for n in range(sends):
                    _wait_idle(Path(store), program, tmux)
                    time.sleep(max(0.0, last + pace - time.perf_counter()))
                    last = time.perf_counter()
                    subject = f"bench mail {n:03d}"
                    start = time.perf_counter()
                    sent = client.call("send", {"agent": "sender", "to": ["inferno"], "body": subject})
                    try:
                        model.wait_for(lambda r, s=subject: is_turn(r) and s in r.text, timeout=MISS_AFTER_QUEUE if way == "queue" else MISS_AFTER)
                    except AssertionError:
                        misses += 1
                        if not why_missed:
                            why_missed = _told(client.call("track", {"id": sent["messages"][0]["id"]}))
                        continue
                    latencies.append(time.perf_counter() - start)
    finally:
        tmux.kill()
        kill_strays(home)
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(root, ignore_errors=True)
    return latencies, misses, why_missed


def _told(track: dict) -> str:
    """A missed message's way to its one recipient, in a line."""
    way = track["recipients"][0]
    told = way.get("announced") or {}
    said = [f"announced {told.get('how')} {'ok' if told.get('ok') else 'failed'}" + (f" ({told['note']})" if told.get("note") else "")
            if told else "not announced", "read" if way.get("read") else "unread"]
    said += [f"{d['how']}: {d['status']}" for d in way.get("door") or []]
    if way.get("held"):
        said.append(f"held: {way['held'].get('why')}")
    return ", ".join(said)


def _learn_the_thread(store: Path, tmux) -> None:
    """[codex-queue] The person's first prompt: Codex makes the thread then, and relay's prompt
    hook reports it; the queue door must be usable before anything is measured."""
    tmux.type_line("Carry on.", "Carry on.")
    door = store / "agents" / "inferno" / "codex-queue"
    deadline = time.monotonic() + 30
    while not door.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    found = json.loads(door.read_text()) if door.exists() else {"unusable": "no thread reported by relay's hooks within 30 s"}
    if found.get("unusable"):
        raise _NotRun(f"Codex's queue cannot be used: {found['unusable']}")


def _wait_for_extension(store: Path) -> None:
    """[copilot-extension] Until relay's extension has reported itself, at most 30 s: the
    mail must go through it, not the pane trigger the agent is registered with."""
    door = store / "agents" / "inferno" / "copilot-extension"
    deadline = time.monotonic() + 30
    while not door.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    found = json.loads(door.read_text()) if door.exists() else {"unusable": "relay's extension did not report itself within 30 s"}
    if found.get("unusable"):
        raise _NotRun(f"relay's Copilot extension cannot be used: {found['unusable']}")


def _past_start_up(tmux, program: str, way: str) -> None:
    """What a person does once when the program starts, then its empty prompt."""
    if program == "codex":
        tmux.wait_for("Trust this folder?", settle=1)
        tmux.keys("Enter")
        tmux.wait_for("Hooks need review", settle=1)
        tmux.keys("Down", "Enter")
    if program == "claude" and way == "channel":
        tmux.wait_for("I am using this for local development", settle=1)
        tmux.keys("Enter")
    tmux.wait_for(READY[program], timeout=90, settle=1)


def _wait_for_inbox(store: Path) -> None:
    """Until relay's hook has reported the session's inbox, at most 30 s (the inbox row:
    the mail must go through it, not the pane trigger the agent is registered with)."""
    door = store / "agents" / "inferno" / "claude-inbox"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if json.loads(door.read_text()).get("proc_start"):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the session never reported a usable inbox: {door.read_text() if door.exists() else 'nothing'}")


def _wait_idle(store: Path, program: str, tmux) -> None:
    """Until the program is back at its prompt (its hooks say `idle`), at most 30 s. Before its
    first turn a program may have said nothing yet (Copilot CLI starts its session, and
    OpenCode's plugin sees one, only with the first prompt): at its prompt all the same."""
    state = store / "agents" / "inferno" / "program-state"
    if not state.exists():
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if json.loads(state.read_text())["state"] == "idle":
                time.sleep(0.3)  # the program redraws its prompt after the hook
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
