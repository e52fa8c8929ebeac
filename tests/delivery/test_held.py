"""Mail that waits says so (relayd.delivery.held): `track`, `status` and `send --wait` say why
mail is not in front of its recipient's model after delivery.held_after, and the sender gets
one notice after delivery.held_notice_after. The clock is the store's, moved in memory; the
last tests run relayd and a real tmux pane in copy mode.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from relayd import ops
from relayd.arrival.program_process import process
from relayd.config import load_config
from relayd.delivery.held import note_held, notice_held
from relayd.errors import StoreError
from relayd.store import Store
from support.recording_pane import TRIGGER, Tmux, tmux  # noqa: F401  (a fixture)
from support.waiting import wait_for


class Clock:
    """The store's clock: the real time plus however far a test moved it."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


@pytest.fixture
def store(relayctl, store_dir: Path):
    relayctl.setup("init")
    relayctl.setup("register", name="alice")
    relayctl.setup("register", name="glacier", notify="none")
    relayctl.setup("register", name="storm", notify="hook")
    clock = Clock()
    with Store(str(store_dir), fsync=False, clock=clock) as opened:
        opened.test_clock = clock  # type: ignore[attr-defined]
        yield opened


def send(store: Store, to: str, body: str) -> str:
    return ops.call(store, "send", {"agent": "alice", "to": [to], "body": body})["messages"][0]["id"]


def way(store: Store, message_id: str) -> dict:
    [found] = ops.call(store, "track", {"id": message_id})["recipients"]
    return found


def agent_status(store: Store, name: str) -> dict:
    return next(a for a in ops.call(store, "status", {})["agents"] if a["name"] == name)


def test_mail_says_why_it_waits_only_after_the_set_time(store: Store) -> None:
    message_id = send(store, "glacier", "deploy at 14:00")
    store.test_clock.ahead = 29  # type: ignore[attr-defined]
    assert "held" not in way(store, message_id) and agent_status(store, "glacier").get("held") is None
    store.test_clock.ahead = 31  # type: ignore[attr-defined]
    held = way(store, message_id)["held"]
    assert held["why"].startswith("glacier has no arrival mechanism") and held["since"] == way(store, message_id)["stored"]
    assert agent_status(store, "glacier")["held"] == held
    assert "held" not in agent_status(store, "alice") or agent_status(store, "alice")["held"] is None

    ops.call(store, "read", {"agent": "glacier", "unread": True, "mark_read": True})
    assert "held" not in way(store, message_id) and agent_status(store, "glacier")["held"] is None


def test_the_arrival_wings_reason_and_first_hold_are_what_track_says(store: Store) -> None:
    message_id = send(store, "storm", "review the schema")
    stored = way(store, message_id)["stored"]
    with store.agent_dir("storm") as agent:
        note_held(agent, "its program is asking the person a question", "2026-12-01T20:19:08.000Z")  # before the mail: not shown
        note_held(agent, "its program is asking the person a question", "2099-01-01T00:00:00.000Z")  # the same hold: keeps its since
    store.test_clock.ahead = 40  # type: ignore[attr-defined]
    assert way(store, message_id)["held"] == {"why": "storm's program is asking the person a question", "since": stored}
    with store.agent_dir("storm") as agent:
        note_held(agent, "tmux pane %3 is in copy mode", "2099-01-01T00:00:00.000Z")  # another reason, the same run of holds
    assert way(store, message_id)["held"]["why"] == "storm's tmux pane %3 is in copy mode"


def test_a_trigger_that_landed_means_not_held(store: Store) -> None:
    relay_told = send(store, "storm", "told")
    ops.call(store, "announced", {"agent": "storm", "how": "channel"})
    store.test_clock.ahead = 60  # type: ignore[attr-defined]
    assert "held" not in way(store, relay_told)
    assert agent_status(store, "storm")["held"] is None


def test_mail_a_hook_handed_into_a_turn_that_failed_is_held_and_says_why(store: Store) -> None:
    """The hook's announcement is its read: once the failed turn put the mail back as unread
    (relayd.arrival.program_state), it waits, and track says the turn failed."""
    message_id = send(store, "storm", "review the schema")
    me = process(os.getpid())
    assert me is not None
    ops.call(store, "program_state", {"agent": "storm", "state": "working", "pid": me.pid, "start": me.start, "new_turn": True})
    ops.call(store, "read", {"agent": "storm", "unread": True, "mark_read": True})
    ops.call(store, "announced", {"agent": "storm", "how": "hook"})
    ops.call(store, "program_state", {"agent": "storm", "state": "working", "pid": me.pid, "start": me.start, "handed": [message_id]})
    store.test_clock.ahead = 60  # type: ignore[attr-defined]
    assert "held" not in way(store, message_id)  # read
    done = ops.call(store, "program_state", {"agent": "storm", "state": "idle", "pid": me.pid, "start": me.start, "failed": True})
    assert done["put_back"] == [message_id]
    held = way(store, message_id)["held"]
    assert held["why"].startswith("storm's program's last turn failed") and agent_status(store, "storm")["held"] == held
    ops.call(store, "read", {"agent": "storm", "unread": True, "mark_read": True})
    ops.call(store, "program_state", {"agent": "storm", "state": "working", "pid": me.pid, "start": me.start, "handed": [message_id]})
    later = send(store, "storm", "and the migration")
    store.test_clock.ahead = 120  # type: ignore[attr-defined]
    assert "failed" not in way(store, later)["held"]["why"]  # handed over again: the failure explains nothing now


def test_mail_of_a_turn_the_person_stopped_before_the_model_saw_it_is_held_and_says_so(store: Store) -> None:
    """OpenCode's mail counts as read only at the answer's first step: the person stopped the
    turn before that (Hooks.stopped), so the mail was never read. It waits for their next
    prompt, and track says the person stopped the turn, not that no hook ran; mail the turn
    had read before stays read. The next hand-over takes the reason away."""
    me = process(os.getpid())
    assert me is not None
    seen = send(store, "storm", "seen before the stop")
    ops.call(store, "program_state", {"agent": "storm", "state": "working", "pid": me.pid, "start": me.start, "new_turn": True})
    ops.call(store, "read", {"agent": "storm", "unread": True, "mark_read": True})
    ops.call(store, "program_state", {"agent": "storm", "state": "working", "pid": me.pid, "start": me.start, "handed": [seen]})
    unseen = send(store, "storm", "review the schema")  # handed into the turn, not yet in a model request
    done = ops.call(store, "program_state", {"agent": "storm", "state": "idle", "pid": me.pid, "start": me.start, "stopped": True})
    assert done.get("put_back", []) == []  # nothing was read that it must give back
    store.test_clock.ahead = 60  # type: ignore[attr-defined]
    assert "held" not in way(store, seen)
    held = way(store, unseen)["held"]
    assert held["why"] == ("storm's person stopped the turn that carried the mail before its model saw it: "
                           "the mail comes with the person's next prompt")
    assert agent_status(store, "storm")["held"] == held
    ops.call(store, "read", {"agent": "storm", "unread": True, "mark_read": True})
    ops.call(store, "program_state", {"agent": "storm", "state": "working", "pid": me.pid, "start": me.start, "handed": [unseen]})
    later = send(store, "storm", "and the migration")
    store.test_clock.ahead = 120  # type: ignore[attr-defined]
    assert "stopped" not in way(store, later)["held"]["why"]


def test_the_set_time_comes_from_config_json(store: Store, store_dir: Path) -> None:
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"held_after": "5s"}}))
    message_id = send(store, "glacier", "soon")
    store.test_clock.ahead = 6  # type: ignore[attr-defined]
    assert way(store, message_id)["held"]
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"held_notice_after": "ten minutes"}}))
    with pytest.raises(StoreError, match="delivery.held_notice_after: not a duration"):
        load_config(store)


def test_the_sender_gets_one_notice_after_the_longer_set_time(store: Store) -> None:
    first = send(store, "glacier", "first")
    second = send(store, "glacier", "second")
    store.test_clock.ahead = 9 * 60  # type: ignore[attr-defined]
    assert notice_held(store) == []
    store.test_clock.ahead = 10 * 60 + 1  # type: ignore[attr-defined]
    assert notice_held(store) == [{"to": "alice", "about": "glacier", "ids": [first, second]}]
    [notice] = [m for m in ops.call(store, "read", {"agent": "alice", "last": 0})["messages"] if m["from"] == "relay"]
    assert notice["subject"] == "held for glacier: 2 messages" and first in notice["body"] and second in notice["body"]
    assert "glacier has no arrival mechanism" in notice["body"] and "held" in notice["tags"]
    assert notice_held(store) == []  # once
    third = send(store, "glacier", "third")
    store.test_clock.ahead = 21 * 60  # type: ignore[attr-defined]
    assert notice_held(store) == [{"to": "alice", "about": "glacier", "ids": [third]}]  # only what it was not told of


# -- with relayd and a real tmux pane ---------------------------------------------------------------


@pytest.fixture
def pane_agent(relayctl, store_dir: Path, tmux: Tmux, relay_env):
    from support.relayd_proc import Daemon

    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": TRIGGER}, "delivery": {"held_after": "2s"}}))
    relayctl.setup("register", name="alice")
    relayctl.setup("register", name="glacier", notify=f"tmux:{tmux.socket}:{tmux.pane}")
    tmux("copy-mode", "-t", tmux.pane)
    daemon = Daemon(relay_env, "--retry-interval", "1s").start()
    try:
        yield daemon
    finally:
        daemon.kill()


@pytest.mark.slow
def test_track_says_why_mail_to_a_pane_in_copy_mode_waits(relayctl, pane_agent, tmux: Tmux) -> None:
    message_id = json.loads(relayctl("--json", "send", "glacier", "while copying", agent="alice").stdout)["id"]
    sent = time.monotonic()
    shown = wait_for("track to say why", lambda: "held:" in (out := relayctl("track", message_id).stdout) and out, timeout=2 + 5, every=0.3)
    assert time.monotonic() - sent <= 2 + 5
    assert f"held: glacier's tmux pane {tmux.pane} is in copy mode, since" in shown
    status = relayctl("status").stdout
    assert "mail HELD for 1" in status and f"held: glacier's tmux pane {tmux.pane} is in copy mode" in status
    [glacier] = [a for a in json.loads(relayctl("--json", "status").stdout)["agents"] if a["name"] == "glacier"]
    assert "copy mode" in glacier["held"]["why"]
    assert tmux.received.read_text() == ""  # nothing was typed into the pane


@pytest.mark.slow
def test_send_wait_says_why_while_it_waits(relayctl, pane_agent, tmux: Tmux) -> None:
    waiting = relayctl("send", "glacier", "are you there?", "--wait", "read", "--timeout", "6s", agent="alice", check=False, timeout=30)
    assert waiting.returncode == 1
    said = waiting.stderr.splitlines()
    held = [line for line in said if f"held: glacier's tmux pane {tmux.pane} is in copy mode" in line]
    assert held and said.index(held[0]) < said.index(next(line for line in said if line.startswith("not read after")))
