"""What the page shows, in one JSON-able dict built from the store and relayd."""

from __future__ import annotations

from typing import Any

import msgspec

from relayd.client import Client
from relayd.errors import RelayError
from relayd.search import SearchQuery, SearchResult, search
from relayd.store import Store

RECENT = 100  # messages in the live list
BODY_CHARS = 4000  # longer bodies are clipped in the page (relayctl read shows them whole)
CONFLICT_CHECK_MAX = 300  # reservations compared pairwise; past this, conflicts are not marked


def clip_messages(result: SearchResult) -> list[dict[str, Any]]:
    return [_clip(m) for m in msgspec.to_builtins(result.messages)]


def _mark_conflicts(reservations: list[dict[str, Any]]) -> bool:
    """Give each active reservation the others it overlaps (taken with --force, or raced)."""
    from relayd.records import Reservation
    from relayd.reservations import find_conflicts

    active = [r for r in reservations if not r.get("expired")]
    if len(active) > CONFLICT_CHECK_MAX:
        return False
    held = [msgspec.convert({k: v for k, v in r.items() if k != "expired"}, Reservation) for r in active]
    for r, own in zip(active, held):
        r["conflicts"] = [f"{c.agent}: {c.pattern}" for c in find_conflicts(own, held)]
    return True


def _clip(m: dict[str, Any]) -> dict[str, Any]:
    if len(m["body"]) > BODY_CHARS:
        m["clipped"] = len(m["body"])
        m["body"] = m["body"][:BODY_CHARS]
    return m


def build(client: Client, store: Store, human: str) -> dict[str, Any]:
    status = client.call("status", {})
    delivery = status.get("delivery") or {}
    agents = status["agents"]
    for agent in agents:
        try:
            unread = client.call("unread", {"agent": agent["name"]})
        except RelayError:
            continue  # removed since the status was taken
        agent["unread"] = unread["unread"]
        agent["notified"] = unread["pending"]
        agent["owed"] = delivery.get("owed_by_agent", {}).get(agent["name"], 0)
    reservations = status["reservations"]
    conflicts_checked = _mark_conflicts(reservations)
    recent = search(store, SearchQuery(limit=RECENT))
    dead = client.call("dlq_list", {})
    for letter in dead["dead_letters"]:
        _clip(letter["message"])
    return {
        "store": store.root,
        "human": human,
        "relayd": client.mode == "daemon",
        "agents": agents,
        "reservations": reservations,
        "conflicts_checked": conflicts_checked,
        "commands": status["commands"],
        "messages": clip_messages(recent),
        "dead_letters": dead["dead_letters"][::-1],  # newest first
        "rotated_files": dead["rotated_files"],
    }
