"""budget: the person's coordination budget (relayd.arrival.budget): what is in force, and
resuming two agents the loop breaker paused."""

from __future__ import annotations

import click

import relayd.arrival.budget  # noqa: F401  (registers budget and budget_resume)

from .actions import paused_line
from .context import settings

BUDGET_HELP = """The coordination budget: how often relay may interrupt a working agent, and
the loop breaker that pauses two agents answering each other with no word from the person.

\b
Examples:
    relayctl budget                        each agent's settings in force, and what is paused
    relayctl budget resume coder reviewer  let relay announce their mail to each other again
    relayctl --json status | jq '.paused, [.agents[] | {name, context}]'

Set it in config.json ("coordination") or the team file (interrupt_interval, loop_messages,
loop_window; per agent too): docs/coordination.md#the-coordination-budget says what each
default is and why. Urgent mail and mail from the person (or the lead) are never held.
"""


@click.group(help=BUDGET_HELP, invoke_without_command=True)
@click.pass_context
def budget(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        ctx.invoke(budget_show)


@budget.command("show")
def budget_show() -> None:
    """Each agent's interrupt interval and loop breaker in force, and the paused exchanges."""
    s = settings()

    def human(r: dict) -> str:
        lines = [f"{'agent':<16} {'interval':<9} loop breaker"]
        lines += [f"{a['name']:<16} {a['interrupt_interval']:<9} more than {a['loop_messages']} back and forth in {a['loop_window']}" for a in r["agents"]]
        lines.append(f"the person: {', '.join(r['person']) or 'nobody named'}")
        lines += ["PAUSED " + paused_line(p) for p in r["paused"]] or ["nothing paused"]
        return "\n".join(lines)

    s.out(s.call("budget", {}), human)


@budget.command("resume")
@click.argument("first", metavar="AGENT")
@click.argument("second", metavar="AGENT")
def budget_resume(first: str, second: str) -> None:
    """Resume the exchange of two agents the loop breaker paused: relay announces their mail
    to each other again (what waited, at once), and counts afresh from now.

    \b
    Example:
      relayctl budget resume coder reviewer
    """
    s = settings()
    result = s.call("budget_resume", {"agents": [first, second], "by": s.agent})
    s.out(result, lambda r: f"resumed: {' and '.join(r['resumed']['agents'])} (their waiting mail is announced now)")

