"""Sends that arrive together are written together (relayd's batching), yet each request
gets exactly the answer and leaves exactly the store contents it would alone."""

from __future__ import annotations

import json
import os

import pytest

import msgspec

from relayd.inbox.read import read_all
from relayd import ops
from relayd.errors import RelayError
from relayd.inbox.send import SendParams, send_many
from relayd.store import Store
from support.relayd_proc import Daemon, RawClient
from support.store_compare import normalize, normalized_store

MIXED = [
    {"agent": "storm", "to": ["inferno"], "body": "first"},
    {"agent": "storm", "to": ["nobody"], "body": "to an unknown agent"},
    {"agent": "glacier", "broadcast": True, "body": "to everyone", "priority": "urgent"},
    {"agent": "storm", "to": ["inferno"], "body": "   "},
    {"agent": "shadow", "to": ["inferno", "storm", "inferno"], "body": "two of them", "tags": ["x"]},
    {"agent": "storm", "to": ["inferno"], "body": "last"},
]


def _lines(path: str) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def _outcome(call, params):
    try:
        return ["ok", call(params)]
    except RelayError as exc:
        return [exc.code, exc.message]


def test_a_batch_answers_and_writes_exactly_what_the_sends_one_by_one_do(short_tmp):
    one_by_one, batched = str(short_tmp / "single"), str(short_tmp / "batched")
    with Store(one_by_one) as store:
        ops.call(store, "init", {"preset": "overlord"})
        singles = [_outcome(lambda p: ops.call(store, "send", p), params) for params in MIXED]
    with Store(batched) as store:
        ops.call(store, "init", {"preset": "overlord"})
        outcomes = send_many(store, [ops.decode_params(ops.lookup("send"), p) for p in MIXED])
    together = [[o.code, o.message] if isinstance(o, RelayError) else ["ok", msgspec.to_builtins(o)] for o in outcomes]

    assert [code for code, _ in together] == ["ok", "unknown_agent", "ok", "invalid_argument", "ok", "ok"]
    assert normalize(together, batched) == normalize(singles, one_by_one)
    assert normalized_store(batched) == normalized_store(one_by_one)
    # The batch of six wrote each inbox once, in request order.
    inferno = [record["body"] for record in _lines(os.path.join(batched, "agents", "inferno", "inbox.jsonl"))]
    assert inferno == ["first", "to everyone", "two of them", "last"]


def test_a_failed_append_fails_only_the_requests_with_mail_for_that_inbox(short_tmp):
    root = str(short_tmp / "store")
    with Store(root) as store:
        ops.call(store, "init", {"preset": "overlord"})
        planted = os.path.join(root, "agents", "glacier", "inbox.jsonl")
        if os.path.exists(planted):
            os.unlink(planted)
        os.symlink("/dev/null", planted)  # refused, never followed
        outcomes = send_many(
            store,
            [
                SendParams(agent="storm", to=["inferno"], body="fine"),
                SendParams(agent="storm", to=["glacier"], body="refused"),
                SendParams(agent="storm", to=["inferno"], body="fine too"),
            ],
        )
        assert [type(o).__name__ for o in outcomes] == ["SendResult", "UnsafePath", "SendResult"]
        events = _lines(os.path.join(root, "events.jsonl"))
        sent = {e["message_id"] for e in events if e["topic"] == "inbox"}
        assert sent == {outcomes[0].messages[0].id, outcomes[2].messages[0].id}  # no event for the refused one


@pytest.mark.slow
def test_pipelined_requests_from_many_connections_get_their_own_answers_in_order(relay_env, relayctl):
    relayctl("init", "--preset", "overlord")
    daemon = Daemon(relay_env).start()
    try:
        clients = [RawClient(daemon.socket_path) for _ in range(8)]
        for n, client in enumerate(clients):
            frames = [{"type": "request", "id": i + 1, "op": "send", "params": params} for i, params in enumerate(MIXED)]
            frames[0]["params"] = dict(MIXED[0], body=f"first from {n}")
            # A read right behind the sends on the same connection must see them.
            frames.append({"type": "request", "id": "read", "op": "read", "params": {"agent": "inferno", "last": 0}})
            client.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        for n, client in enumerate(clients):
            replies = [client.line() for _ in range(len(MIXED) + 1)]
            assert [r["id"] for r in replies] == [1, 2, 3, 4, 5, 6, "read"]
            assert [r["ok"] for r in replies] == [True, False, True, False, True, True, True]
            assert [r["error"]["code"] for r in replies if not r["ok"]] == ["unknown_agent", "invalid_argument"]
            mine = {m["id"] for r in replies[:-1] if r["ok"] for m in r["result"]["messages"] if m["to"] == "inferno"}
            assert len(mine) == 4 and mine <= {m["id"] for m in replies[-1]["result"]["messages"]}
        with Store(daemon.store_dir) as store:
            inbox = msgspec.to_builtins(read_all(store, "inferno"))
        assert not inbox["corrupt"]
        assert sorted(m["body"] for m in inbox["messages"] if m["body"].startswith("first from")) == sorted(f"first from {n}" for n in range(8))
        assert len(inbox["messages"]) == 8 * 4
        events = _lines(os.path.join(daemon.store_dir, "events.jsonl"))
        assert {e["message_id"] for e in events if e["topic"] == "inbox" and e["agent"] == "inferno"} == {m["id"] for m in inbox["messages"]}
    finally:
        daemon.kill()
