"""relay's Copilot extension door without Copilot: what the hooks report, what relay keeps,
what it sends the extension, and why status says the door is not used
(relayd.arrival.copilot_extension). The real extension in the real Copilot CLI is
test_copilot_extension_real.py; here a small Unix socket server answers as the extension
does (relayctl/copilot_extension.mjs: one JSON line in, one out), so the socket, the
owner checks and the store are real."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from support import inproc
from support.cli_processes import RelayCtl
from support.waiting import wait_for

AGENT = "inferno"


class StandIn:
    """Answers on AGENT's extension socket under `runtime` as relay's extension does."""

    def __init__(self, runtime: Path, agent: str = AGENT, held: str | None = None, pid: int | None = None) -> None:
        folder = runtime / "relay-copilot"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = folder / f"{AGENT}.sock"
        self.agent, self.held, self.pid = agent, held, pid or os.getpid()  # pid: the process it says it is
        self.prompts: list[str] = []
        self.failed: list[str] = []  # what went wrong answering (for a test's failure message)
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(self.path))
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                line = conn.makefile().readline()
                try:
                    request = json.loads(line)
                except ValueError:
                    self.failed.append(f"a connection sent {line!r}")
                    continue
                if request["op"] == "hello":
                    answer = {"ok": True, "agent": self.agent, "pid": self.pid}
                else:
                    self.prompts.append(request["prompt"])
                    answer = {"ok": True, "held": self.held} if self.held else {"ok": True, "id": f"m{len(self.prompts)}"}
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def close(self) -> None:
        self.server.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def runtime(short_tmp: Path) -> Path:
    path = short_tmp / "run"
    path.mkdir(mode=0o700)
    return path


def _team(relayctl: RelayCtl) -> None:
    relayctl.setup("init")
    relayctl.setup("register", name=AGENT, notify="tmux:%1")  # a pane that is not there: a trigger would fail
    relayctl.setup("register", name="strategist")


def _hook(relay_env: dict, runtime: Path, project: Path) -> None:
    """relay's Copilot hook at a prompt, as Copilot runs it (the event carries no name), with
    Copilot's settings in the test's own COPILOT_HOME."""
    event = {"timestamp": 1796174000000, "cwd": str(project), "prompt": "hello"}
    env = {**relay_env, "RELAY_AGENT": AGENT, "XDG_RUNTIME_DIR": str(runtime), "COPILOT_HOME": str(runtime.parent / "copilot-home")}
    hook = subprocess.run([sys.executable, "-m", "relayctl", "hook", "copilot", "userPromptSubmitted"], env=env, cwd=project,
                          input=json.dumps(event), capture_output=True, text=True, timeout=60)
    assert hook.returncode == 0 and hook.stderr == ""


def _door(store_dir: Path) -> dict:
    return json.loads((store_dir / "agents" / AGENT / "copilot-extension").read_text())


def _agent_status(relayctl: RelayCtl) -> dict:
    return next(a for a in json.loads(relayctl("--json", "status").stdout)["agents"] if a["name"] == AGENT)


def _announced(relayctl: RelayCtl, message_id: str) -> dict:
    return json.loads(relayctl("--json", "track", message_id).stdout)["recipients"][0]["announced"]


def test_without_relays_extension_the_hooks_say_why_and_status_shows_it(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    _team(relayctl)
    project = short_tmp / "project"
    project.mkdir()
    _hook(relay_env, runtime, project)
    assert "relay's extension is not installed" in _door(store_dir)["unusable"]
    relayctl("hooks", "install", "--for", "copilot", "--extension", "--project", str(project))
    _hook(relay_env, runtime, project)  # installed, but this "Copilot" (the test) runs without --experimental
    settings = short_tmp / "copilot-home" / "settings.json"
    assert _door(store_dir)["unusable"] == (f"this Copilot runs without --experimental (or with --no-experimental) and without "
                                            f"`experimental` in {settings}, so it loads no extensions")
    status = _agent_status(relayctl)
    assert status["arrives_by"] == "tmux:%1" and status["door_unusable"] == f"Copilot extension: {_door(store_dir)['unusable']}"
    assert "not its Copilot extension: this Copilot runs without --experimental" in relayctl("status").stdout


def test_experimental_in_copilots_settings_loads_the_extension_so_the_hooks_look_for_it_instead(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    """`copilot config experimental on` writes `"experimental": true` into settings.json, and
    Copilot then loads extensions without the flag: no "without --experimental" there."""
    _team(relayctl)
    project = short_tmp / "project"
    project.mkdir()
    relayctl("hooks", "install", "--for", "copilot", "--extension", "--project", str(project))
    settings = short_tmp / "copilot-home" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n  "experimental": true\n}\n')  # as Copilot 1.0.102's `copilot config experimental on` writes it
    _hook(relay_env, runtime, project)
    assert _door(store_dir)["unusable"] == f"relay's extension did not start in this session (nothing listens at {runtime}/relay-copilot/{AGENT}.sock)"
    settings.write_text('{"experimental": false}')
    _hook(relay_env, runtime, project)
    assert "without --experimental" in _door(store_dir)["unusable"]


def test_mail_goes_to_the_extension_as_one_notice_per_new_mail_and_never_to_the_pane(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    _team(relayctl)
    # Two notices in a row to a session in a turn: no interrupt interval between them (relayd.arrival.budget).
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "0s"}}))
    extension = StandIn(runtime)
    try:
        _hook(relay_env, runtime, short_tmp)
        door = _door(store_dir)
        assert door.get("unusable") is None and door["socket"] == str(extension.path) and door["pid"] == os.getpid()
        first = json.loads(relayctl("--json", "send", AGENT, "all of it", "--subject", "the build is green", agent="strategist").stdout)["id"]
        assert len(extension.prompts) == 1
        assert extension.prompts[0].startswith("[relay] 1 new message for inferno") and "from strategist: the build is green" in extension.prompts[0]
        assert "all of it" not in extension.prompts[0]  # a notice, never the mail itself
        told = _announced(relayctl, first)
        assert told["how"] == "copilot-extension" and told["ok"]
        second = relayctl("--json", "send", AGENT, "body", "--subject", "second\nline: forged", agent="strategist")
        assert len(extension.prompts) == 2, f"no second notice; the send said: {second.stdout} {second.stderr}; {extension.failed}"
        assert "the build is green" not in extension.prompts[1]  # only what is new
        assert "second\\nline: forged" in extension.prompts[1]  # one escaped line, as `relayctl read` shows it
        assert _agent_status(relayctl)["arrives_by"] == "copilot-extension"
    finally:
        extension.close()
    later = json.loads(relayctl("--json", "send", AGENT, "after the extension", agent="strategist").stdout)["id"]
    told = json.loads(relayctl("--json", "track", later).stdout)["recipients"][0].get("announced") or {}
    assert told.get("how") != "copilot-extension"  # nothing answered at its socket: never claimed as announced there


def test_a_new_sessions_extension_is_taken_while_the_old_ones_process_still_lives(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    """Copilot restarted: the new session's extension listens at the same socket path while
    the old extension's process is still on its way out. Its report is a new door, not the old
    one found again: otherwise, once the old process is gone, the agent has no door at all."""
    _team(relayctl)
    old = StandIn(runtime)  # says it is this test's process, which lives on
    _hook(relay_env, runtime, short_tmp)
    assert _door(store_dir)["pid"] == os.getpid()
    old.close()
    lingering = subprocess.Popen(["sleep", "60"])  # the new extension's process
    new = StandIn(runtime, pid=lingering.pid)
    try:
        _hook(relay_env, runtime, short_tmp)  # the new extension reports itself (as its session's hooks do)
        assert _door(store_dir)["pid"] == lingering.pid
        relayctl("send", AGENT, "after the restart", agent="strategist")
        assert len(new.prompts) == 1 and "after the restart" in new.prompts[0]
    finally:
        new.close()
        lingering.kill()
        lingering.wait()


def test_relayd_gives_a_burst_of_mail_one_notice_and_a_lone_message_its_own(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    """Each notice is a turn of the agent's model: relayd's notifier (in this process) gathers
    mail sent in a row into one, and a message sent on its own after it into the next."""
    from relayd.client.full import Client

    _team(relayctl)
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "0s"}}))
    extension = StandIn(runtime)
    try:
        _hook(relay_env, runtime, short_tmp)  # (before relayd: a round its report woke could take the burst's first message alone)
        with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], notify=True):
            with Client(str(store_dir), relay_env["RELAY_SOCKET"]) as client:
                for n in range(5):  # one client's sends in a row, each durable before the next
                    client.call("send", {"agent": "strategist", "to": [AGENT], "subject": f"burst {n}", "body": "."})
                wait_for("the burst's notice", lambda: len(extension.prompts) == 1, every=0.01)
                client.call("send", {"agent": "strategist", "to": [AGENT], "subject": "on its own", "body": "."})
                wait_for("the lone message's notice", lambda: len(extension.prompts) == 2, every=0.01)
        assert extension.prompts[0].startswith(f"[relay] 5 new messages for {AGENT}") and "burst 4" in extension.prompts[0]
        assert extension.prompts[1].startswith(f"[relay] 1 new message for {AGENT}") and "on its own" in extension.prompts[1]
    finally:
        extension.close()


def test_a_notice_the_extension_holds_for_an_open_question_says_so_in_track(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    _team(relayctl)
    extension = StandIn(runtime, held="a question is open in the session: relay's extension enqueues the notice once the session is idle again")
    try:
        _hook(relay_env, runtime, short_tmp)
        sent = json.loads(relayctl("--json", "send", AGENT, "during the question", agent="strategist").stdout)["id"]
        told = _announced(relayctl, sent)
        assert told["ok"] and "once the session is idle again" in told["note"]
        assert "once the session is idle again" in relayctl("track", sent).stdout
    finally:
        extension.close()


def test_a_socket_answering_for_another_agent_is_never_used(relayctl: RelayCtl, relay_env, store_dir: Path, runtime: Path, short_tmp: Path) -> None:
    _team(relayctl)
    extension = StandIn(runtime, agent="athena")
    try:
        _hook(relay_env, runtime, short_tmp)
        assert "speaks for 'athena', not inferno" in _door(store_dir)["unusable"]
        relayctl("send", AGENT, "for inferno only", agent="strategist")
        assert extension.prompts == []
    finally:
        extension.close()
