"""hook claude|codex|gemini|copilot|opencode: the click commands over relayctl.hook_answer.

With relayd up, `relayctl hook` runs on the fast path (relayctl.fast) without loading this
module: a program runs it at every event of every session. This is the full CLI's side of
it: --help, and the same answer when the fast path declines.
"""

from __future__ import annotations

import sys

import click

from .context import settings
from .hook_answer import NAMED_BY_ENTRY, PROGRAMS
from .hook_answer import hook as answer


@click.group(invoke_without_command=True)
@click.pass_context
def hook(ctx: click.Context) -> None:
    """Run as a hook of an agent program: unread mail becomes context for its model.

    `relayctl hooks install --for PROGRAM --agent NAME` writes the hook entries into a
    project's settings; these subcommands are what those entries run.

    \b
    Examples:
      relayctl --agent inferno hook claude < event.json
      echo '{"hook_event_name":"BeforeAgent","prompt":"hi"}' | relayctl --agent inferno hook gemini
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _command(program: str, events: str) -> click.Command:
    title = PROGRAMS[program].title

    def run(event: str | None = None) -> None:
        status = answer(settings(), program, event)
        if status:
            sys.exit(status)

    run.__doc__ = f"""{title} hook: unread messages become additional context, then count as read.

    Reads the hook event JSON on stdin ({events}). Your agent name comes from
    --agent, OVLD_ROLE or RELAY_AGENT. `relayctl hooks install --for {program} --agent NAME`
    adds the entries to the project's settings.

    \b
    Examples:
      echo '{{"hook_event_name":"{PROGRAMS[program].context[0]}","prompt":"hi"}}' | relayctl --agent inferno hook {program}
    """
    if program in NAMED_BY_ENTRY:
        run.__doc__ = f"""{title} hook: unread messages become additional context, then count as read.

    Reads the hook event JSON on stdin; EVENT is the hook it runs for ({events}), since
    {title} does not name the event in the JSON. Your agent name comes from --agent,
    OVLD_ROLE or RELAY_AGENT. `relayctl hooks install --for {program}` writes the entries
    into the repository's .github/hooks/relay.json.

    \b
    Examples:
      echo '{{"prompt":"hi"}}' | relayctl --agent inferno hook {program} {PROGRAMS[program].context[0]}
    """
        run = click.argument("event", metavar="EVENT")(run)
    return click.command(program)(run)


for _name, _events in (
    ("claude", "UserPromptSubmit, PostToolUse and Stop hand mail over; SessionStart, PermissionRequest, Notification and SessionEnd report the session's state; StopFailure (a failed turn) makes the mail it was handed unread again"),
    ("codex", "UserPromptSubmit, PostToolUse and Stop hand mail over; SessionStart, PermissionRequest and Interrupt report the session's state"),
    ("gemini", "BeforeAgent, AfterTool and AfterAgent hand mail over; SessionStart, Notification and SessionEnd report the session's state"),
    ("copilot", "userPromptSubmitted, postToolUse and agentStop hand mail over; sessionStart, permissionRequest and sessionEnd report the session's state"),
    ("opencode", "chat.message, tool.execute.after and session.idle hand mail over; session.created, permission.asked, "
                 "question.asked, their replies and session.deleted report the session's state; relay's plugin sends them"),
):
    hook.add_command(_command(_name, _events))
