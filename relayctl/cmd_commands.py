"""cmd: post slash commands for a session, and the consumer side (consume, done)."""

from __future__ import annotations

import time

import click

from relayd.errors import TimedOut
from relayd.timefmt import parse_duration

from .context import settings, visible

GROUP_HELP = """Slash commands for a session: post one, or (as the session) claim and finish them.

\b
  relayctl cmd SESSION COMMAND [ARGS...]   post a command (same as `cmd post ...`)
  relayctl cmd consume --session SESSION   claim that session's pending commands
  relayctl cmd done ID                     mark a claimed command done
  relayctl cmd list / cmd show ID          look at commands and their status

A command moves pending -> consumed -> done; each pending command is claimed by exactly
one consumer, even when several run at once.

\b
Examples:
  relayctl cmd agent:main:main /verify oathkeeper bd-42
  relayctl cmd agent:main:main "/status" --wake
  relayctl cmd agent:main:main /verify bd-42 --wait 2m
  relayctl --agent athena cmd consume --session agent:main:main
  relayctl cmd done 01JMHF5DEF0000000000000000
"""


class CmdGroup(click.Group):
    """`cmd SESSION COMMAND ...` is `cmd post SESSION COMMAND ...` when SESSION is no subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["post", *args]
        return super().parse_args(ctx, args)


def render_command(c: dict) -> str:
    text = f"{c['command']} {c.get('args') or ''}".strip()
    by = f" by {c['consumed_by']}" if c.get("consumed_by") else ""
    return visible(f"{c['id']}  {c['status']:<8}  {c['from']} → {c['target_session']}  {text}{by if c['status'] != 'pending' else ''}")


@click.group(cls=CmdGroup, help=GROUP_HELP, subcommand_metavar="SESSION COMMAND [ARGS]... | consume | done | list | show", invoke_without_command=True)
@click.pass_context
def cmd(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@cmd.command()
@click.argument("session")
@click.argument("command")
@click.argument("args", nargs=-1)
@click.option("--wait", metavar="DURATION", help="Wait until the command is consumed (or done); exit 1 at the timeout.")
@click.option("--wake", is_flag=True, help="Also wake the orchestrator (relayctl wake) after posting.")
def post(session: str, command: str, args: tuple[str, ...], wait: str | None, wake: bool) -> None:
    """Post COMMAND (with ARGS) for SESSION, e.g. agent:main:main /verify bd-42.

    A single quoted "COMMAND ARGS" is split at the first space.

    \b
    Examples:
      relayctl cmd post agent:main:main /verify oathkeeper bd-42
      relayctl cmd agent:main:main "/verify oathkeeper bd-42" --wait 30s
    """
    s = settings()
    if not args and len(command.split(None, 1)) == 2:
        command, rest = command.split(None, 1)
        args = (rest,)
    deadline = parse_duration(wait).total_seconds() if wait else None
    posted = s.call("cmd", {"agent": s.require_agent("cmd"), "session": session, "command": command, "args": " ".join(args)})
    s.note(f"posted {posted['id']} for {session}: {posted['command']} {posted['args']}".rstrip())
    if wake:
        # deferred imports: waking the orchestrator (relayd.team.wake) only for `commands post`
        from .cmd_wake import wake_and_report

        wake_and_report(s, f"relay: command {posted['command']} posted for {session} by {posted['from']}")
    if deadline is not None:
        posted = _wait(s, posted["id"], deadline, wait)
        s.note(f"{posted['status']}" + (f" by {posted['consumed_by']}" if posted.get("consumed_by") else ""))
    s.out(posted)


def _wait(s, command_id: str, seconds: float, shown: str) -> dict:
    give_up = time.monotonic() + seconds
    pause = 0.02
    while True:
        current = s.call("cmd_get", {"id": command_id})
        if current["status"] != "pending":
            return current
        left = give_up - time.monotonic()
        if left <= 0:
            raise TimedOut(f"command {command_id} was not consumed within {shown} (it stays pending)")
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)


@cmd.command()
@click.option("--session", required=True, metavar="SESSION", help="The session whose commands to claim.")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Claim at most N commands.")
def consume(session: str, limit: int | None) -> None:
    """Claim SESSION's pending commands (oldest first) and print them; they become consumed.

    Run `relayctl cmd done ID` after carrying each one out. Safe with several consumers:
    each command is handed to exactly one.

    \b
    Examples:
      relayctl --agent athena cmd consume --session agent:main:main
      relayctl --json cmd consume --session agent:main:main --limit 1
    """
    s = settings()
    claimed = s.call("cmd_consume", {"session": session, "agent": s.agent, "limit": limit})

    def human(rows: list[dict]) -> str:
        if not rows:
            return f"no pending commands for {session}"
        return "\n".join(render_command(c) for c in rows)

    s.out(claimed, human)


@cmd.command()
@click.argument("command_id", metavar="ID")
def done(command_id: str) -> None:
    """Mark command ID done (after it was claimed with cmd consume).

    \b
    Examples:
      relayctl cmd done 01JMHF5DEF0000000000000000
    """
    s = settings()
    result = s.call("cmd_done", {"id": command_id, "agent": s.agent})
    s.out(result, lambda c: f"done {c['id']}")


@cmd.command("list")
@click.option("--status", type=click.Choice(["pending", "consumed", "done"]), help="Only commands in this state.")
@click.option("--session", metavar="SESSION", help="Only commands for this session.")
def list_(status: str | None, session: str | None) -> None:
    """List commands, oldest first.

    \b
    Examples:
      relayctl cmd list --status pending
      relayctl --json cmd list --session agent:main:main
    """
    s = settings()
    result = s.call("commands", {"status": status, "session": session})
    s.out(result, lambda rows: "\n".join(render_command(c) for c in rows) or "no commands")


@cmd.command()
@click.argument("command_id", metavar="ID")
def show(command_id: str) -> None:
    """Show one command and its status.

    \b
    Examples:
      relayctl cmd show 01JMHF5DEF0000000000000000
    """
    s = settings()
    s.out(s.call("cmd_get", {"id": command_id}), render_command)
