"""Relay agents as peers in Claude Code's registry (relayd.arrival.claude_peer_agents), over
real Unix sockets and real holder processes: the record and key file Claude Code 2.1.332
reads, the socket answered by the record's own process (as Claude Code checks before it
writes), a model's message stored as mail from the session's agent, and what is refused.
The session is made as Claude Code makes it (tests/support/claude_session.py; its pid is
this test's process, so what this test writes comes from "the session"). The real Claude
Code's ListAgents and SendMessage are in test_claude_inbox_real.py.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
from pathlib import Path

import pytest

from relayd.agents.presence import archive
from relayd.arrival import claude_inbox_format as fmt
from relayd.arrival.claude_peer_agents import VIA_CLAUDE_CODE, PeerAgents
from relayd.arrival.notify import notify_new_messages
from relayd.arrival.program_process import started
from relayd.store import Store
from support.claude_session import FakeSession
from support.waiting import wait_for


@pytest.fixture
def session(short_tmp: Path):
    s = FakeSession(short_tmp)
    yield s
    s.close()


@pytest.fixture
def team(relayctl, session: FakeSession):
    relayctl.setup("init")
    relayctl.setup("register", name="inferno", notify="cmd:true")
    relayctl.setup("register", name="scribe", program="script", task="writes the notes")
    assert relayctl.setup("claude_inbox", agent="inferno", socket=session.socket, sessions_dir=str(session.sessions)).get("unusable") is None
    return relayctl


@pytest.fixture
def peers(team, store_dir: Path):
    agents = PeerAgents(str(store_dir))
    with Store(str(store_dir)) as store:
        agents.reconcile(store)
        yield agents, store
        for key in list(agents.peers):
            agents._remove(key)


def _record(session: FakeSession, name: str) -> dict | None:
    for path in session.sessions.glob("*.json"):
        record = json.loads(path.read_text())
        if record.get("name") == name:
            return record
    return None


def _write(path: str, *frames: dict) -> None:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(path)
        conn.sendall(b"".join(json.dumps(f).encode() + b"\n" for f in frames))


def _token(session: FakeSession, record: dict) -> str:
    return json.loads((session.sessions / fmt.key_name(record["pid"], record["messagingSocketPath"])).read_text())["peerToken"]


def _message(text: str, v: int = 1) -> dict:
    return {"type": "user", "message": {"role": "user", "content": text}, "msgV": v, "msg_id": "0b6f1c9e-0000-4000-8000-000000000001",
            "from": "uds:/somewhere/else.sock"}


def test_a_script_agent_gets_a_record_claude_code_believes(peers, session: FakeSession) -> None:
    record = _record(session, "scribe")
    assert record is not None and _record(session, "inferno") is None  # a Claude Code session has a record of its own
    assert record["peerProtocol"] == fmt.PEER_PROTOCOL and record["agent"] == "script" and "writes the notes" in record["detail"]
    assert record["procStart"] == started(record["pid"]) and record["pid"] != os.getpid()  # a live process of its own
    sock = record["messagingSocketPath"]
    assert Path(sock).parent == session.socks and stat.S_IMODE(os.lstat(sock).st_mode) == 0o600
    for path in (session.sessions / f"{record['pid']}.json", session.sessions / fmt.key_name(record["pid"], sock)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert fmt.decode_key((session.sessions / fmt.key_name(record["pid"], sock)).read_bytes())
    with socket.socket(socket.AF_UNIX) as conn:  # the process answering is the record's, as Claude Code checks
        conn.connect(sock)
        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    assert (pid, uid) == (record["pid"], os.getuid())


def test_a_models_message_is_stored_as_mail_from_the_sessions_agent_and_never_written_back(peers, team, session: FakeSession, store_dir: Path) -> None:
    record = _record(session, "scribe")
    envelope = '<cross-session-message from="uds:/run/cc-socks/1.sock" from-name="project-1" from-mode="prompting">\nhello scribe\n\nthe notes, please\n</cross-session-message>'
    _write(record["messagingSocketPath"], {"type": "auth", "token": _token(session, record)}, _message(envelope))
    [mail] = wait_for("the message in scribe's inbox", lambda: team.setup("read", agent="scribe")["messages"])
    assert mail["from"] == "inferno" and mail["subject"] == "hello scribe" and mail["body"] == "hello scribe\n\nthe notes, please"  # without Claude Code's envelope
    assert VIA_CLAUDE_CODE in mail["tags"]
    # Mail a Claude Code model sent is never written into a Claude Code inbox by relay: no loop.
    team.setup("send", agent="scribe", to=["inferno"], subject="echo", body="echo", tags=[VIA_CLAUDE_CODE])
    with Store(str(store_dir)) as store:
        notify_new_messages(store, ["inferno"])
    assert session.received == []


@pytest.mark.parametrize(
    ("frames", "why"),
    [
        (lambda token: [_message("no token")], "no auth line"),
        (lambda token: [{"type": "auth", "token": "f" * 32}, _message("a wrong token")], "a wrong token"),
        (lambda token: [{"type": "auth", "token": token}, _message("from a later protocol", v=2)], "an unknown msgV"),
    ],
)
def test_what_relay_does_not_take(peers, team, session: FakeSession, frames, why: str) -> None:
    record = _record(session, "scribe")
    _write(record["messagingSocketPath"], *frames(_token(session, record)))
    # A good message after it, on a connection of its own: once it is in, the refused one would be too.
    _write(record["messagingSocketPath"], {"type": "auth", "token": _token(session, record)}, _message("the good one"))
    inbox = wait_for("the good message", lambda: team.setup("read", agent="scribe")["messages"])
    assert [m["subject"] for m in inbox] == ["the good one"], why


def test_an_archived_agents_record_goes_and_relays_records_go_at_stop(peers, session: FakeSession) -> None:
    agents, store = peers
    record = _record(session, "scribe")
    with store.agent_dir("scribe") as agent:
        agent.replace("heartbeat", b"2026-01-01T00:00:00Z\n", None)
        assert archive(agent)
    agents.reconcile(store)
    assert _record(session, "scribe") is None and not Path(record["messagingSocketPath"]).exists()
    assert wait_for("the holder gone", lambda: started(record["pid"]) != record["procStart"], timeout=10)
    assert not (session.sessions / fmt.key_name(record["pid"], record["messagingSocketPath"])).exists()
    assert [p.name for p in session.socks.iterdir()] == [f"{os.getpid()}.sock"]


def test_records_a_relayd_that_died_left_are_removed_and_no_others(team, session: FakeSession, store_dir: Path) -> None:
    stale_sock = session.socks / "999999-0badf00d.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(stale_sock))
    stale = {"pid": 999999, "procStart": "12345", "peerProtocol": 1, "entrypoint": "relay", "name": "scribe", "messagingSocketPath": str(stale_sock)}
    (session.sessions / "999999.json").write_text(json.dumps(stale))
    (session.sessions / fmt.key_name(999999, str(stale_sock))).write_text(json.dumps({"peerToken": "a" * 32, "entrypoint": "relay"}))
    (session.sessions / "999998.json").write_text(json.dumps({**stale, "pid": 999998, "entrypoint": "cli"}))  # a dead Claude Code session's: not relay's
    agents = PeerAgents(str(store_dir))
    with Store(str(store_dir)) as store:
        try:
            agents.reconcile(store)
        finally:
            for key in list(agents.peers):
                agents._remove(key)
    assert not (session.sessions / "999999.json").exists() and not stale_sock.exists()
    assert not (session.sessions / fmt.key_name(999999, str(stale_sock))).exists()
    assert (session.sessions / "999998.json").exists() and (session.sessions / f"{session.pid}.json").exists()
