"""Idempotent sends: a message id is appended once per inbox within the dedup window,
in direct mode and through relayd, and clients repeat an interrupted send with its id."""

from __future__ import annotations

import json
import os
import socket
import threading
from datetime import timedelta

import msgspec
import pytest

from relayd import ops
from relayd.dedup import RecentIds
from relayd.wire import handshake
from relayd.client.full import Client
from relayd.inbox.read import read_all
from relayd.records import Message, json_encoder
from relayd.store import Store
from relayd.timefmt import now, to_iso
from relayd.ulid import _encode, new_ulid, ulid_time_ms
from support.relayd_proc import Daemon, RawClient


def inbox(store_dir, agent: str) -> list[dict]:
    with Store(str(store_dir)) as store:
        result = msgspec.to_builtins(read_all(store, agent))
    assert not result["corrupt"]
    return result["messages"]


def inbox_events(store_dir) -> list[dict]:
    with open(os.path.join(store_dir, "events.jsonl")) as fh:
        return [e for e in map(json.loads, fh) if e["topic"] == "inbox" and e.get("action") == "message"]


@pytest.mark.slow
def test_a_repeated_id_is_stored_once_and_answers_with_the_original(relayctl, store_dir):
    relayctl("init", "--preset", "overlord")
    chosen = new_ulid()
    first = json.loads(relayctl("--json", "send", "inferno", "deploy done", "--id", chosen, agent="storm").stdout)
    again = relayctl("send", "inferno", "deploy done (retry)", "--id", chosen, agent="storm")
    assert f"inferno already has {chosen}; not sent again" in again.stdout
    retried = json.loads(relayctl("--json", "send", "inferno", "deploy done", "--id", chosen.lower(), agent="storm").stdout)
    assert first["id"] == chosen and retried == first  # the original, same timestamp and body
    assert [m["id"] for m in inbox(store_dir, "inferno")] == [chosen]
    assert [e["message_id"] for e in inbox_events(store_dir)] == [chosen]  # one event too
    # Another recipient has its own copy of the same id: an id is unique per inbox.
    relayctl("send", "glacier", "deploy done", "--id", chosen, agent="storm")
    assert [m["id"] for m in inbox(store_dir, "glacier")] == [chosen]


@pytest.mark.slow
def test_a_broadcast_id_is_deduplicated_per_recipient(relayctl, store_dir):
    relayctl("init", "--preset", "overlord")
    chosen = new_ulid()
    sent = json.loads(relayctl("--json", "send", "--broadcast", "rebasing main", "--id", chosen, agent="storm").stdout)
    assert {m["id"] for m in sent} == {chosen} and len(sent) == 5
    relayctl("register", "latecomer")
    out = relayctl("send", "--broadcast", "rebasing main", "--id", chosen, agent="storm").stdout
    assert "sent to 1 agents: latecomer" in out and "had it already" in out
    for agent in ("glacier", "inferno", "overlord", "shadow", "strategist", "latecomer"):
        assert [m["id"] for m in inbox(store_dir, agent)] == [chosen], agent
    assert len(inbox_events(store_dir)) == 6


@pytest.mark.slow
def test_an_id_that_is_not_a_ulid_is_a_one_line_usage_error(relayctl, store_dir):
    relayctl("init", "--preset", "overlord")
    for bad in ("42", "01JMHF3XYZ000000000000000U", "x" * 200):
        proc = relayctl("send", "inferno", "hi", "--id", bad, agent="storm", check=False)
        assert proc.returncode == 2 and proc.stderr.startswith("error: id ") and "not a ULID" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    with Store(str(store_dir)) as store:
        with pytest.raises(Exception, match="not a ULID"):
            ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": "hi", "id": "nope"})
    assert inbox(store_dir, "inferno") == []


def ulid_at(moment) -> str:
    """A ULID made at `moment` (new_ulid keeps a process's ids increasing, so it cannot go back)."""
    return _encode((int(moment.timestamp() * 1000) << 80) | int.from_bytes(os.urandom(9), "big"))


def _plant(store_dir, agent: str, message_id: str, age: timedelta) -> None:
    """A copy of `message_id` as if it had been written `age` ago."""
    planted = Message(id=message_id, ts=to_iso(now() - age), from_="storm", to=agent, subject="old", body="old")
    with open(os.path.join(store_dir, "agents", agent, "inbox.jsonl"), "ab") as fh:
        fh.write(json_encoder.encode(planted) + b"\n")


@pytest.mark.parametrize("window, age, deduplicated", [("10m", timedelta(minutes=9), True), ("10m", timedelta(minutes=11), False), ("2m", timedelta(minutes=3), False)])
def test_the_window_comes_from_config_json(store_dir, window, age, deduplicated):
    with Store(str(store_dir)) as store:
        ops.call(store, "init", {"preset": "overlord"})
    with open(os.path.join(store_dir, "config.json"), "w") as fh:
        json.dump({"dedup": {"window": window}}, fh)
    old_id = ulid_at(now() - age - timedelta(seconds=1))
    _plant(store_dir, "inferno", old_id, age)
    for n in range(50):  # newer mail after it: the scan goes back through it
        _plant(store_dir, "inferno", new_ulid(), age - timedelta(seconds=1) + timedelta(milliseconds=n))
    with Store(str(store_dir)) as store:
        result = ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": "again", "id": old_id})
    copies = [m for m in inbox(store_dir, "inferno") if m["id"] == old_id]
    assert len(copies) == (1 if deduplicated else 2)
    assert result["duplicates"] == (["inferno"] if deduplicated else [])


def test_relayd_past_its_memory_of_ids_still_stores_a_retry_once_and_reads_no_inbox_for_a_fresh_id(store_dir):
    # relayd remembers a bounded number of recent ids (dedup.REMEMBER); here five.
    with Store(str(store_dir)) as store:
        ops.call(store, "init", {"preset": "overlord"})
    recent = RecentIds(window=600, limit=5)
    sent = [new_ulid() for _ in range(8)]
    with Store(str(store_dir), recent_ids=recent) as store:
        for message_id in sent:
            ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": message_id, "id": message_id})
        assert len(recent) == 5  # the first three are forgotten
        now_ms = ulid_time_ms(sent[-1]) + 1
        # A forgotten id may be in the inbox: it is looked up there, and its retry is stored once.
        assert recent.may_hold("inferno", sent[0], now_ms)
        again = ops.call(store, "send", {"agent": "storm", "to": ["inferno"], "body": "retry", "id": sent[0]})
        assert again["duplicates"] == ["inferno"]
        # An id made after the last forgotten append would be remembered if stored: the inbox is
        # not read for it (a pipelining client's every send did, past the limit).
        fresh = ulid_at(now() + timedelta(seconds=1))  # (made clearly after them: the clock check allows 10 ms)
        assert not recent.may_hold("inferno", fresh, ulid_time_ms(fresh) + 1)
    assert [m["body"] for m in inbox(store_dir, "inferno")] == sent


@pytest.mark.slow
def test_a_broken_config_does_not_stop_sends(relayctl, store_dir):
    relayctl("init", "--preset", "overlord")
    (store_dir / "config.json").write_text('{"dedup": {"window": "soon"}}')
    chosen = new_ulid()
    relayctl("send", "inferno", "hi", "--id", chosen, agent="storm")
    relayctl("send", "inferno", "hi", "--id", chosen, agent="storm")
    assert [m["id"] for m in inbox(store_dir, "inferno")] == [chosen]  # the default window applies


@pytest.mark.slow
def test_through_relayd_and_across_its_restart(relay_env, relayctl, store_dir):
    relayctl("init", "--preset", "overlord")
    chosen = new_ulid()
    relayctl("send", "inferno", "before relayd", "--id", chosen, agent="storm")  # direct mode
    daemon = Daemon(relay_env).start()
    try:
        client = RawClient(daemon.socket_path)
        params = {"agent": "storm", "to": ["inferno"], "body": "x", "id": chosen}
        reply = client.request("send", params)
        assert reply["ok"] and reply["result"]["duplicates"] == ["inferno"]  # seeded from the inbox at start
        other = new_ulid()
        for _ in range(3):
            assert client.request("send", dict(params, id=other))["ok"]
        # Several copies in one pipelined batch: the first one counts.
        third = new_ulid()
        client.send_bytes(b"".join(json.dumps({"type": "request", "id": i, "op": "send", "params": dict(params, id=third)}).encode() + b"\n" for i in range(5)))
        replies = [client.line() for _ in range(5)]
        assert all(r["ok"] for r in replies) and len({r["result"]["messages"][0]["ts"] for r in replies}) == 1
        daemon.kill()
        daemon = Daemon(relay_env).start()
        assert RawClient(daemon.socket_path).request("send", dict(params, id=other))["result"]["duplicates"] == ["inferno"]
        # A direct-mode write while relayd runs is learnt from the event log.
        fourth = new_ulid()
        with Store(str(store_dir)) as store:
            ops.call(store, "send", dict(params, id=fourth))
        sub = RawClient(daemon.socket_path)
        sub.subscribe(["inbox"], after=inbox_events(store_dir)[-2]["id"])
        assert sub.line()["message_id"] == fourth  # relayd has seen it
        assert RawClient(daemon.socket_path).request("send", dict(params, id=fourth))["result"]["duplicates"] == ["inferno"]
    finally:
        daemon.kill()
    ids = [m["id"] for m in inbox(store_dir, "inferno")]
    assert sorted(ids) == sorted([chosen, other, third, fourth])
    assert sorted(e["message_id"] for e in inbox_events(store_dir)) == sorted(ids)


class VanishingDaemon:
    """A relayd stand-in that answers hello, does the request on the store (as relayd
    would), then dies before replying: the client cannot know whether it was done."""

    def __init__(self, store_dir: str, socket_path: str) -> None:
        self.store_dir = store_dir
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen(1)
        self.socket_path = socket_path
        self.requests: list[dict] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        reader = conn.makefile("rb")
        reader.readline()  # hello
        conn.sendall(json.dumps({"type": "hello", "version": handshake.VERSION, "server": "relayd", "store": self.store_dir}).encode() + b"\n")
        request = json.loads(reader.readline())
        self.requests.append(request)
        with Store(self.store_dir) as store:
            ops.call(store, request["op"], request["params"])
        self.listener.close()
        os.unlink(self.socket_path)  # gone: the next attempt finds no daemon
        conn.close()


def test_a_send_interrupted_by_a_vanishing_daemon_is_repeated_with_its_id_and_lands_once(relay_env, store_dir):
    with Store(str(store_dir)) as store:
        ops.call(store, "init", {"preset": "overlord"})
    fake = VanishingDaemon(str(store_dir), relay_env["RELAY_SOCKET"])
    with Client(str(store_dir), relay_env["RELAY_SOCKET"]) as client:
        result = client.call("send", {"agent": "storm", "to": ["inferno"], "body": "exactly once"})
        assert client.mode == "direct"  # the retry ran on the files
    fake.thread.join(5)
    [request] = fake.requests
    assert request["params"]["id"] == result["messages"][0]["id"]  # chosen before the first attempt
    assert result["duplicates"] == ["inferno"]
    assert [m["body"] for m in inbox(store_dir, "inferno")] == ["exactly once"]
