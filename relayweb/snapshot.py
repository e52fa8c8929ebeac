"""What the page shows, in one JSON-able dict built from the store and relayd."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import msgspec

from relayd import timefmt
from relayd.arrival.notify import add_pane_states
from relayd.delivery.owed import read_owed
from relayd.client.full import Client
from relayd.errors import RelayError
from relayd.inbox.search import SearchQuery, SearchResult, search
from relayd.store import Store
from relayd.records import Reservation
from relayd.reservations.handoff import handed_note
from relayd.reservations.reserve import find_conflicts

RECENT = 100  # messages in the live list
BODY_CHARS = 4000  # longer bodies are clipped in the page (relayctl read shows them whole)
OWED_SHOWN = 200  # owed copies listed (the agents table counts them all)
CONFLICT_CHECK_MAX = 300  # reservations compared pairwise; past this, conflicts are not marked


def clip_messages(result: SearchResult) -> list[dict[str, Any]]:
    return [_clip(m) for m in msgspec.to_builtins(result.messages)]


def _mark_conflicts(reservations: list[dict[str, Any]]) -> bool:
    """Give each active reservation the others it overlaps (taken with --force, or raced)."""
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


def owed_messages(store: Store) -> list[dict[str, Any]]:
    """The copies sent with ack that are not acknowledged yet, soonest due first: who owes
    what to whom, which delivery this is of how many, and when the next one (or the dead
    letter) comes. Read from owed/ (one small file each), from the inbox lines the sweep has
    not taken yet, and from the parked records (due later than all of those) until enough
    are found; at most OWED_SHOWN."""
    shown = []
    for record in read_owed(store, records=OWED_SHOWN).records:  # under delivery.lock, as status counts them
        m = record.message
        when = timefmt.to_iso(datetime.fromtimestamp(record.due, timezone.utc))
        shown.append({"id": m.id, "to": m.to, "from": m.from_, "subject": m.subject, "attempt": record.attempt, "of": record.last_attempt, "due": when})
    shown.sort(key=lambda o: (o["due"], o["id"]))
    return shown[:OWED_SHOWN]


def build(client: Client, store: Store, human: str) -> dict[str, Any]:
    # Dead letters before the owed counts: a sweep moves a record from owed/ to dead_letter/
    # in one rename, so a letter listed here is no longer counted as owed. Read the other way
    # round, a letter dead-lettered in between would show in both tables at once.
    dead = client.call("dlq_list", {})
    status = client.call("status", {})
    delivery = status.get("delivery") or {}
    agents = status["agents"]
    for agent in agents:  # status gave each its arrival mechanism and how it was last told (relayd.delivery.receipts)
        try:
            unread = client.call("unread", {"agent": agent["name"]})
        except RelayError:
            continue  # removed since the status was taken
        agent["unread"] = unread["unread"]
        agent["notified"] = unread["pending"]
        agent["owed"] = delivery.get("owed_by_agent", {}).get(agent["name"], 0)
    add_pane_states(agents)  # each team pane, live, dead or gone, as relayctl status shows it
    reservations = status["reservations"]
    conflicts_checked = _mark_conflicts(reservations)
    for r in reservations:
        r["handed"] = handed_note(r.get("reason"))  # "handed over by inferno at 20:19 UTC, thread auth"
    recent = search(store, SearchQuery(limit=RECENT))
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
        "owed": owed_messages(store),
        "rotated_files": dead["rotated_files"],
        "paused": status.get("paused", []),  # exchanges the loop breaker holds (relayd.arrival.budget); each agent's `context` is relay's share of its model's context
    }
