"""Clients that pipeline (relayd.wire.connection.Caller.pipeline): many requests in flight
on one connection, each answered on its own once durable, in order; a failure fails only
its own request; a lost connection is reported for each request still in flight and never
silently resent; and `relayctl send --stdin`, which shell scripts use for bulk sends."""

from __future__ import annotations

import json
import os
import select
import socket

import msgspec
import pytest

from relayd.wire import handshake
from relayd.wire.connection import WINDOW, LineFramer
from relayd.client.full import Client
from relayd.errors import RelayError, UnknownAgent
from relayd.inbox.read import read_all
from relayd.store import Store
from support.unix_server import UnixServer


def inbox(store_dir, agent: str = "inferno") -> list[dict]:
    with Store(str(store_dir)) as store:
        return msgspec.to_builtins(read_all(store, agent))["messages"]


def message(i: int, to: str = "inferno") -> dict:
    return {"agent": "storm", "to": [to], "body": f"message {i}"}


@pytest.mark.slow
def test_a_thousand_pipelined_sends_through_relayd_are_each_stored_once_in_order(daemon, store_dir):
    with Client(str(store_dir), daemon.socket_path) as client:
        outcomes = client.send_many(message(i) for i in range(1000))
        assert client.mode == "daemon"
    assert all(not isinstance(o, RelayError) for o in outcomes)
    sent = [o["messages"][0]["id"] for o in outcomes]
    stored = inbox(store_dir)
    assert [m["id"] for m in stored] == sent  # one writer's messages keep their order
    assert [m["body"] for m in stored] == [f"message {i}" for i in range(1000)]


@pytest.mark.slow
def test_a_failed_request_fails_alone_and_the_others_are_stored(daemon, store_dir):
    batch = [message(0), message(1, to="nobody"), message(2)]
    with Client(str(store_dir), daemon.socket_path) as client:
        first, refused, last = client.send_many(batch)
    assert isinstance(refused, UnknownAgent) and "nobody" in refused.message
    assert [m["body"] for m in inbox(store_dir)] == ["message 0", "message 2"]
    assert first["messages"][0]["body"] == "message 0" and last["messages"][0]["body"] == "message 2"


def test_with_no_relayd_every_request_runs_on_the_store_in_order(relayctl, store_dir, short_tmp):
    relayctl.setup("init", preset="overlord")
    with Client(str(store_dir), str(short_tmp / "nobody-listens.sock")) as client:
        outcomes = client.send_many([message(0), message(1, to="nobody"), message(2)])
        assert client.mode == "direct"
    assert isinstance(outcomes[1], UnknownAgent)
    assert [m["body"] for m in inbox(store_dir)] == ["message 0", "message 2"]


class _Relay:
    """A socket that greets like relayd for `store_dir`, then answers `answer` requests and
    dies with the rest unanswered (the connection shut, the socket file gone): a relayd
    that dies mid-stream. It answers only when the client has paused sending, so it sees
    every request the client keeps in flight, and records the most ever unanswered at once."""

    def __init__(self, path: str, store_dir: str, answer: int) -> None:
        self.path, self.store_dir, self.answer = path, store_dir, answer
        self.requests: list[dict] = []
        self.most_in_flight = 0
        self.server = UnixServer(path, self._serve)

    def _serve(self, conn: socket.socket) -> None:
        framer = LineFramer()
        conn.settimeout(10)
        waiting: list[dict] = []
        answered = 0
        while True:
            readable, _, _ = select.select([conn], [], [], 0.05)
            if readable:
                data = conn.recv(65536)
                if not data:
                    return
                for line in framer.feed(data):
                    frame = json.loads(line)
                    if frame["type"] == "hello":
                        conn.sendall(json.dumps({"type": "hello", "version": handshake.VERSION, "store": self.store_dir}).encode() + b"\n")
                    else:
                        self.requests.append(frame)
                        waiting.append(frame)
                self.most_in_flight = max(self.most_in_flight, len(waiting))
                continue
            while waiting:  # the client has stopped sending: answer what it is waiting for
                if answered == self.answer:
                    os.unlink(self.path)
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                request = waiting.pop(0)
                result = {"messages": [{"id": request["params"]["id"], "to": "inferno"}]}
                conn.sendall(json.dumps({"type": "response", "id": request["id"], "ok": True, "result": result}).encode() + b"\n")
                answered += 1

    def close(self) -> None:
        self.server.close()


def test_a_lost_connection_reports_every_request_in_flight_and_resends_none(relayctl, store_dir, short_tmp):
    relayctl.setup("init", preset="overlord")
    path = str(short_tmp / "dying.sock")
    relay = _Relay(path, str(store_dir), answer=3)
    try:
        with Client(str(store_dir), path) as client:
            outcomes = [(params, outcome) for params, outcome in client.pipeline((("send", message(i)) for i in range(10)), window=4)]
    finally:
        relay.close()
    kinds = ["ok" if not isinstance(o, RelayError) else o.code for _, o in outcomes]
    # The first three were answered; the fourth was the one in flight when the connection went
    # (the relay saw it): reported, never sent again. What was never sent ran on the store
    # here once no relayd was left to take it.
    assert kinds[:3] == ["ok"] * 3
    lost = [i for i, kind in enumerate(kinds) if kind == "unavailable"]
    assert lost and all(3 <= i < 3 + 4 for i in lost)
    assert all("sent again with the same id, it is stored once" in outcomes[i][1].message for i in lost)
    assert all(kind == "ok" for kind in kinds[lost[-1] + 1:])
    seen = [r["params"]["id"] for r in relay.requests]
    assert len(seen) == len(set(seen))  # the relay was sent each request at most once
    stored = {m["id"] for m in inbox(store_dir)}
    for i, (params, _) in enumerate(outcomes):
        if i > lost[-1]:
            assert params["id"] in stored and params["id"] not in seen
        else:
            assert params["id"] not in stored  # answered or lost by the relay, not run here too


@pytest.mark.slow
def test_the_client_never_has_more_requests_in_flight_than_its_window(relayctl, store_dir, short_tmp):
    relayctl.setup("init", preset="overlord")
    path = str(short_tmp / "counting.sock")
    relay = _Relay(path, str(store_dir), answer=10_000)
    try:
        with Client(str(store_dir), path) as client:
            outcomes = client.send_many((message(i) for i in range(600)), window=50)
    finally:
        relay.close()
    assert len(outcomes) == 600 and not any(isinstance(o, RelayError) for o in outcomes)
    assert relay.most_in_flight == 50
    assert WINDOW < 256  # relayd stops reading a connection with 256 unanswered replies


def _lines(*objects: object) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects)


@pytest.mark.slow
@pytest.mark.parametrize("with_relayd", [True, False], ids=["relayd", "direct"])
def test_send_stdin_sends_each_line_and_says_per_line_what_happened(request, relayctl, store_dir, with_relayd):
    if with_relayd:
        request.getfixturevalue("daemon")
    else:
        relayctl.setup("init", preset="overlord")
    given = _lines(
        {"body": "first"},
        "not json",
        "",
        {"to": "glacier", "body": "second", "priority": "high"},
        {"to": "nobody", "body": "lost?"},
        {"from": "athena", "body": "forged"},
        {"body": "third", "thread": "t-1"},
    )
    proc = relayctl("send", "--stdin", "inferno", "--thread", "bulk", agent="storm", input=given, check=False)
    assert proc.returncode == 1
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["line"], r["ok"]) for r in results] == [(1, True), (2, False), (4, True), (5, False), (6, False), (7, True)]
    assert results[3]["error"]["code"] == "unknown_agent"
    assert "the sender is the caller" in results[4]["error"]["message"]
    assert proc.stderr == "3 of 6 messages failed (their lines above say why)\n"
    stored = {m["id"]: m for m in inbox(store_dir) + inbox(store_dir, "glacier")}
    first, second, third = (stored[r["id"]] for r in results if r["ok"])
    assert (first["to"], first["thread"], first["from"]) == ("inferno", "bulk", "storm")
    assert (second["to"], second["priority"]) == ("glacier", "high")
    assert third["thread"] == "t-1"
    assert not any(m["body"] in ("lost?", "forged") for m in stored.values())


@pytest.mark.slow
def test_send_stdin_refuses_options_that_are_about_one_message(relayctl):
    relayctl.setup("init", preset="overlord")
    proc = relayctl("send", "--stdin", "inferno", "--wait", "read", agent="storm", input=_lines({"body": "x"}), check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --stdin does not go with --wait: each line is its own message (a line may carry its own \"id\")"
    assert not inbox(relayctl.env["RELAY_DIR"])
