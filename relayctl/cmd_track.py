"""track: what happened to a message on its way to each recipient; and the waiting
behind `send --wait read|ack` (relayd.delivery.receipts says where each step comes from)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from relayd import layout

from .context import Settings, clip, held_line, settings

STEPS = ("read", "ack")


@click.command()
@click.argument("message_id", metavar="ID")
def track(message_id: str) -> None:
    """Show what became of message ID at each recipient: when it was stored, how it was
    announced (tmux, zellij, cmd, channel, hook; ok or the error), whether and when it was
    read (the recipient's read cursor passed it) and, for --ack messages, acknowledged.
    Mail written into a Claude Code session's own inbox shows Claude Code's receipts with
    their times: held for the person's approval, delivered, denied, expired, refused.
    Mail neither read nor announced after delivery.held_after (config.json, default 30s)
    says why it waits: "held: glacier's program is asking the person a question, since
    20:19:08 UTC".

    \b
    Examples:
      relayctl track 01JMHF3XYZ0000000000000000
      relayctl --json track 01JMHF3XYZ0000000000000000 | jq '.recipients[] | select(.read | not)'
      relayctl send bob "deploy?" --wait read --timeout 10m   # wait for it instead
    """
    s = settings()
    s.out(s.call("track", {"id": message_id.strip()}), describe)


def describe(result: dict[str, Any]) -> str:
    lines = [f"{result['id']} from {result['from']}: {clip(result['subject'], 60)}"]
    for way in result["recipients"]:
        lines.append(f"  {way['to']:<16} {step_text(way)}")
    return "\n".join(lines)


def step_text(way: dict[str, Any]) -> str:
    parts = [f"stored {way['stored']}" + (f" ({way['deliveries']} deliveries)" if way["deliveries"] > 1 else "")]
    told = way.get("announced")
    if told is None:
        parts.append("not announced")
    elif told["ok"]:
        parts.append(f"announced by {told['how']} {told['at']}" + (f" ({told['note']})" if told.get("note") else ""))
    else:
        parts.append(f"announcing by {told['how']} failed {told['at']}: {told.get('error')}")
    if way.get("door"):
        parts.append(door_text(way["door"]))
    if way.get("bounced"):
        parts.append("bounced to the sender")
    parts.append((f"read {way['read_at']}" if way.get("read_at") else "read") if way["read"] else "unread")
    if way.get("held"):
        parts.append(held_line(way["held"]))
    if way.get("ack"):
        parts.append({"acked": f"acknowledged {way.get('acked_at') or ''}".strip(), "owed": "not acknowledged", "dead_letter": "dead letter"}[way["ack"]])
    return ", ".join(parts)


DOOR_WORDS = {"held": "held for the person's approval", "denied": "denied by the person", "refused": "refused by its settings"}


def door_text(statuses: list[dict[str, Any]]) -> str:
    """The recipient's program's own receipts: "Claude Code: held for the person's approval
    01:02:03Z, delivered 01:02:09Z"."""
    said = [f"{DOOR_WORDS.get(d['status'], d['status'])} {d['at']}" + (f" ({d['detail']})" if d.get("detail") else "") for d in statuses]
    return "Claude Code: " + ", ".join(said)


def missing(result: dict[str, Any], step: str) -> list[dict[str, Any]]:
    """The recipients that have not reached `step` yet."""
    if step == "read":
        return [w for w in result["recipients"] if not w["read"]]
    return [w for w in result["recipients"] if w.get("ack") != "acked"]


def wait_for(s: Settings, message_id: str, step: str, timeout: float) -> None:
    """Exit 0 once every recipient of the message reached `step`, 1 at the timeout with
    what is missing. Woken by changes to the recipients' files (their read cursors; acked/),
    which relayd and direct-mode readers alike write: no polling."""
    # deferred imports: `relayctl send --wait` loads this module on its fast path; the watcher only
    # when it must wait
    from relayd.client import watch

    deadline = time.monotonic() + timeout
    result = s.call("track", {"id": message_id})
    folders = [os.path.join(s.dir, layout.AGENTS, w["to"]) for w in result["recipients"]]
    sender = os.path.join(s.dir, layout.AGENTS, result["from"])
    if os.path.isdir(sender) and sender not in folders:
        folders.append(sender)  # relay's notice of a message held by the recipient's program lands there
    if step == "ack":
        folders.append(os.path.join(s.dir, layout.ACKED))
    said: dict[str, str] = {}  # recipient -> the held line last printed for it
    with watch.Watch(s.dir, watch.directories(folders), s.socket, client="relayctl") as changes:
        while True:
            late = missing(result, step)
            if not late:
                sys.exit(0)
            _say_held(late, said)
            left = deadline - time.monotonic()
            if left <= 0:
                what = "read" if step == "read" else "acknowledged"
                click.echo(f"not {what} after {timeout:g}s by {len(late)} of {len(result['recipients'])}:", err=True)
                for way in late:
                    click.echo(f"  {way['to']:<16} {step_text(way)}", err=True)
                sys.exit(1)
            changes.wait(min(left, _until_held(result)))
            result = s.call("track", {"id": message_id})


def _say_held(late: list[dict[str, Any]], said: dict[str, str]) -> None:
    """Print why a recipient's mail waits once it is held (or its program's own receipts
    say so: held for the person's approval, denied), and again when that changes."""
    for way in late:
        if way.get("held") or way.get("door"):
            line = ", ".join(([held_line(way["held"])] if way.get("held") else []) + ([door_text(way["door"])] if way.get("door") else []))
            if said.get(way["to"]) != line:
                said[way["to"]] = line
                click.echo(f"  {way['to']:<16} {line}", err=True)


def _until_held(result: dict[str, Any]) -> float:
    """Seconds until a waiting recipient's mail turns held (track says why only from then on;
    nothing in the store changes at that moment to wake the watch)."""
    from relayd.timefmt import now, parse_iso

    after = result.get("held_after")
    due = [after - (now() - parse_iso(w["stored"])).total_seconds() for w in result["recipients"]
           if not w["read"] and not w.get("held") and not (w.get("announced") or {}).get("ok")]
    return max(0.0, min(due)) + 0.05 if after is not None and due else float("inf")
