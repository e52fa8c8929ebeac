"""search: find messages across every inbox (the same function as the web view's search)."""

from __future__ import annotations

import click

from .context import echo, settings


@click.command()
@click.argument("query", nargs=-1)
@click.option("--from", "from_", metavar="AGENT", help="Only messages sent by AGENT.")
@click.option("--to", metavar="AGENT", help="Only messages to AGENT.")
@click.option("--thread", metavar="ID", help="Only messages in thread ID.")
@click.option("--since", metavar="WHEN", help="Only newer messages: a duration (30m, 1h) or a date (2026-02-16).")
@click.option("--limit", default=50, show_default=True, metavar="N", type=click.IntRange(min=1, max=10_000), help="At most N messages, the newest.")
def search(query: tuple[str, ...], from_, to, thread, since, limit) -> None:
    """Find messages in every agent's inbox, newest first.

    Every word of QUERY must occur, ignoring case, in the subject, body, sender,
    recipient, thread or tags. With no QUERY the filters alone choose (e.g. a whole
    thread). Reads the store files directly, with or without relayd; moves no cursor.

    \b
    Examples:
      relayctl search auth tests
      relayctl search --thread bd-42
      relayctl search deploy --from athena --since 1h
      relayctl search "rebasing" --to agent-bd-42 --json
    """
    # deferred imports: `relayctl --help` loads every command module; search and its store load only
    # when `search` runs
    from relayd.inbox.search import SearchQuery, search as run_search
    from relayd.store import Store

    from .cmd_messages import render_message

    s = settings()
    q = SearchQuery(text=" ".join(query), from_=from_, to=to, thread=thread, since=since, limit=limit)
    if not q.text.strip() and not (from_ or to or thread or since):
        raise click.UsageError("give words to search for, or a filter (--from, --to, --thread, --since)")
    with Store(s.dir) as store:
        result = run_search(store, q)
    import msgspec

    messages = msgspec.to_builtins(result.messages)
    if s.json:
        s.out(messages)
        return
    if not messages:
        s.note("no messages match")
        return
    for message in messages:
        echo(render_message(message))
    if result.more:
        s.note(f"(showing the newest {limit}; --limit N for more)")
