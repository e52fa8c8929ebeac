"""subscribe: the daemon's event stream as NDJSON."""

from __future__ import annotations

import sys
import time

import click
import msgspec

from relayd.errors import Dropped, Unavailable

from .context import settings, visible
from .stopping import until_stopped


@click.command()
@click.argument("topics", nargs=-1, required=True, metavar="TOPIC...")
@click.option("--for", "for_agent", metavar="AGENT", help="Only events about AGENT (its inbox, its reservations, its presence).")
@click.option("--after", metavar="EVENT_ID", help="Resume: first replay the events that followed EVENT_ID.")
@click.option("--scope", type=click.Choice(["host", "team"]), default="host", show_default=True, help="team: also the events of other hosts (relayd --bridge); theirs carry \"host\".")
def subscribe(topics: tuple[str, ...], for_agent: str | None, after: str | None, scope: str) -> None:
    """Print events as NDJSON, one per line, until Ctrl-C or SIGTERM. Needs relayd running.

    TOPIC is inbox, reservations, commands, presence, agent, wake, or all.
    Each line is what relayd sends (see docs/protocol.md), e.g.
    {"type":"event","id":"01J...","topic":"inbox","agent":"inferno","message_id":"01J...",...}

    When relayd restarts, or drops this subscriber for not reading fast enough, the
    command says so on stderr, reconnects and resumes after the last event it printed:
    nothing is missed and nothing printed twice.

    \b
    Examples:
      relayctl subscribe inbox reservations commands
      relayctl subscribe inbox --for inferno | jq -r .subject
      relayctl subscribe all --after 01JMHF3XYZ0000000000000000
      relayctl subscribe inbox presence --scope team
    """
    s = settings()
    chosen = ["*" if topic == "all" else topic for topic in topics]
    encode = msgspec.json.Encoder().encode
    out = sys.stdout.buffer
    last = after
    connected_once = False
    waiting = 0.0
    with until_stopped():  # Ctrl-C or SIGTERM is how this command ends: exit 0
        while True:
            try:
                for item in s.client().subscribe(chosen, agent=for_agent, after=last, scope=scope):
                    connected_once = True
                    waiting = 0.0
                    if item.get("type") == "event":
                        # Exact JSON, inert on a terminal: raw C1 and bidi characters become \u escapes.
                        out.write(visible(encode(item).decode(), json=True).encode() + b"\n")
                        out.flush()
                        last = item.get("id") or last
            except Unavailable:
                if not connected_once:
                    raise  # no daemon at all: say so instead of waiting for one
                if waiting == 0.0:
                    s.warn("relayd went away; reconnecting" + (f" (resuming after {last})" if last else ""))
                waiting = min(2.0, waiting * 2 or 0.1)
                time.sleep(waiting)
            except Dropped:
                s.warn("dropped: not reading fast enough; reconnecting" + (f" (resuming after {last})" if last else ""))
