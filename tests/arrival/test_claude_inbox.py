"""The Claude Code inbox as an arrival mechanism (relayd.arrival.claude_inbox), against a
session's inbox made here as Claude Code 2.1.332 makes it: a real Unix socket in a 0700
directory, its session record and key file. The session's pid is this test's own process,
so its start time in /proc is real. The real Claude Code is in test_claude_inbox_real.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from relayd.arrival import claude_inbox
from relayd.arrival import claude_inbox_format as fmt
from relayd.arrival.notify import notify_new_messages
from relayd.store import Store
from support.claude_session import TOKEN, FakeSession

@pytest.fixture
def session(short_tmp: Path):
    s = FakeSession(short_tmp)
    yield s
    s.close()


@pytest.fixture
def team(relayctl):
    relayctl.setup("init")
    relayctl.setup("register", name="sender")
    relayctl.setup("register", name="inferno", notify="cmd:true")
    return relayctl


def _learn(relayctl, session: FakeSession) -> dict:
    return relayctl.setup("claude_inbox", agent="inferno", socket=session.socket, sessions_dir=str(session.sessions))


def test_new_mail_goes_into_the_sessions_inbox_once_as_a_peer_message(team, session: FakeSession, store_dir: Path) -> None:
    assert _learn(team, session).get("unusable") is None
    # With no relayd, the sender's own process notifies the recipient (relayd.arrival.notify).
    team.setup("send", agent="sender", to=["inferno"], subject="Rebase first", body="Rebase first\n\nthen test")
    with Store(str(store_dir)) as store:
        auth, message = session.wait_lines(2)
        assert auth == {"type": "auth", "token": TOKEN}
        assert message["type"] == "user" and message["msgV"] == 1 and len(message["msg_id"]) == 36
        assert "from" not in message  # this process does not listen for receipts (relayd does)
        assert message["message"]["content"].startswith("relay mail for inferno from sender")
        assert "subject: Rebase first" in message["message"]["content"] and "then test" in message["message"]["content"]
        # The next round finds nothing new: the message is not written twice.
        [again] = notify_new_messages(store, ["inferno"])
        assert again["method"] == "claude-inbox" and "nothing new" in again["skipped"]
    assert len(session.received) == 2
    status = next(a for a in team.setup("status")["agents"] if a["name"] == "inferno")
    assert status["arrives_by"] == "claude-inbox" and status.get("door_unusable") is None


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda s: os.chmod(s.socks, 0o755), "open to others"),
        (lambda s: os.chmod(s.socket, 0o666), "open to others"),
        (lambda s: os.chown(s.sessions / f"{s.pid}.json", 4321, -1), "belongs to another user"),
        (lambda s: s.write_record(procStart="1"), "no longer running"),  # a pid used again by another process
        (lambda s: s.write_record(peerProtocol=2), "peer protocol 2"),
        (lambda s: (s.config / "settings.json").write_text('{"crossSessionInbound": "refuse"}'), "crossSessionInbound is refuse"),
        (lambda s: (Path(s.record["cwd"]) / ".claude").mkdir() or (Path(s.record["cwd"]) / ".claude" / "settings.local.json").write_text('{"crossSessionInbound": "refuse"}'), "crossSessionInbound is refuse"),
        (lambda s: (s.sessions / fmt.key_name(s.pid, s.socket)).unlink(), "no key file"),
    ],
)
def test_an_inbox_relay_may_not_use_leaves_the_agents_own_mechanism(team, session: FakeSession, store_dir: Path, spoil, why: str) -> None:
    if os.getuid() != 0 and "another user" in why:
        pytest.skip("chown to another user needs root")  # the check itself is exercised by the other cases
    spoil(session)
    door = _learn(team, session)
    assert why in (door.get("unusable") or ""), door
    team.setup("send", agent="sender", to=["inferno"], subject="by the fallback", body="by the fallback")
    with Store(str(store_dir)) as store:
        [outcome] = notify_new_messages(store, ["inferno"])
    assert outcome["method"] == "cmd", outcome
    assert session.received == []
    status = next(a for a in team.setup("status")["agents"] if a["name"] == "inferno")
    assert status["arrives_by"] == "cmd:true" and why in status["door_unusable"]


def test_a_door_goes_void_when_its_session_ends(team, session: FakeSession, store_dir: Path) -> None:
    assert _learn(team, session).get("unusable") is None
    session.write_record(procStart="1")  # as if this pid now belonged to a later process
    with Store(str(store_dir)) as store, store.agent_dir("inferno") as agent:
        door = claude_inbox.current(agent)
    assert door is not None and "no longer running" in (door.unusable or "")


def test_a_socket_not_named_as_claude_code_names_them_is_refused(team, session: FakeSession) -> None:
    door = team.setup("claude_inbox", agent="inferno", socket=str(session.socks / "other.sock"), sessions_dir=str(session.sessions))
    assert "not named <pid>.sock" in door["unusable"]
