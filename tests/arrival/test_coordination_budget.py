"""The coordination budget (relayd.arrival.budget), on the store's injected clock: the interrupt
interval turns mail to a working agent into one announcement, urgent mail and the person's go
at once, and the loop breaker pauses two agents that answer each other, tells them and the
lead, and resumes on the person's word or when its window has passed. The announcements are
real `cmd:` triggers (a script that writes down each one)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from relayd import ops
from relayd.arrival.notify import notify_new_messages
from relayd.arrival.program_process import process
from relayd.config import DEFAULT_TRIGGER
from relayd.store import Store

RECORDER = "import sys; open(sys.argv[1], 'a').write('told\\n')"


class Clock:
    """The store's clock: the real time plus however far a test moved it."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def told(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def team(relayctl, store_dir: Path, short_tmp: Path):
    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({
        "delivery": {"escalate_to": "lead"},
        "coordination": {"interrupt_interval": "2m", "loop_messages": 4, "loop_window": "10m", "agents": {"quick": {"interrupt_interval": "0s"}}},
    }))
    for name in ("coder", "reviewer", "quick"):
        script = short_tmp / f"{name}.py"
        script.write_text(RECORDER)
        relayctl.setup("register", name=name, notify=f"cmd:{sys.executable} {script} {short_tmp / (name + '.told')}")
    relayctl.setup("register", name="lead", notify="none")
    relayctl.setup("register", name="human", notify="none")
    clock = Clock()
    with Store(str(store_dir), fsync=False, clock=clock) as store:
        store.test_clock = clock  # type: ignore[attr-defined]
        yield store


def working(store: Store, name: str) -> None:
    """The agent's program is in a turn, as its hooks would report (this test process is its program)."""
    me = process(os.getpid())
    ops.call(store, "program_state", {"agent": name, "state": "working", "event": "PostToolUse", "pid": me.pid, "start": me.start})


def send(store: Store, sender: str, to: str, body: str, **extra) -> None:
    ops.call(store, "send", {"agent": sender, "to": [to], "body": body, **extra})
    notify_new_messages(store, [to])  # what relayd (or, with no relayd, the sender) does for each stored message


def read(store: Store, name: str) -> list[dict]:
    return ops.call(store, "read", {"agent": name, "unread": True, "mark_read": True, "last": 0})["messages"]


def test_ten_messages_to_a_working_agent_inside_its_interval_are_one_announcement(team: Store, short_tmp: Path) -> None:
    log = short_tmp / "coder.told"
    working(team, "coder")
    send(team, "reviewer", "coder", "first")
    assert told(log) == 1  # nothing announced before: at once
    read(team, "coder")

    for n in range(10):
        send(team, "reviewer", "coder", f"finding {n}")
    assert told(log) == 1
    [outcome] = notify_new_messages(team, ["coder"])
    assert outcome["retry"] and "interrupt interval (2m)" in outcome["skipped"]
    team.test_clock.ahead = 60  # type: ignore[attr-defined]
    assert notify_new_messages(team, ["coder"])[0].get("retry") and told(log) == 1

    team.test_clock.ahead = 121  # type: ignore[attr-defined]
    notify_new_messages(team, ["coder"])  # the notifier's next sweep
    assert told(log) == 2
    assert [m["body"] for m in read(team, "coder")] == [f"finding {n}" for n in range(10)]
    # What relay put into coder's context for it: two triggers, ~a quarter of their characters in tokens.
    trigger = json.loads((Path(team.root) / "config.json").read_text()).get("notify", {}).get("trigger") or DEFAULT_TRIGGER
    [context] = [a["context"] for a in ops.call(team, "status", {})["agents"] if a["name"] == "coder"]
    assert context == {"tokens": 2 * len(trigger) // 4, "by": {"trigger": 2 * len(trigger) // 4}, "handed": 2}
    ops.call(team, "spent", {"agent": "coder", "chars": 400, "kind": "hook"})
    [context] = [a["context"] for a in ops.call(team, "status", {})["agents"] if a["name"] == "coder"]
    assert context["by"]["hook"] == 100 and context["handed"] == 3
    team.test_clock.ahead += 3601  # type: ignore[attr-defined]
    assert [a.get("context") for a in ops.call(team, "status", {})["agents"] if a["name"] == "coder"] == [None]  # only the last hour


def test_urgent_mail_and_the_persons_mail_are_never_held(team: Store, short_tmp: Path) -> None:
    log = short_tmp / "coder.told"
    working(team, "coder")
    send(team, "reviewer", "coder", "first")
    read(team, "coder")
    send(team, "reviewer", "coder", "a nit")
    assert told(log) == 1
    send(team, "reviewer", "coder", "prod is down", priority="urgent")
    assert told(log) == 2
    assert [m["body"] for m in read(team, "coder")] == ["a nit", "prod is down"]  # the held mail goes with it

    send(team, "human", "coder", "stop and look at this")
    assert told(log) == 3


def test_an_agent_at_its_prompt_or_with_no_interval_is_told_at_once(team: Store, short_tmp: Path) -> None:
    send(team, "reviewer", "coder", "first")  # no program state: nothing says it works
    read(team, "coder")
    send(team, "reviewer", "coder", "second")
    assert told(short_tmp / "coder.told") == 2

    working(team, "quick")  # its own interval is 0s
    send(team, "reviewer", "quick", "first")
    read(team, "quick")
    send(team, "reviewer", "quick", "second")
    assert told(short_tmp / "quick.told") == 2


def test_the_loop_breaker_pauses_two_agents_tells_them_and_the_lead_and_loses_nothing(team: Store, short_tmp: Path) -> None:
    def exchange(count: int, start: int = 0) -> None:
        for n in range(start, start + count):
            sender, to = ("quick", "reviewer") if n % 2 == 0 else ("reviewer", "quick")
            send(team, sender, to, f"reply {n}")
            read(team, to)

    exchange(4)  # four messages: at the set count, not past it
    assert told(short_tmp / "reviewer.told") == 2 and told(short_tmp / "quick.told") == 2
    assert ops.call(team, "status", {})["paused"] == []

    send(team, "quick", "reviewer", "reply 4")  # the fifth: paused, and relay's notice to reviewer announced with it
    notify_new_messages(team, ["quick"])  # relayd's round for the notice to quick (its arrival event)
    assert told(short_tmp / "reviewer.told") == 3 and told(short_tmp / "quick.told") == 3
    notices = read(team, "reviewer")
    assert [m["body"] for m in notices if m["from"] == "quick"] == ["reply 4"]  # stored, read with the notice
    [notice] = [m for m in notices if m["from"] == "relay"]
    assert notice["subject"] == "paused: your exchange with quick" and "relayctl budget resume quick reviewer" in notice["body"]
    [to_quick] = read(team, "quick")
    assert to_quick["from"] == "relay" and to_quick["subject"] == "paused: your exchange with reviewer"
    [to_lead] = read(team, "lead")
    assert to_lead["subject"] == "paused: quick and reviewer (loop breaker)" and to_lead["tags"] == ["loop"]
    [paused] = ops.call(team, "status", {})["paused"]
    assert paused["agents"] == ["quick", "reviewer"] and paused["count"] == 5

    # Their further mail is stored, not announced.
    send(team, "reviewer", "quick", "reply 5")
    send(team, "quick", "reviewer", "reply 6")
    assert told(short_tmp / "reviewer.told") == 3 and told(short_tmp / "quick.told") == 3
    assert [m["id"] for m in ops.call(team, "read", {"agent": "quick", "unread": True, "last": 0})["messages"]]  # stored, unread
    with team.agent_dir("reviewer") as agent:
        assert b"paused by the loop breaker" in (agent.read_bytes("held") or b"")

    # The person's word resumes it: what was held is announced, once each.
    ops.call(team, "budget_resume", {"agents": ["reviewer", "quick"], "by": "human"})
    assert ops.call(team, "status", {})["paused"] == []
    notify_new_messages(team, ["quick", "reviewer"])
    assert told(short_tmp / "reviewer.told") == 4 and told(short_tmp / "quick.told") == 4
    assert [m["body"] for m in read(team, "quick")] == ["reply 5"]
    assert [m["body"] for m in read(team, "reviewer")] == ["reply 6"]
    # Nothing told twice to the lead: one notice for the one pause.
    assert read(team, "lead") == []


def test_a_word_from_the_person_resets_the_count_and_a_pause_ends_with_its_window(team: Store, short_tmp: Path) -> None:
    for n in range(4):
        sender, to = ("quick", "reviewer") if n % 2 == 0 else ("reviewer", "quick")
        send(team, sender, to, f"reply {n}")
        read(team, to)
    send(team, "human", "reviewer", "keep going, you two")
    read(team, "reviewer")
    for n in range(4, 8):
        sender, to = ("quick", "reviewer") if n % 2 == 0 else ("reviewer", "quick")
        send(team, sender, to, f"reply {n}")
        read(team, to)
    assert ops.call(team, "status", {})["paused"] == []  # eight, but four since the person spoke

    send(team, "quick", "reviewer", "reply 8")  # the fifth since: paused
    assert len(ops.call(team, "status", {})["paused"]) == 1
    read(team, "reviewer")
    read(team, "quick")
    send(team, "quick", "reviewer", "reply 9")
    before = told(short_tmp / "reviewer.told")
    assert notify_new_messages(team, ["reviewer"])[0]["retry"]

    team.test_clock.ahead = 601  # type: ignore[attr-defined]
    assert ops.call(team, "status", {})["paused"] == []
    notify_new_messages(team, ["reviewer"])
    assert told(short_tmp / "reviewer.told") == before + 1
    resumed = ops.call(team, "budget", {})
    assert resumed["paused"] == [] and {a["name"]: a["interrupt_interval"] for a in resumed["agents"]}["quick"] == "0s"


def test_resuming_an_exchange_that_is_not_paused_is_refused(team: Store) -> None:
    with pytest.raises(Exception, match="not paused"):
        ops.call(team, "budget_resume", {"agents": ["quick", "reviewer"]})
    with pytest.raises(Exception, match="name the two agents"):
        ops.call(team, "budget_resume", {"agents": ["quick"]})


# -- with relayd: real processes, real sockets, scripted agents ------------------------------------

# A scripted agent that answers its partner forever: at each announcement (a `cmd:` trigger run
# by relayd) it reads its unread mail as a program session would and answers every message from
# its partner; each answer is written down, so the test knows what was sent.
ANSWERER = """
import json, os, subprocess, sys
me, partner, sent_log = sys.argv[1:4]
env = dict(os.environ, RELAY_AGENT=me)
relayctl = [sys.executable, "-m", "relayctl"]
got = json.loads(subprocess.run(relayctl + ["--json", "read", "--unread", "--mark-read", "--last", "0"], env=env, capture_output=True, text=True, check=True).stdout)
for m in got:
    if m["from"] == partner:
        subprocess.run(relayctl + ["send", partner, "re: " + m["body"][:40]], env=env, capture_output=True, check=True)
        open(sent_log, "a").write(partner + "\\n")
"""

# A scripted busy agent: at each announcement it reads its unread mail and writes down how many
# messages that one announcement brought.
COUNTER = """
import json, os, subprocess, sys
env = dict(os.environ, RELAY_AGENT=sys.argv[1])
got = json.loads(subprocess.run([sys.executable, "-m", "relayctl", "--json", "read", "--unread", "--mark-read", "--last", "0"], env=env, capture_output=True, text=True, check=True).stdout)
open(sys.argv[2], "a").write(" ".join(m["body"] for m in got) + "\\n")
"""


def _unread(relayctl, name: str) -> list[dict]:
    return relayctl.setup("read", agent=name, unread=True, last=0)["messages"]


def _settled(relayctl, store_dir: Path) -> bool:
    """Both agents have read relay's notice, and the one answer that came after it waits unannounced."""
    unread = {name: _unread(relayctl, name) for name in ("alpha", "beta")}
    if any(m["from"] == "relay" for messages in unread.values() for m in messages):
        return False
    waiting = [name for name, messages in unread.items() if messages]
    return len(waiting) == 1 and b"loop breaker" in ((store_dir / "agents" / waiting[0] / "held").read_bytes() if (store_dir / "agents" / waiting[0] / "held").exists() else b"")


@pytest.mark.slow
def test_two_agents_answering_each_other_forever_are_stopped_at_the_set_count(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    from support.relayd_proc import Daemon
    from support.waiting import wait_for

    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"escalate_to": "lead"}, "coordination": {"loop_messages": 6, "loop_window": "1h"}}))
    script = short_tmp / "answerer.py"
    script.write_text(ANSWERER)
    sent = short_tmp / "sent.log"
    for me, partner in (("alpha", "beta"), ("beta", "alpha")):
        relayctl.setup("register", name=me, notify=f"cmd:{sys.executable} {script} {me} {partner} {sent}")
    relayctl.setup("register", name="lead", notify="none")
    daemon = Daemon(relay_env).start()
    try:
        relayctl("send", "beta", "shall we start?", agent="alpha")
        [paused] = wait_for("the loop breaker's pause", lambda: relayctl.setup("status")["paused"], timeout=90)
        assert paused["agents"] == ["alpha", "beta"] and paused["count"] == 7  # more than 6: at the seventh
        wait_for("both told, the last answer waiting", lambda: _settled(relayctl, store_dir), timeout=90)

        # Nothing lost: every message either sent is in its partner's inbox, the last one unread.
        answers = len(sent.read_text().splitlines())
        between = [m for name in ("alpha", "beta") for m in relayctl.setup("read", agent=name, last=0)["messages"] if m["from"] in ("alpha", "beta")]
        assert len(between) == 1 + answers and answers in (7, 8)  # the seventh was paused; one answer to it may follow the notice
        # The person is told by status, the lead by one message.
        shown = relayctl("status").stdout
        assert "LOOP BREAKER (1 paused)" in shown and "relayctl budget resume alpha beta" in shown
        assert "PAUSED alpha <-> beta: 7 messages back and forth" in relayctl("budget").stdout
        [notice] = relayctl.setup("read", agent="lead", last=0)["messages"]
        assert notice["from"] == "relay" and notice["tags"] == ["loop"] and "alpha and beta" in notice["subject"]

        # The person's word: the waiting answer is announced, and the two go on until the next pause.
        relayctl("budget", "resume", "alpha", "beta")
        again = wait_for("the second pause", lambda: [p for p in relayctl.setup("status")["paused"] if p["paused"] > paused["paused"]], timeout=90)
        assert again[0]["count"] == 7 and len(sent.read_text().splitlines()) > answers
    finally:
        daemon.stop()


@pytest.mark.slow
def test_ten_messages_to_a_busy_agent_inside_its_interval_arrive_as_one_announcement(relayctl, relay_env, store_dir: Path, short_tmp: Path) -> None:
    import subprocess

    from relayd.arrival.program_process import process
    from support.relayd_proc import Daemon
    from support.waiting import wait_for

    relayctl.setup("init")
    config = store_dir / "config.json"
    config.write_text(json.dumps({"coordination": {"interrupt_interval": "15s"}}))
    script = short_tmp / "counter.py"
    script.write_text(COUNTER)
    got = short_tmp / "got.log"
    relayctl.setup("register", name="coder", notify=f"cmd:{sys.executable} {script} coder {got}")
    relayctl.setup("register", name="reviewer", notify="none")
    program = subprocess.Popen(["sleep", "600"])  # coder's program, in a turn: its hooks would report it so
    daemon = Daemon(relay_env).start()
    try:
        owner = process(program.pid)
        relayctl.setup("program_state", agent="coder", state="working", event="PostToolUse", pid=owner.pid, start=owner.start)

        def announcements() -> list[str]:
            return got.read_text().splitlines() if got.exists() else []

        relayctl.setup("send", agent="reviewer", to=["coder"], body="first")
        wait_for("the first announcement", lambda: announcements() == ["first"], timeout=90)
        for n in range(10):
            relayctl.setup("send", agent="reviewer", to=["coder"], body=f"f{n}")
        wait_for("the digest", lambda: len(announcements()) == 2, timeout=90)
        assert announcements()[1] == " ".join(f"f{n}" for n in range(10))  # all ten, in one announcement

        # Urgent mail goes through at once, however long the interval: it takes what waits with it.
        config.write_text(json.dumps({"coordination": {"interrupt_interval": "1h"}}))
        relayctl.setup("send", agent="reviewer", to=["coder"], body="nit")
        wait_for("the nit held by the interval", lambda: b"interrupt interval (1h)" in ((store_dir / "agents" / "coder" / "held").read_bytes() if (store_dir / "agents" / "coder" / "held").exists() else b""), timeout=90)
        assert len(announcements()) == 2
        relayctl.setup("send", agent="reviewer", to=["coder"], body="prod-down", priority="urgent")
        wait_for("the urgent announcement", lambda: len(announcements()) == 3, timeout=90)
        assert announcements()[2] == "nit prod-down"
    finally:
        daemon.stop()
        program.kill()
        program.wait()
