"""send and read: their options and help (what they do is in relayctl.actions)."""

from __future__ import annotations

import click

import relayd.inbox  # noqa: F401  (registers send and read, so the other operations need not load)
from relayd.records import PRIORITIES

from . import actions
from .actions import render_message  # noqa: F401  (cmd_delivery prints dead letters with it)
from .context import settings


@click.command()
@click.argument("args", nargs=-1, metavar="[TO] MESSAGE")
@click.option("--subject", metavar="TEXT", help="Subject line. [default: the first 80 characters of the message]")
@click.option("--thread", metavar="ID", help="Thread id, e.g. a bead or ticket id.")
@click.option("--priority", default="normal", show_default=True, type=click.Choice([*PRIORITIES, "critical"], case_sensitive=False), help="critical is accepted as urgent.")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Add a tag (repeatable).")
@click.option("--broadcast", is_flag=True, help="Send to every registered agent except yourself.")
@click.option("--type", "type_", metavar="TYPE", help="Message type: one of the IGNITE types listed above (another word is stored too, with a warning).")
@click.option("--ack", is_flag=True, help="Delivery must be acknowledged: redelivered (with backoff) until the recipient runs 'relayctl ack ID', then a dead letter and you are told.")
@click.option("--ack-wait", metavar="DURATION", help="With --ack: backoff base; the wait after delivery n is random(0, min(cap, ACK_WAIT*2^(n-1))). [config.json delivery.ack_wait, 5s]")
@click.option("--max-deliver", type=int, metavar="N", help="With --ack: redeliveries before it becomes a dead letter. [config.json delivery.max_deliver, 3]")
@click.option("--wake", is_flag=True, help="Also wake the orchestrator after sending (see relayctl wake).")
@click.option("--mime", "mime_files", multiple=True, metavar="FILE", help="Send an IGNITE message file instead (repeatable); its headers give sender, recipients and fields (see relayctl mime send).")
@click.option("--id", "message_id", metavar="ULID", help="The message id (a ULID). Repeating a send with the same id within the dedup window (config.json dedup.window, default 10m) delivers it once. [default: a new one]")
@click.option("--wait", "wait_for", type=click.Choice(["read", "ack"]), help="Then wait until every recipient has read it (ack: acknowledged it, with --ack); exit 1 with who has not at the --timeout.")
@click.option("--timeout", default="5m", show_default=True, metavar="DURATION", help="With --wait: how long to wait, e.g. 30s, 10m.")
def send(args: tuple[str, ...], subject, thread, priority, tags, broadcast, type_, ack, ack_wait, max_deliver, wake, mime_files, message_id, wait_for, timeout) -> None:
    """Send MESSAGE to agent TO (comma-separate several), or to everyone with --broadcast.

    MESSAGE '-' (or none, with a pipe) reads the text from stdin. Your name comes from
    --agent, OVLD_ROLE or RELAY_AGENT.

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
      relayctl send glacier "merge now?" --wait read --timeout 10m   # exit 0 once glacier read it
    """
    actions.send(settings(), args, subject, thread, priority, tags, broadcast, type_, ack, ack_wait, max_deliver, wake, mime_files, message_id, wait_for, timeout)


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
    actions.read(settings(), from_, thread, since, unread, last, mark_read, tail, format_)
