"""Replies longer than one protocol line (1 MiB) reach relayctl, relay's client and the web
view through relayd, in `part` frames; a client that did not ask for parts gets an error
that says how to ask. Real relayd processes, the real CLI, a raw socket client.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relayd import ops, protocol
from relayd.client.full import Client
from relayd.store import Store
from support.dead_letters import BODY, dead_letters
from support.relayd_proc import Daemon, RawClient
from relayweb import snapshot

@pytest.fixture
def started(relay_env: dict[str, str]):
    daemons: list[Daemon] = []

    def start() -> Daemon:
        daemons.append(Daemon(relay_env).start())
        return daemons[-1]

    yield start
    for d in daemons:
        d.kill()


@pytest.mark.slow
def test_five_dead_letters_of_250_kb_list_through_relayd(store_dir: Path, relay_env: dict[str, str], relayctl, started) -> None:
    sent = dead_letters(store_dir, 5)
    started()

    listed = json.loads(relayctl("--json", "dlq", "list").stdout)
    assert [d["id"] for d in listed["dead_letters"]] == sent
    assert [len(d["message"]["body"].encode()) for d in listed["dead_letters"]] == [len(f"{n}:") + BODY for n in range(5)]
    human = relayctl("dlq", "list").stdout
    assert all(message_id in human for message_id in sent)

    with Client(str(store_dir), relay_env["RELAY_SOCKET"]) as client, Store(str(store_dir)) as store:  # as relay-mcp and the web view use them
        assert [d["id"] for d in client.call("dlq_list", {})["dead_letters"]] == sent
        assert client.mode == "daemon"
        page = snapshot.build(client, store, "human")
        assert page["relayd"] is True and [d["id"] for d in page["dead_letters"]] == sent[::-1]


def test_a_client_that_does_not_take_parts_is_told_how_to_ask(store_dir: Path, relay_env: dict[str, str], started) -> None:
    sent = dead_letters(store_dir, 5)
    started()
    raw = RawClient(relay_env["RELAY_SOCKET"])
    reply = raw.request("dlq_list")
    assert reply["ok"] is False and '"parts": true' in reply["error"]["message"] and "smaller last" not in reply["error"]["message"]

    raw.send_line({"type": "request", "id": 9, "op": "dlq_list", "params": {}, "parts": True})
    frames = []
    while not frames or frames[-1]["type"] != "response":
        frames.append(raw.line())
    *parts, response = frames
    assert len(parts) > 1 and all(p["type"] == "part" and p["id"] == 9 for p in parts)
    assert all(len(protocol.encode(protocol.Part(id=9, data=p["data"]))) <= protocol.MAX_LINE for p in parts)
    assert response == {"type": "response", "id": 9, "ok": True, "parts": len(parts)}
    result = json.loads("".join(p["data"] for p in parts))
    assert [d["id"] for d in result["dead_letters"]] == sent
    assert raw.request("version")["ok"] is True  # the connection goes on after a long reply


@pytest.mark.slow
def test_status_of_1500_agents_through_relayd(store_dir: Path, relay_env: dict[str, str], relayctl, started) -> None:
    names = [f"agent-{n:04d}" for n in range(1500)]
    with Store(str(store_dir), fsync=False) as store:
        ops.call(store, "init", {})
        for name in names:
            ops.call(store, "register", {"name": name, "task": "t" * 600})
        assert len(protocol.encode_result(ops.call(store, "status", {}))) > protocol.MAX_LINE
    started()
    shown = json.loads(relayctl("--json", "status").stdout)
    assert sorted(a["name"] for a in shown["agents"]) == names
    human = relayctl("status", "--agents").stdout
    assert all(name in human for name in names)
