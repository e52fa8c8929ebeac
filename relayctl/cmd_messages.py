"""send and read."""

from __future__ import annotations

import click

import relayd.inbox  # noqa: F401  (registers send and read, so the other operations need not load)
from relayd.names import MESSAGE_TYPES
from relayd.records import PRIORITIES

from .context import read_body, settings


def render_message(m: dict, delivery: str | None = None) -> str:
    """One message as `read` prints it; `delivery` is its ack state ("owed", "acked", ...)."""
    when = m["ts"][:16].replace("T", " ")
    flag = "" if m.get("priority", "normal") == "normal" else f"[{m['priority']}] "
    if m.get("ack"):
        state = {"owed": "owed: relayctl ack " + m["id"], "acked": "acknowledged", "dead_letter": "dead letter"}.get(delivery or "", "ack requested")
        flag = f"[attempt {m.get('attempt') or 1}, {state}] " + flag
    thread = f"  (thread {m['thread']})" if m.get("thread") else ""
    tags = f"  #{' #'.join(m['tags'])}" if m.get("tags") else ""
    head = f"{m['id']}  {when}  {m['from']} → {m['to']}  {flag}{m['subject']}{thread}{tags}"
    body = m["body"].rstrip("\n")
    if not body or body == m["subject"]:
        return head
    return head + "\n" + "\n".join("    " + line for line in body.splitlines())


@click.command()
@click.argument("args", nargs=-1, metavar="[TO] MESSAGE")
@click.option("--subject", metavar="TEXT", help="Subject line. [default: the first 80 characters of the message]")
@click.option("--thread", metavar="ID", help="Thread id, e.g. a bead or ticket id.")
@click.option("--priority", default="normal", show_default=True, type=click.Choice([*PRIORITIES, "critical"], case_sensitive=False), help="critical is accepted as urgent.")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Add a tag (repeatable).")
@click.option("--broadcast", is_flag=True, help="Send to every registered agent except yourself.")
@click.option("--type", "type_", metavar="TYPE", help="Message type: one of the IGNITE types listed above (another word is stored too, with a warning).")
@click.option("--ack", is_flag=True, help="Delivery must be acknowledged: redelivered (with backoff) until the recipient runs 'relayctl ack ID', then a dead letter and you are told.")
@click.option("--ack-wait", metavar="DURATION", help="With --ack: backoff base; redelivery after random(0, min(cap, ACK_WAIT*2^n)). [config.json delivery.ack_wait, 5s]")
@click.option("--max-deliver", type=int, metavar="N", help="With --ack: redeliveries before it becomes a dead letter. [config.json delivery.max_deliver, 3]")
@click.option("--wake", is_flag=True, help="Also wake the orchestrator after sending (see relayctl wake).")
@click.option("--mime", "mime_files", multiple=True, metavar="FILE", help="Send an IGNITE message file instead (repeatable); its headers give sender, recipients and fields (see relayctl mime send).")
@click.option("--id", "message_id", metavar="ULID", help="The message id (a ULID). Repeating a send with the same id within the dedup window (config.json dedup.window, default 10m) delivers it once. [default: a new one]")
def send(args: tuple[str, ...], subject, thread, priority, tags, broadcast, type_, ack, ack_wait, max_deliver, wake, mime_files, message_id) -> None:
    """Send MESSAGE to agent TO (comma-separate several), or to everyone with --broadcast.

    MESSAGE '-' (or none, with a pipe) reads the text from stdin. Your name comes from
    --agent, RELAY_AGENT or OVLD_ROLE.

    \b
    Message types (IGNITE): user_goal, strategy_request, strategy_response, task_list,
      architecture_request, architecture_response, task_assignment, task_completed,
      evaluation_request, evaluation_result, improvement_request, improvement_suggestion,
      improvement_completed, progress_update, system_init, github_event, github_task,
      escalation, dead_letter

    Every send carries an id chosen before it is written: when relayd vanishes mid-send,
    relayctl repeats it with that id, and a recipient that already has the id is not
    sent a second copy. Scripts that retry on their own can do the same with --id.

    \b
    Examples:
      relayctl send athena "Bead bd-42 complete. All tests pass."
      relayctl send athena "Need review" --thread bd-42 --priority high --wake
      relayctl send --broadcast "Rebasing main, hold commits for 2 minutes" --priority urgent
      git diff --stat | relayctl send glacier - --subject "what changed"
      relayctl send glacier "Deploy window opens at 14:00" --ack --ack-wait 30s --max-deliver 5
      relayctl send ignitian_1 "task_id: task_001" --type task_assignment --priority high
      relayctl send --mime queue/leader/user_goal_1738315200123456.mime
      relayctl send athena "deploy done" --id 01JMHF3XYZ0000000000000000   # again: not sent twice
    """
    s = settings()
    if mime_files:
        if args or broadcast:
            raise click.UsageError("--mime FILE takes sender and recipients from the file: give no TO, MESSAGE or --broadcast")
        from .cmd_mime import send_files

        send_files(mime_files)
        return
    if type_ is not None and type_ not in MESSAGE_TYPES:
        s.warn(f"--type {type_!r} is not one of IGNITE's message types (see relayctl send --help); sending it anyway")
    if broadcast:
        if len(args) > 1:
            raise click.UsageError("with --broadcast give only the message (no recipient)")
        recipients: list[str] = []
        text = read_body(args[0] if args else None)
    else:
        if not args:
            raise click.UsageError("missing recipient: relayctl send TO MESSAGE (or --broadcast MESSAGE)")
        if len(args) > 2:
            raise click.UsageError("too many arguments: quote the message, e.g. relayctl send bob \"hello there\"")
        recipients = [name.strip() for name in args[0].split(",") if name.strip()]
        text = read_body(args[1] if len(args) > 1 else None)
    params = {
        "agent": s.require_agent("send"),
        "to": recipients,
        "broadcast": broadcast,
        "body": text,
        "subject": subject,
        "thread": thread,
        "priority": priority,
        "tags": list(tags),
        "type": type_,
        "ack": ack,
        "ack_wait": ack_wait,
        "max_deliver": max_deliver,
    }
    if message_id is not None:
        from relayd.dedup import check_id

        params["id"] = check_id(message_id.strip())
    result = s.call("send", params)
    messages = result["messages"]
    for failure in result.get("notifications", []):
        if not failure.get("ok", True):
            s.warn(f"notifying {failure.get('agent')} failed: {failure.get('error')}")
    already = set(result.get("duplicates", []))
    if s.json:
        s.out(messages if broadcast or len(messages) != 1 else messages[0])
    elif len(messages) == 1:
        if already:
            s.note(f"{messages[0]['to']} already has {messages[0]['id']}; not sent again")
        else:
            owed = " (owed until acknowledged: relayctl ack ID)" if ack else ""
            s.note(f"sent {messages[0]['id']} to {messages[0]['to']}{owed}")
    else:
        fresh = [m["to"] for m in messages if m["to"] not in already]
        if not fresh:
            s.note(f"all {len(messages)} recipients already have {messages[0]['id']}; not sent again")
            return
        s.note(f"sent to {len(fresh)} agents: {', '.join(fresh)}" + (f" ({', '.join(sorted(already))} had it already)" if already else ""))
    if wake:
        from .cmd_wake import wake_and_report

        first = messages[0]
        wake_and_report(s, f"relay: message from {first['from']} to {', '.join(m['to'] for m in messages)}: {first['subject'][:80]}")


@click.command()
@click.option("--from", "from_", metavar="AGENT", help="Only messages from AGENT.")
@click.option("--thread", metavar="ID", help="Only messages in thread ID.")
@click.option("--since", metavar="WHEN", help="Only newer messages: a duration (30m, 1h) or a date (2026-02-16).")
@click.option("--unread", is_flag=True, help="Only messages past your read cursor, oldest first.")
@click.option("--last", default=20, show_default=True, metavar="N", type=click.IntRange(min=0), help="At most N messages (the newest N; with --unread the oldest N unread). 0 = no limit.")
@click.option("--mark-read", is_flag=True, help="Move your read cursor past the messages shown.")
@click.option("--tail", is_flag=True, help="Then keep printing each new message once, in order, until Ctrl-C (with --mark-read: every unread one, marked read as shown).")
@click.option("--format", "format_", type=click.Choice(["text", "mime"]), default="text", show_default=True, help="mime: each message as an IGNITE message file (Subject and X-Relay-* headers keep relay's own fields).")
def read(from_, thread, since, unread, last, mark_read, tail, format_) -> None:
    """Read your inbox. Reading never deletes; --mark-read moves your cursor.

    --mark-read never skips an unread message that a filter or --last held back.

    \b
    Examples:
      relayctl read --unread --mark-read
      relayctl read --from agent-bd-42 --thread bd-42
      relayctl read --since 1h --json
      relayctl read --unread --mark-read --tail
      relayctl read --last 1 --format mime > latest.mime
    """
    s = settings()
    params = {
        "agent": s.require_agent("read"),
        "from": from_,
        "thread": thread,
        "since": since,
        "unread": unread,
        "last": last,
        "mark_read": mark_read,
    }

    def report(result: dict) -> None:
        for bad in result.get("corrupt", []):
            s.warn(f"skipped a corrupt line in {bad['file']} at byte {bad['offset']}")

    render = render_message
    if format_ == "mime":
        if s.json:
            raise click.UsageError("--format mime and --json: choose one")
        from relayd.ignite.convert import from_message

        def render(message: dict) -> str:
            return from_message(message).to_text()

    if tail:
        from .follow import follow

        follow(s, params, render, report)
        return
    result = s.call("read", params)
    report(result)
    messages = result["messages"]
    if format_ == "mime":
        # One document after another, each ending in a newline: split on "MIME-Version: 1.0"
        # at a line start, or export one message per file with `relayctl mime export`.
        for message in messages:
            text = render(message)
            click.echo(text, nl=not text.endswith("\n"))
        return
    if s.json:
        s.out(messages)
        return
    if not messages:
        s.note("no unread messages" if unread else "no messages")
        return
    delivery = result.get("delivery", {})
    for message in messages:
        click.echo(render_message(message, delivery.get(message["id"])))
    if result["unread"] and not s.quiet:
        s.note(f"({result['unread']} unread)")
