"""What the web view's snapshot (relayweb.snapshot) carries per agent, without a browser: the
data the page lays out, read through relay's client as the view reads it."""

from __future__ import annotations

import json
from pathlib import Path

from relayd.client.full import Client
from relayd.store import Store
from relayweb import snapshot


def test_each_agent_carries_why_its_mail_is_held(relayctl, store_dir: Path, relay_env: dict[str, str]) -> None:
    relayctl.setup("init")
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"held_after": "0s"}}))  # held at once
    relayctl.setup("register", name="alice")
    relayctl.setup("register", name="glacier", notify="none")
    relayctl.setup("send", agent="alice", to=["glacier"], body="deploy at 14:00")
    with Client(str(store_dir), relay_env["RELAY_SOCKET"]) as client, Store(str(store_dir)) as store:
        agents = {a["name"]: a for a in snapshot.build(client, store, "human")["agents"]}
    held = agents["glacier"]["held"]
    assert held["why"].startswith("glacier has no arrival mechanism") and held["since"].endswith("Z")
    assert agents["alice"].get("held") is None
