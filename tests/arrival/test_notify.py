"""Pane notifications with a real tmux server, zellij through a recording stub, cmd: hooks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from relayd.arrival.notify import notify_new_messages
from relayd.store import Store
from support import inproc
from support.recording_pane import TRIGGER, Tmux, tmux  # noqa: F401  (a fixture)
from support.waiting import wait_for


RETRY = 0.1  # seconds between relayd's retry sweeps in these tests (relayd's own: 5)


@pytest.fixture
def prompt_pane(short_tmp: Path):
    server = Tmux(short_tmp, prompt=True)
    try:
        wait_for("the prompt program's prompt", lambda: server.input_row() == ">")
        yield server
    finally:
        server.close()


@pytest.fixture
def configured(relayctl, store_dir: Path) -> None:
    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}}))
    relayctl.setup("register", name="sender")


@pytest.mark.slow
def test_tmux_trigger_once_until_the_inbox_is_read(relayctl, configured, tmux: Tmux, store_dir: Path) -> None:
    relayctl("register", "inferno", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
    relayctl("send", "inferno", "SECRET-BODY-1", agent="sender")
    assert tmux.lines_after_sentinel() == [TRIGGER]
    assert TRIGGER in tmux.capture() and "SECRET-BODY" not in tmux.capture()
    assert (store_dir / "agents" / "inferno" / "pending").exists()

    # A second message before the inbox is read: no second trigger.
    relayctl("send", "inferno", "SECRET-BODY-2", agent="sender")
    assert tmux.lines_after_sentinel() == []

    # Reading the inbox clears the flag; the next message triggers again.
    relayctl("read", "--unread", "--mark-read", agent="inferno")
    assert not (store_dir / "agents" / "inferno" / "pending").exists()
    relayctl("send", "inferno", "SECRET-BODY-3", agent="sender")
    assert tmux.lines_after_sentinel() == [TRIGGER]
    assert "SECRET-BODY" not in tmux.received.read_text()


@pytest.mark.slow
def test_a_pane_in_copy_mode_is_not_typed_into(relayctl, configured, tmux: Tmux, store_dir: Path) -> None:
    relayctl("register", "glacier", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
    tmux("copy-mode", "-t", tmux.pane)
    assert tmux("display-message", "-p", "-t", tmux.pane, "#{pane_in_mode}").strip() == "1"
    with Store(str(store_dir)) as store:
        relayctl("send", "glacier", "while copying", agent="sender")
        # Skipped, flag removed so that the trigger is retried later.
        assert not (store_dir / "agents" / "glacier" / "pending").exists()
        [outcome] = notify_new_messages(store, ["glacier"])
        assert outcome["ok"] and outcome.get("retry") and "copy mode" in outcome["skipped"]
    tmux("send-keys", "-t", tmux.pane, "-X", "cancel")
    assert tmux.lines_after_sentinel() == []
    relayctl("send", "glacier", "after copying", agent="sender")
    assert tmux.lines_after_sentinel() == [TRIGGER]


@pytest.mark.slow
def test_a_missing_tmux_target_is_reported_not_fatal(relayctl, configured, tmux: Tmux, store_dir: Path) -> None:
    relayctl("register", "shadow", "--notify", f"tmux:{tmux.socket}:%999")
    sent = relayctl("send", "shadow", "hello", agent="sender")
    assert sent.returncode == 0 and "notifying shadow failed" in sent.stderr
    assert "Traceback" not in sent.stderr
    assert not (store_dir / "agents" / "shadow" / "pending").exists()  # the next message tries again
    assert json.loads(relayctl("--json", "read", agent="shadow").stdout)[0]["body"] == "hello"


@pytest.mark.slow
def test_the_daemon_retries_a_trigger_held_back_by_copy_mode_once_the_pane_leaves_it(relayctl, configured, tmux: Tmux, relay_env, store_dir: Path) -> None:
    """relayd's notifier (in this process: its retry sweeps counted, not slept through)."""
    from relayd.arrival.notify import agents_awaiting_trigger

    relayctl("register", "glacier", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
    with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], notify=True, retry_interval=RETRY) as relayd:
        tmux("copy-mode", "-t", tmux.pane)
        relayctl("send", "glacier", "SECRET-BODY while copying", agent="sender")
        wait_for("relayd to hold the trigger back", lambda: "copy mode" in relayd.notifier.held.get("glacier", ""))
        relayd.sweeps(2)  # two retry sweeps with the pane still in copy mode
        assert tmux.received.read_text() == ""  # nothing typed into the copy-mode pane
        assert not (store_dir / "agents" / "glacier" / "pending").exists()

        # No new mail arrives; leaving copy mode is enough for the timer to deliver it.
        tmux("send-keys", "-t", tmux.pane, "-X", "cancel")
        wait_for("the retried trigger", lambda: TRIGGER in tmux.received.read_text().splitlines())
        assert (store_dir / "agents" / "glacier" / "pending").exists()
        relayd.sweeps(4)  # four more retry sweeps: the pending flag keeps it to one trigger
        assert tmux.lines_after_sentinel() == [TRIGGER]
        assert "SECRET-BODY" not in tmux.received.read_text()
        assert "glacier" not in relayd.notifier.held  # (delivered: what relayd logs as "held trigger delivered")

        relayctl("read", "--unread", "--mark-read", agent="glacier")  # clears the pending flag
        with Store(str(store_dir)) as store:
            assert agents_awaiting_trigger(store) == []  # and nothing unread: nothing to retry


# -- zellij (no binary can be installed here: a recording stub on PATH) -----------------------


@pytest.fixture
def zellij_env(relay_env, short_tmp: Path):
    bin_dir = short_tmp / "bin"
    bin_dir.mkdir()
    log = short_tmp / "zellij.log"
    stub = bin_dir / "zellij"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "if sys.argv[1:] == ['--version']:\n"
        "    print('zellij ' + os.environ['ZELLIJ_STUB_VERSION'])\n"
        "    sys.exit(0)\n"
        f"with open({str(log)!r}, 'a') as fh:\n"
        "    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    stub.chmod(0o755)
    env = dict(relay_env, PATH=f"{bin_dir}:{relay_env['PATH']}")
    return env, log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow
def test_zellij_new_enough_writes_to_the_pane_id(relayctl, configured, zellij_env) -> None:
    env, log = zellij_env
    env["ZELLIJ_STUB_VERSION"] = "0.44.1"
    relayctl.env = env
    relayctl("register", "storm", "--notify", "zellij:3")
    relayctl("send", "storm", "body text", agent="sender", process=True)
    relayctl("send", "storm", "second", agent="sender", process=True)  # pending: no second trigger
    assert _calls(log) == [
        ["action", "write-chars", "--pane-id", "3", TRIGGER],
        ["action", "write-chars", "--pane-id", "3", "\r"],
    ]


@pytest.mark.slow
def test_zellij_older_uses_tab_and_focus(relayctl, configured, zellij_env) -> None:
    # Its sends are processes of their own: relay asks `zellij --version` once a process.
    env, log = zellij_env
    env["ZELLIJ_STUB_VERSION"] = "0.43.1"
    relayctl.env = env
    relayctl("register", "storm", "--notify", "zellij:3@2/right/down")
    relayctl("send", "storm", "body text", agent="sender", process=True)
    assert _calls(log) == [
        ["action", "go-to-tab", "2"],
        ["action", "move-focus", "right"],
        ["action", "move-focus", "down"],
        ["action", "write-chars", TRIGGER],
        ["action", "write-chars", "\r"],
    ]
    relayctl("register", "glacier", "--notify", "zellij:4")
    sent = relayctl("send", "glacier", "x", agent="sender", process=True)
    assert "notifying glacier failed" in sent.stderr and "0.44.1" in sent.stderr


@pytest.mark.slow
def test_zellij_triggers_name_the_session_recorded_at_register(relayctl, configured, zellij_env, relay_env) -> None:
    env, log = zellij_env
    env["ZELLIJ_STUB_VERSION"] = "0.44.1"
    inside = dict(env, ZELLIJ_SESSION_NAME="team-a", ZELLIJ_PANE_ID="3")  # register runs in the pane
    relayctl.env = inside
    relayctl("register", "storm", "--notify", "zellij:3")
    relayctl("register", "glacier", "--notify", "zellij:4@2/right", "--session", "team-b")
    relayctl.env = {k: v for k, v in env.items() if not k.startswith("ZELLIJ_SESSION")} | {"ZELLIJ_STUB_VERSION": "0.44.1"}
    store = Path(relay_env["RELAY_DIR"])
    assert [json.loads((store / "agents" / name / "meta.json").read_text())["session"] for name in ("storm", "glacier")] == ["team-a", "team-b"]
    relayctl("send", "storm", "body text", agent="sender", process=True)  # sent from outside zellij (as relayd runs)
    relayctl("send", "glacier", "body text", agent="sender", process=True)
    assert _calls(log) == [
        ["--session", "team-a", "action", "write-chars", "--pane-id", "3", TRIGGER],
        ["--session", "team-a", "action", "write-chars", "--pane-id", "3", "\r"],
        ["--session", "team-b", "action", "write-chars", "--pane-id", "4", TRIGGER],
        ["--session", "team-b", "action", "write-chars", "--pane-id", "4", "\r"],
    ]


@pytest.mark.slow
def test_cmd_notification_runs_argv_without_a_shell(relayctl, configured, short_tmp: Path) -> None:
    record = short_tmp / "cmd.json"
    script = short_tmp / "notify me.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps([sys.argv[1:], os.environ['RELAY_NOTIFY_AGENT'], os.environ['RELAY_TRIGGER']]))\n"
    )
    relayctl("register", "inferno", "--notify", f"cmd:{sys.executable} '{script}' --flag '$(touch pwned)'")
    relayctl("send", "inferno", "the body", agent="sender")
    assert json.loads(record.read_text()) == [["--flag", "$(touch pwned)"], "inferno", TRIGGER]
    assert not (Path.cwd() / "pwned").exists()


@pytest.mark.slow
def test_channel_and_hook_agents_get_no_trigger(relayctl, configured, store_dir: Path) -> None:
    relayctl("register", "overlord", "--notify", "channel")
    with Store(str(store_dir)) as store:
        relayctl("send", "overlord", "hi", agent="sender")
        assert not (store_dir / "agents" / "overlord" / "pending").exists()
        assert notify_new_messages(store, ["overlord", "nobody"])[0]["skipped"]
        assert notify_new_messages(store, ["nobody"])[0]["ok"] is False  # reported, never raised


@pytest.mark.slow
def test_a_skipped_trigger_is_found_again_for_retry(relayctl, configured, tmux: Tmux, store_dir: Path) -> None:
    from relayd.arrival.notify import agents_awaiting_trigger

    relayctl("register", "glacier", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
    relayctl("register", "storm", "--notify", "channel")
    tmux("copy-mode", "-t", tmux.pane)
    relayctl("send", "glacier", "while copying", agent="sender")
    relayctl("send", "storm", "not a pane agent", agent="sender")
    with Store(str(store_dir)) as store:
        assert agents_awaiting_trigger(store) == ["glacier"]
        tmux("send-keys", "-t", tmux.pane, "-X", "cancel")
        assert [o["ok"] for o in notify_new_messages(store, agents_awaiting_trigger(store))] == [True]
        assert tmux.lines_after_sentinel() == [TRIGGER]
        assert agents_awaiting_trigger(store) == []  # triggered: pending until read


# -- someone's unsent text in the pane --------------------------------------------------------

DRAFT = "my half-typed draft"


def _type_a_draft(pane: Tmux) -> None:
    """A person types into the prompt and does not press Enter."""
    pane("send-keys", "-t", pane.pane, "-l", DRAFT)
    wait_for("the draft on the pane's input line", lambda: pane.input_row() == f"> {DRAFT}")


@pytest.mark.slow
def test_a_trigger_waits_for_a_draft_to_be_sent_and_then_arrives_once(relayctl, configured, prompt_pane: Tmux, relay_env, store_dir: Path) -> None:
    relayctl("register", "inferno", "--notify", f"tmux:{prompt_pane.socket}:{prompt_pane.pane}")
    _type_a_draft(prompt_pane)
    with inproc.in_a_thread(str(store_dir), relay_env["RELAY_SOCKET"], notify=True, retry_interval=RETRY) as relayd:
        for n in range(3):  # a burst of mail while the person is typing
            relayctl("send", "inferno", f"SECRET-BODY-{n}", agent="sender")
        wait_for("relayd to hold the trigger back", lambda: "unsent text" in relayd.notifier.held.get("inferno", ""))
        relayd.sweeps(3)  # three more retry sweeps while the draft is still there
        assert prompt_pane.input_row() == f"> {DRAFT}"  # the draft untouched
        assert prompt_pane.received.read_text() == ""  # and not submitted
        # A held trigger leaves no pending flag (or the next mail would never try again). Each
        # round holds it while it looks at the pane, and the next round may already be looking.
        pending = store_dir / "agents" / "inferno" / "pending"
        wait_for("the held trigger's pending flag gone between rounds", lambda: not pending.exists(), 5)

        prompt_pane("send-keys", "-t", prompt_pane.pane, "Enter")  # the person sends it
        wait_for("the trigger after the draft was sent", lambda: TRIGGER in prompt_pane.received.read_text())
        relayd.sweeps(3)  # three more retry sweeps: the pending flag keeps the burst to one trigger
        assert prompt_pane.lines_after_sentinel() == [DRAFT, TRIGGER]
        assert "inferno" not in relayd.notifier.held  # (delivered: what relayd logs as "held trigger delivered")


@pytest.mark.slow
def test_without_relayd_the_sender_is_told_and_redeliver_retries_once_the_line_is_empty(relayctl, configured, prompt_pane: Tmux, store_dir: Path) -> None:
    relayctl("register", "inferno", "--notify", f"tmux:{prompt_pane.socket}:{prompt_pane.pane}")
    _type_a_draft(prompt_pane)
    sent = relayctl("send", "inferno", "SECRET-BODY", agent="sender")
    assert sent.returncode == 0 and "trigger for inferno held back" in sent.stderr and "unsent text" in sent.stderr
    assert "relayctl redeliver" in sent.stderr
    relayctl("redeliver")  # still typing: held again
    assert prompt_pane.input_row() == f"> {DRAFT}"

    prompt_pane("send-keys", "-t", prompt_pane.pane, "C-u")  # the person clears the line instead
    wait_for("the cleared input line", lambda: prompt_pane.input_row() == ">")
    relayctl("redeliver")
    relayctl("redeliver")  # pending: no second trigger
    assert prompt_pane.lines_after_sentinel() == [TRIGGER]
    assert DRAFT not in prompt_pane.received.read_text()


def test_a_program_that_started_a_moment_ago_is_not_typed_into_until_its_first_screen_settles(prompt_pane: Tmux, monkeypatch) -> None:
    """Claude Code draws its prompt, then a first-start question over it a moment later: relay
    types nothing into a program younger than START_GRACE, however ready its prompt looks,
    and types once the program is older (START_GRACE made 0 here, not waited for)."""
    from relayd.arrival import notify
    from relayd.arrival.program_process import age, process
    from relayd.arrival.program_state import ProgramState

    pid = int(prompt_pane("display-message", "-p", "-t", prompt_pane.pane, "#{pane_pid}").strip())
    owner = process(pid)
    assert owner is not None and 0 <= age(owner) < 60
    state = ProgramState(state="idle", at="2026-12-02T00:00:00.000Z", pid=owner.pid, start=owner.start)
    target = f"{prompt_pane.socket}:{prompt_pane.pane}"  # (the notify value after "tmux:")
    monkeypatch.setattr(notify, "START_GRACE", age(owner) + 3600)  # as if it started just now
    with pytest.raises(notify._Skip, match="started .* s ago and may still draw a first-start question"):
        notify._tmux(target, TRIGGER, 10, ">", lambda: state, needs_prompt=True)
    assert prompt_pane.input_row() == ">"  # nothing typed
    monkeypatch.setattr(notify, "START_GRACE", 0.0)
    # its hooks report the turn the trigger starts, as a program's prompt hook does
    working = ProgramState(state="working", at="2026-12-02T00:00:01.000Z", pid=owner.pid, start=owner.start)
    notify._tmux(target, TRIGGER, 10, ">", lambda: working if TRIGGER in prompt_pane.received.read_text() else state, needs_prompt=True)
    assert prompt_pane.lines_after_sentinel() == [TRIGGER]


def test_mail_waits_for_the_door_of_a_restarted_session_before_the_pane_is_typed_into(relayctl, configured, tmux: Tmux, store_dir: Path, monkeypatch) -> None:
    """The agent's last session had relay's Copilot extension and has ended; the program in
    its pane started a moment ago, so its own session may report a door yet: relay types
    nothing and says why, and types the pane trigger once DOOR_WAIT has passed. A door void
    for another reason (Copilot without --experimental) is no reason to wait."""
    import subprocess

    from relayd import ops
    from relayd.arrival import notify

    relayctl("register", "inferno", "--notify", f"tmux:{tmux.socket}:{tmux.pane}")
    ended = subprocess.Popen(["true"])
    ended.wait()
    door_file = store_dir / "agents" / "inferno" / "copilot-extension"
    door_file.write_text(json.dumps({"socket": str(store_dir / "gone.sock"), "pid": ended.pid, "proc_start": "1"}))
    with Store(str(store_dir)) as store:
        ops.call(store, "send", {"agent": "sender", "to": ["inferno"], "body": "SECRET-BODY"})  # (sending alone announces nothing)
        monkeypatch.setattr(notify, "DOOR_WAIT", 3600.0)  # the pane's program counts as just started
        [outcome] = notify_new_messages(store, ["inferno"])
        assert outcome["retry"] and "Copilot extension of its last session is gone" in outcome["skipped"]
        assert "waits up to 3600 s for its new session's door" in outcome["skipped"] and 3500 < outcome["retry_in"] <= 3600
        assert tmux.lines_after_sentinel() == []  # nothing typed
        assert not (store_dir / "agents" / "inferno" / "pending").exists()  # (so the next round tries again)

        monkeypatch.setattr(notify, "DOOR_WAIT", 0.0)  # the wait is over: keystrokes, as without a door
        [outcome] = notify_new_messages(store, ["inferno"])
        assert outcome["ok"] and not outcome.get("skipped")
        assert tmux.lines_after_sentinel() == [TRIGGER]

        relayctl("read", "--unread", "--mark-read", agent="inferno")
        door_file.write_text(json.dumps({"socket": "", "unusable": "Copilot runs without --experimental"}))
        ops.call(store, "send", {"agent": "sender", "to": ["inferno"], "body": "SECRET-BODY-2"})
        monkeypatch.setattr(notify, "DOOR_WAIT", 3600.0)
        [outcome] = notify_new_messages(store, ["inferno"])
        assert outcome["ok"] and not outcome.get("skipped")
        assert tmux.lines_after_sentinel() == [TRIGGER]


def test_the_age_of_a_process_that_ended_is_unknown() -> None:
    import subprocess

    from relayd.arrival.program_process import age, process

    child = subprocess.Popen(["sleep", "30"])
    owner = process(child.pid)
    assert owner is not None and age(owner) is not None and age(owner) < 30
    child.kill()
    child.wait()
    assert age(owner) is None
