"""send and read: their options and help (what they do is in relayctl.actions)."""

from __future__ import annotations

import click

import relayd.inbox.read  # noqa: F401  (registers read and unread, so the other operations need not load)
import relayd.inbox.send  # noqa: F401  (registers send)

from . import actions
from .actions import render_message  # noqa: F401  (cmd_delivery prints dead letters with it)
from .context import settings
from .options import declared


@click.command()
@click.argument("args", nargs=-1, metavar="[TO] MESSAGE")
@declared("send", "--subject", metavar="TEXT", help="Subject line. [default: the first 80 characters of the message]")
@declared("send", "--thread", metavar="ID", help="Thread id, e.g. a bead or ticket id.")
@declared("send", "--priority", show_default=True, help="critical is accepted as urgent.")
@declared("send", "--tag", metavar="TAG", help="Add a tag (repeatable).")
@declared("send", "--broadcast", help="Send to every registered agent except yourself.")
@declared("send", "--type", metavar="TYPE", help="Message type, one of IGNITE's 19 (task_assignment, progress_update, escalation, ...: docs/cli.md lists them); another word is stored too, with a warning.")
@declared("send", "--ack", help="Delivery must be acknowledged: redelivered (with backoff) until the recipient runs 'relayctl ack ID', then a dead letter and you are told.")
@declared("send", "--ack-wait", metavar="DURATION", help="With --ack: backoff base; the wait after delivery n is random(0, min(cap, ACK_WAIT*2^(n-1))). [config.json delivery.ack_wait, 5s]")
@declared("send", "--max-deliver", metavar="N", help="With --ack: redeliveries before it becomes a dead letter. [config.json delivery.max_deliver, 3]")
@declared("send", "--wake", help="Also wake the orchestrator after sending (see relayctl wake).")
@declared("send", "--mime", metavar="FILE", help="Send an IGNITE message file instead (repeatable); its headers give sender, recipients and fields (see relayctl mime send).")
@declared("send", "--id", metavar="ULID", help="The message id (a ULID). Repeating a send with the same id within the dedup window (config.json dedup.window, default 10m) delivers it once. [default: a new one]")
@declared("send", "--stdin", help="Send one message per line of stdin, each a JSON object such as {\"to\": \"bob\", \"body\": \"hi\"} (fields as in --json; this command's options are the defaults), many in flight at once; prints one JSON result per line (--quiet: only failures), exit 1 if any failed (docs/cli.md).")
@declared("send", "--wait", help="Then wait until every recipient has read it (ack: acknowledged it, with --ack); exit 1 with who has not at the --timeout.")
@declared("send", "--timeout", show_default=True, metavar="DURATION", help="With --wait: how long to wait, e.g. 30s, 10m.")
def send(args: tuple[str, ...], **options) -> None:
    """Send MESSAGE to agent TO (comma-separate several), or to everyone with --broadcast.

    MESSAGE '-' (or none, with a pipe) reads the text from stdin; it may be up to 256 KiB
    (UTF-8), a longer one is refused (exit 2) and nothing is sent. Your name comes from
    --agent or RELAY_AGENT.

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
      relayctl send glacier "merge now?" --wait read --timeout 10m   # exit 0 once glacier read it
    """
    actions.send(settings(), args, **options)  # (options by the names relayctl.fast.COMMANDS declares)


@click.command()
@declared("read", "--from", metavar="AGENT", help="Only messages from AGENT.")
@declared("read", "--thread", metavar="ID", help="Only messages in thread ID.")
@declared("read", "--since", metavar="WHEN", help="Only newer messages: a duration (30m, 1h) or a date (2026-02-16).")
@declared("read", "--unread", help="Only messages past your read cursor, oldest first.")
@declared("read", "--last", show_default=True, metavar="N", help="At most N messages (the newest N; with --unread the oldest N unread). 0 = no limit.")
@declared("read", "--mark-read", help="Move your read cursor past the messages shown.")
@declared("read", "--tail", help="Then keep printing each new message once, in order, until Ctrl-C (with --mark-read: every unread one, marked read as shown).")
@declared("read", "--format", show_default=True, help="mime: each message as an IGNITE message file (Subject and X-Relay-* headers keep relay's own fields).")
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
    actions.read(settings(), from_, thread, since, unread, last, mark_read, tail, format_)
