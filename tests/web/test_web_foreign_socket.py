"""The web view never talks to another user's socket at relayd's name: with a squatter
(`nobody`, support.squatter) on the socket, the page's state and a message typed in it
come from and go to the store itself, the squatter receives nothing, and the view says
once on stderr whose socket it is. (A real `relayctl web` process, over HTTP: what is
tested here is where its requests go, not the page.)"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from relayd.inbox.read import read_all
from relayd.store import Store
from support.squatter import FORGED, Squatter
from support.waiting import wait_for
from support.web_view import WebView

SECRET = "SECRET deploy key hunter2"


@pytest.mark.slow
def test_the_web_view_skips_another_users_socket_and_uses_the_store(relayctl, relay_env: dict[str, str], store_dir: Path) -> None:
    relayctl.setup("init", preset="overlord")
    squatter = Squatter(str(store_dir))
    view = None
    try:
        view = WebView(dict(relay_env, RELAY_SOCKET=squatter.socket_path))
        headers = {"X-Relay-Token": view.token, "Content-Type": "application/json"}
        status, body, _ = view.get("/api/send", headers, "POST", json.dumps({"to": ["inferno"], "subject": "deploy", "body": SECRET}).encode())
        assert status == 200, body

        def fresh_state() -> dict | None:  # (the view's live state catches up with the store on a wake-up)
            status, body, _ = view.get("/api/state", headers)
            assert status == 200, body
            state = json.loads(body)
            return state if SECRET in [m["body"] for m in state["messages"]] else None

        state = wait_for("the page's state to show the message", fresh_state)
        assert state["relayd"] is False and {a["name"] for a in state["agents"]} >= {"inferno", "storm"}
        assert FORGED not in json.dumps(state)
        with Store(str(store_dir)) as store:
            assert [m["body"] for m in msgspec.to_builtins(read_all(store, "inferno"))["messages"]] == [SECRET]
    finally:
        err = view.stop() if view is not None else ""
        received = squatter.received()
        squatter.stop()
    assert received == ""
    assert [line for line in err.splitlines() if "nobody" in line] == [
        f"warning: {squatter.socket_path} belongs to nobody (uid 65534), not to you: relay does not talk to another user's socket; working on the store directly"
    ], err
