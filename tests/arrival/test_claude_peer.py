"""Claude Code's receipts for relay's mail (relayd.arrival.claude_peer), over real Unix
sockets: relay names its own socket as the peer message's reply address, the session
answers `peer_message_status` there as Claude Code 2.1.332 does, and `track` and `status`
show each status with its time. The session is made here as in test_claude_inbox.py (its
pid is this test's process); the real Claude Code holding a message is in
test_claude_inbox_real.py.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relayd.arrival import claude_inbox, claude_peer
from relayd.arrival.notify import notify_new_messages
from relayd.store import Store
from support.waiting import wait_for

from support.claude_session import FakeSession


@pytest.fixture
def session(short_tmp: Path):
    s = FakeSession(short_tmp)
    yield s
    s.close()


@pytest.fixture
def listening(store_dir: Path):
    """relayd's receipts socket, in this process, as relayd starts it."""
    claude_inbox.listen(str(store_dir))
    yield
    claude_peer.stop()


@pytest.fixture
def team(relayctl, session: FakeSession, listening):
    relayctl.setup("init")
    relayctl.setup("register", name="sender")
    relayctl.setup("register", name="inferno", notify="cmd:true")
    assert relayctl.setup("claude_inbox", agent="inferno", socket=session.socket, sessions_dir=str(session.sessions)).get("unusable") is None
    return relayctl


def _receipt(msg_id: str, status: str, **extra) -> bytes:
    return json.dumps({"type": "control", "action": "peer_message_status", "status": status, "orig_msg_id": msg_id,
                       "from": "uds:/elsewhere", **extra}).encode() + b"\n"


def _answer(reply: str, *lines: bytes) -> None:
    """Write to relay's reply socket as the session does (from this process: the session's pid)."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(reply)
        conn.sendall(b"".join(lines))


def _sent(team, store_dir: Path, session: FakeSession, subject: str) -> tuple[str, dict]:
    sent = team.setup("send", agent="sender", to=["inferno"], subject=subject, body=subject)
    with Store(str(store_dir)) as store:
        notify_new_messages(store, ["inferno"])  # (the send has written it already: this finds nothing new)
    message = session.wait_lines(2)[-1]
    return sent["messages"][0]["id"], message


def _door(team, message_id: str) -> list[dict]:
    way = next(w for w in team.setup("track", id=message_id)["recipients"] if w["to"] == "inferno")
    return way.get("door", [])


def test_a_held_then_delivered_message_shows_both_in_track_and_status_and_the_sender_hears_of_it(team, session: FakeSession, store_dir: Path) -> None:
    message_id, message = _sent(team, store_dir, session, "Rebase first")
    reply = message["from"].removeprefix("uds:")
    assert message["from"].startswith("uds:") and Path(reply).parent == session.socks and Path(reply).name.startswith(f"{os.getpid()}-")
    assert stat.S_IMODE(os.lstat(reply).st_mode) == 0o600  # as Claude Code makes its own
    _answer(reply, _receipt(message["msg_id"], "held"))
    [held] = wait_for("the held receipt in track", lambda: _door(team, message_id))
    assert held["status"] == "held" and held["how"] == "claude-inbox" and held["at"]
    notice = wait_for("relay's notice to the sender", lambda: team.setup("read", agent="sender", unread=True)["messages"])
    assert notice[0]["from"] == "relay" and "held for the person's approval" in notice[0]["body"] and message_id in notice[0]["body"]
    _answer(reply, _receipt(message["msg_id"], "delivered"))
    statuses = wait_for("the delivered receipt", lambda: len(_door(team, message_id)) == 2 and _door(team, message_id))
    assert [d["status"] for d in statuses] == ["held", "delivered"] and statuses[0]["at"] <= statuses[1]["at"]
    said = next(a for a in team.setup("status")["agents"] if a["name"] == "inferno")["door_said"]
    assert said["status"] == "delivered" and said["id"] == message_id
    shown = team("status").stdout
    assert "Claude Code: delivered" in shown and f"(message {message_id})" in shown, shown
    shown = team("track", message_id).stdout
    assert "Claude Code: held for the person's approval" in shown and ", delivered " in shown, shown
    way = next(w for w in team.setup("track", id=message_id)["recipients"] if w["to"] == "inferno")
    assert way["read"] is False  # a receipt is not the model reading it


def test_a_refusal_is_told_apart_from_expiry(team, session: FakeSession, store_dir: Path) -> None:
    message_id, message = _sent(team, store_dir, session, "refused one")
    _answer(message["from"][4:], _receipt(message["msg_id"], "expired", status_detail="refused"))
    [refused] = wait_for("the refusal", lambda: _door(team, message_id))
    assert refused["status"] == "refused"


def test_a_receipt_from_another_process_than_the_session_is_ignored(team, session: FakeSession, store_dir: Path) -> None:
    message_id, message = _sent(team, store_dir, session, "only the session answers")
    forged = _receipt(message["msg_id"], "denied")
    code = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode())"
    subprocess.run([sys.executable, "-c", code, message["from"][4:], forged.decode()], check=True, timeout=30)
    _answer(message["from"][4:], _receipt("some-other-id", "denied"))  # the session, for a message relay never wrote
    _answer(message["from"][4:], _receipt(message["msg_id"], "delivered"))  # the session itself, in order after both
    [only] = wait_for("the session's own receipt", lambda: _door(team, message_id))
    assert only["status"] == "delivered"


def test_relays_socket_is_removed_at_stop_and_an_earlier_relayds_at_start(team, session: FakeSession, store_dir: Path) -> None:
    _, message = _sent(team, store_dir, session, "one")
    reply = Path(message["from"][4:])
    assert reply.exists()
    claude_peer.stop()
    assert not reply.exists()
    # A relayd that died left its socket behind: the next one removes it at start.
    left = session.socks / "999999.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(left))
    (store_dir / claude_peer.LEDGER).write_text(f"{left} 999999 12345\n")
    claude_inbox.listen(str(store_dir))
    assert not left.exists() and (store_dir / claude_peer.LEDGER).read_text() == ""


def test_no_reply_socket_in_a_directory_open_to_others(team, session: FakeSession, store_dir: Path) -> None:
    os.chmod(session.socks, 0o755)  # (the door is checked again before use and refused too)
    assert claude_peer.reply_address(str(session.socks)) is None
    assert [p.name for p in session.socks.iterdir()] == [f"{os.getpid()}.sock"]  # the session's own only


def _messages(session: FakeSession) -> list[dict]:
    return [line for line in session.received if line.get("type") == "user"]


def test_mail_beyond_claude_codes_rate_waits_says_why_and_goes_with_the_next_token_in_one_message(team, session: FakeSession, store_dir: Path) -> None:
    """Claude Code drops a sender's peer messages past its bucket (30, then one every 2 s):
    relay keeps the same count, holds the mail while none is left (track says why), and then
    writes all that waited as one peer message."""
    with Store(str(store_dir)) as store, store.agent_dir("inferno") as agent:
        claude_inbox._keep_tokens(agent, claude_inbox.current(agent), 0.2, time.time())  # the bucket all but spent
    results = [team.setup("send", agent="sender", to=["inferno"], subject=f"waits {n}", body=f"waits {n}") for n in range(3)]
    sent = [r["messages"][0]["id"] for r in results]
    # (relayd is not running: each send's own process tried the door, and says what it did)
    assert all(r["notifications"][0].get("retry") and r["notifications"][0]["method"] == "claude-inbox" for r in results), results
    assert _messages(session) == []  # nothing written past the bucket: Claude Code would drop it
    way = next(w for w in team.setup("track", id=sent[0])["recipients"] if w["to"] == "inferno")
    with Store(str(store_dir)) as store, store.agent_dir("inferno") as agent:
        held = json.loads(agent.read_bytes("held"))
    assert "Claude Code takes 30 messages at once from relay, then one every 2 s" in held["why"] and not way["read"]
    later = time.time() + 2.0  # one token again
    with Store(str(store_dir), clock=lambda: later) as store:
        [told] = notify_new_messages(store, ["inferno"])
        assert told["method"] == "claude-inbox" and told["ok"] and not told.get("skipped")
        [message] = wait_for("the waiting mail written", lambda: _messages(session))
        content = message["message"]["content"]
        assert all(f"(id {i})" in content for i in sent) and content.count("relay mail for inferno from sender") == 3
        [again] = notify_new_messages(store, ["inferno"])
        assert "nothing new" in again["skipped"]
        with store.agent_dir("inferno") as agent:
            assert agent.read_bytes("held") is None  # it went: no longer held


def test_mail_claude_code_drops_for_want_of_room_is_written_again_and_its_sender_is_not_troubled(team, session: FakeSession, store_dir: Path) -> None:
    message_id, message = _sent(team, store_dir, session, "dropped once")
    _answer(message["from"][4:], _receipt(message["msg_id"], "dropped", drop_reason="rate-limited", dropped_msg_ids=[]))
    [dropped] = wait_for("the drop in track", lambda: _door(team, message_id))
    assert dropped["status"] == "dropped" and dropped["detail"] == "rate-limited"
    with Store(str(store_dir)) as store:
        [held] = notify_new_messages(store, ["inferno"])  # at once: relay's bucket is taken as empty
        assert held.get("retry") and "the next can go in" in held["skipped"]
    later = time.time() + 2.5
    with Store(str(store_dir), clock=lambda: later) as store:
        notify_new_messages(store, ["inferno"])
    first, second = wait_for("the message written again", lambda: len(_messages(session)) == 2 and _messages(session))
    assert f"(id {message_id})" in second["message"]["content"] and second["msg_id"] != first["msg_id"]
    assert team.setup("read", agent="sender", unread=True)["messages"] == []  # relay's own retry: no notice to the sender
