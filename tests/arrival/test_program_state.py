"""Whose a session state is, when it is void, when "asking" is over, and a failed turn's
mail (relayd.arrival.program_state, program_process, asking; relayd.inbox.reread).

In memory and on a real store, with real processes for the owners (a `sleep` stands for a
program) and a clock the test moves; the real programs in tmux are in
tests/arrival/test_safe_delivery.py.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from relayd import layout, ops
from relayd.arrival.asking import AskingEnds
from relayd.arrival.paneinput import holds_trigger, prompt_drawn
from relayd.arrival.program_process import Process, alive, process, program_of
from relayd.arrival.program_state import read, read_recorded
from relayd.errors import PermissionDenied, UsageError
from relayd.store import Store

TRIGGER = "relay: new mail, read your inbox"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# (seconds after the first look, the look: a screen at rest or None for a question / busy, over?)
ASKING_LOOKS = [
    ("declined: the same quiet prompt for 3 s", [(0, "prompt A", False), (3, "prompt A", True)]),
    ("too soon", [(0, "prompt A", False), (2.9, "prompt A", False)]),
    ("a question in between starts again", [(0, "prompt A", False), (2, None, False), (4, "prompt A", False), (7, "prompt A", True)]),
    ("a moving screen (a spinner, a timer) is work, not rest", [(0, "run 1s", False), (3, "run 4s", False), (6, "run 7s", False)]),
    ("the screen settles", [(0, "run 1s", False), (3, "done", False), (6, "done", True)]),
]


@pytest.mark.parametrize(("case", "looks"), ASKING_LOOKS, ids=[c for c, _ in ASKING_LOOKS])
def test_asking_ends_only_on_a_quiet_empty_prompt_seen_for_the_settle_time(case: str, looks: list) -> None:
    clock = Clock()
    ends = AskingEnds(clock, settle=3.0)
    start = clock.now
    for after, screen, over in looks:
        clock.now = start + after
        assert ends.look("bob", "2026-12-01T20:19:08Z", screen) is over, (case, after)


def test_a_new_asking_state_starts_the_wait_again() -> None:
    clock = Clock()
    ends = AskingEnds(clock, settle=3.0)
    assert not ends.look("bob", "first question", "prompt")
    clock.now += 5
    assert not ends.look("bob", "second question", "prompt")  # a later event: a new question
    clock.now += 3
    assert ends.look("bob", "second question", "prompt")


@pytest.mark.parametrize(
    ("row", "x", "drawn", "trigger_left"),
    [
        ("", 0, False, False),  # a program still starting: no prompt on the cursor row yet
        ("   ", 3, False, False),
        ("❯\xa0", 2, True, False),
        ("> ", 2, True, False),
        ("│ > ", 4, True, False),
        ("┃  ", 3, True, False),  # an input box's border
        (f"❯\xa0{TRIGGER}", 2 + len(TRIGGER), False, True),  # relay's own line left unsent
        (f"{TRIGGER}", len(TRIGGER), False, True),
        (f"❯\xa0note: {TRIGGER}", 8 + len(TRIGGER), False, False),  # someone's text with it: a draft
        (f"❯\xa0{TRIGGER} and more", 2 + len(TRIGGER), False, False),  # text right of the cursor
    ],
)
def test_the_prompt_must_be_drawn_and_relays_own_line_is_known(row: str, x: int, drawn: bool, trigger_left: bool) -> None:
    assert prompt_drawn(row, x) is drawn
    assert holds_trigger(row, x, TRIGGER) is trigger_left


def test_the_program_of_a_hook_is_its_nearest_ancestor_that_is_not_a_shell() -> None:
    # A hook run the way programs run them: through a shell, the program (here: this test) above.
    probe = "from relayd.arrival.program_process import program_of; import os; print(program_of(os.getpid()))"
    shown = subprocess.run(["sh", "-c", f"{sys.executable} -c '{probe}'; true"], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == str(process(os.getpid()))


def test_a_pid_used_again_is_not_the_process_that_had_it() -> None:
    me = process(os.getpid())
    assert me is not None and alive(me)
    assert not alive(Process(me.pid, me.start + 1))


@pytest.fixture
def store(store_dir: Path) -> Iterator[Store]:
    with Store(str(store_dir), fsync=False, rand=random.Random(7).random) as opened:
        ops.call(opened, "init", {})
        for name in ("alice", "bob"):
            ops.call(opened, "register", {"name": name})
        yield opened


@pytest.fixture
def programs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def _program(programs: list[subprocess.Popen]) -> tuple[subprocess.Popen, Process]:
    proc = subprocess.Popen(["sleep", "60"])
    programs.append(proc)
    found = process(proc.pid)
    assert found is not None
    return proc, found


def _state(store: Store, owner: Process, state: str, **more) -> dict:
    return ops.call(store, "program_state", {"agent": "bob", "state": state, "event": "test", "pid": owner.pid, "start": owner.start, **more})


def _recorded(store: Store):
    with store.agent_dir("bob") as agent:
        return read(agent), read_recorded(agent)


def test_a_state_belongs_to_its_process_and_is_void_once_it_exits(store: Store, programs) -> None:
    proc, first = _program(programs)
    _state(store, first, "asking")
    assert _recorded(store)[0].state == "asking"
    proc.kill()
    proc.wait()
    void, written = _recorded(store)
    assert void is None and written.state == "asking"  # written, but of a process that is gone
    _, second = _program(programs)
    _state(store, second, "idle")
    assert _recorded(store)[0].state == "idle"


def test_downs_stopped_does_not_outlive_the_next_start(store: Store) -> None:
    ops.call(store, "program_state", {"agent": "bob", "state": "stopped", "event": "relayctl down"})
    assert _recorded(store)[0] is None  # no process it is of: unknown, so triggers go by the screen


def test_another_process_cannot_change_a_live_programs_state(store: Store, programs) -> None:
    _, bobs = _program(programs)
    _, other = _program(programs)
    _state(store, bobs, "asking")
    with pytest.raises(PermissionDenied, match="not bob's program"):
        _state(store, other, "idle")
    assert _recorded(store)[0].state == "asking" and _recorded(store)[0].pid == bobs.pid
    with pytest.raises(UsageError):
        ops.call(store, "program_state", {"agent": "bob", "state": "idle"})  # no process named
    with pytest.raises(PermissionDenied, match="not running"):
        _state(store, Process(bobs.pid, bobs.start + 7), "idle")  # a made-up start time


def _send(store: Store, n: int) -> list[str]:
    return [ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": f"mail {i}"})["messages"][0]["id"] for i in range(n)]


def _unread(store: Store) -> list[str]:
    return [m["body"] for m in ops.call(store, "read", {"agent": "bob", "unread": True})["messages"]]


def test_a_failed_turn_puts_the_mail_it_was_handed_back_as_unread(store: Store, programs) -> None:
    _, bobs = _program(programs)
    _send(store, 1)
    ops.call(store, "read", {"agent": "bob", "unread": True, "mark_read": True})  # read before this turn
    _send(store, 2)
    _state(store, bobs, "working", new_turn=True)
    handed = [m["id"] for m in ops.call(store, "read", {"agent": "bob", "unread": True, "mark_read": True})["messages"]]
    _state(store, bobs, "working", handed=handed)
    assert _unread(store) == []
    result = _state(store, bobs, "idle", failed=True)
    assert result["put_back"] == handed
    assert _unread(store) == ["mail 0", "mail 1"]  # the mail read before the turn stays read
    with store.agent_dir("bob") as agent:
        assert agent.exists(layout.PENDING)  # no trigger restarts the failing turn
        assert read_recorded(agent).handed == []


def test_a_failed_turn_leaves_mail_read_since_as_it_is(store: Store, programs) -> None:
    _, bobs = _program(programs)
    _send(store, 1)
    handed = [m["id"] for m in ops.call(store, "read", {"agent": "bob", "unread": True, "mark_read": True})["messages"]]
    _state(store, bobs, "working", handed=handed, new_turn=True)
    _send(store, 1)
    ops.call(store, "read", {"agent": "bob", "unread": True, "mark_read": True})  # read by the person meanwhile
    assert _state(store, bobs, "idle", failed=True).get("put_back", []) == []
    assert _unread(store) == []


def test_a_turn_that_ends_well_forgets_what_it_was_handed(store: Store, programs) -> None:
    _, bobs = _program(programs)
    handed = _send(store, 1)
    ops.call(store, "read", {"agent": "bob", "unread": True, "mark_read": True})
    _state(store, bobs, "working", handed=handed, new_turn=True)
    _state(store, bobs, "idle", event="Stop")
    _state(store, bobs, "working", new_turn=True)
    assert _state(store, bobs, "idle", failed=True).get("put_back", []) == []
    assert _unread(store) == []
