"""ack, redeliver and dlq: messages sent with --ack, from owed to acknowledged or dead letter."""

from __future__ import annotations

import sys

import click

from relayd import timefmt
import relayd.delivery.ack  # noqa: F401  (registers ack; the two below, redeliver and the dlq operations)
import relayd.delivery.dlq  # noqa: F401
import relayd.delivery.sweep  # noqa: F401

from .cmd_messages import render_message
from .context import echo, settings, visible

# What each ack outcome says to a person, and whether it counts as a failure (exit 1).
_ACK_WORDS = {
    "acked": ("acknowledged", False),
    "already_acked": ("already acknowledged", False),
    "dead_lettered": ("too late: it is a dead letter now (relayctl dlq show ID)", True),
    "not_yours": ("not yours: it is owed by {owner}", True),
    "not_owed": ("nothing owed under this id (unknown id, or sent without --ack)", True),
}


@click.command()
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
def ack(ids: tuple[str, ...]) -> None:
    """Acknowledge messages sent to you with --ack, so they are not delivered again.

    Reading a message does not acknowledge it. Acknowledging twice is harmless; an id
    that is not yours, unknown, or already a dead letter is reported and exits 1.

    \b
    Examples:
      relayctl --agent bob ack 01JMHF5DEF0000000000000000
      relayctl --agent bob ack ID1 ID2 ID3
      relayctl --agent bob --json read --unread --mark-read | jq -r '.[] | select(.ack) | .id' | xargs relayctl --agent bob ack
    """
    s = settings()
    result = s.call("ack", {"agent": s.require_agent("ack"), "ids": list(ids)})
    failed = False
    lines = []
    for answer in result["results"]:
        words, bad = _ACK_WORDS[answer["outcome"]]
        failed |= bad
        text = f"{answer['id']}: {words.format(owner=answer.get('owner'))}"
        if bad:
            echo(f"error: {text}", err=True)
        else:
            lines.append(text + (f" (at attempt {answer['attempt']})" if answer.get("attempt") else ""))
    s.out(result, lambda r: "\n".join(lines))
    if failed:
        sys.exit(1)


@click.command()
def redeliver() -> None:
    """Deliver again every owed message whose ack-wait has passed; dead-letter the ones
    out of attempts and tell their senders. Also announces (notifies) messages that a
    sender killed mid-send stored without their event. relayd does this every second by
    itself; without it, run this from cron or a systemd timer (gc runs it too).

    \b
    Examples:
      relayctl redeliver
      relayctl --json redeliver
      while sleep 5; do relayctl -q redeliver; done
    """
    s = settings()
    result = s.call("redeliver", {})

    def human(r: dict) -> str:
        lines = [f"redelivered {x['id']} to {x['to']} (attempt {x['attempt']} of {x['of']})" for x in r["redelivered"]]
        lines += [f"dead-lettered {x['id']} to {x['to']} after {x['attempts']} attempts; told {', '.join(x['told']) or 'nobody (sender not registered)'}" for x in r["dead_lettered"]]
        lines += [f"announced {x['id']} to {x['to']} (stored without its event)" for x in r.get("announced", [])]
        lines.append(f"{r['owed']} owed" + (f", next due {r['next_due']}" if r["next_due"] else ""))
        return "\n".join(lines)

    s.out(result, human)


DLQ_HELP = """Dead letters: messages sent with --ack that were never acknowledged.

\b
  relayctl dlq list [--for AGENT]           what is there, oldest first
  relayctl dlq show ID                      one in full: message, deliveries, who was told
  relayctl dlq retry ID                     deliver it again as a fresh owed message
  relayctl dlq drop ID                      delete it for good

\b
Examples:
  relayctl dlq list
  relayctl dlq show 01JMHF5DEF0000000000000000
  relayctl dlq retry 01JMHF5DEF0000000000000000
  relayctl --json dlq list | jq '.dead_letters[].id'
"""


@click.group(help=DLQ_HELP, invoke_without_command=True)
@click.pass_context
def dlq(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        ctx.invoke(dlq_list)


def _letter_line(d: dict) -> str:
    return visible(f"{d['id']}  {timefmt.shown(d.get('dead_at') or '')}  {d['from']} → {d['to']}  {d['subject'][:60]}  ({d['attempts']} attempts)")


@dlq.command("list")
@click.option("--for", "for_agent", metavar="AGENT", help="Only dead letters addressed to AGENT.")
def dlq_list(for_agent: str | None = None) -> None:
    """List dead letters, oldest first."""
    s = settings()
    result = s.call("dlq_list", {"agent": for_agent})

    def human(r: dict) -> str:
        lines = [_letter_line(d) for d in r["dead_letters"]] or ["no dead letters"]
        if r["rotated_files"]:
            lines.append(f"(and {len(r['rotated_files'])} rotated-out inbox file(s) with unread mail in dead_letter/: {', '.join(r['rotated_files'])})")
        return "\n".join(lines)

    s.out(result, human)


_TO = click.option("--to", metavar="AGENT", help="The recipient, when one id was dead-lettered for several.")


@dlq.command("show")
@click.argument("message_id", metavar="ID")
@_TO
def dlq_show(message_id: str, to: str | None) -> None:
    """Show one dead letter in full."""
    s = settings()
    result = s.call("dlq_show", {"id": message_id, "to": to})

    def human(d: dict) -> str:
        lines = [
            render_message(d["message"], "dead_letter"),
            f"  reason:     {visible(d['reason'])}",
            f"  dead since: {d['dead_at']}",
            f"  delivered:  {', '.join(d['delivered_at'])}",
            f"  told:       {', '.join(d['told']) or 'nobody'}",
        ]
        if d["retried_at"]:
            lines.append(f"  retried:    {', '.join(d['retried_at'])}")
        return "\n".join(lines)

    s.out(result, human)


@dlq.command("retry")
@click.argument("message_id", metavar="ID")
@_TO
def dlq_retry(message_id: str, to: str | None) -> None:
    """Deliver a dead letter again (same id), owed again with its full number of redeliveries."""
    s = settings()
    result = s.call("dlq_retry", {"id": message_id, "to": to})
    m = result["messages"][0]
    s.out(result, lambda r: f"delivered {m['id']} to {m['to']} again (attempt {m['attempt']}; dead letter again after attempt {r['of']})")


@dlq.command("drop")
@click.argument("message_id", metavar="ID")
@_TO
def dlq_drop(message_id: str, to: str | None) -> None:
    """Delete a dead letter for good."""
    s = settings()
    result = s.call("dlq_drop", {"id": message_id, "to": to})
    s.out(result, lambda r: f"dropped dead letter {r['dropped']['id']} ({r['dropped']['from']} → {r['dropped']['to']})")
