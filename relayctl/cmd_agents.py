"""register, heartbeat, set-status, status (what heartbeat and status do is in relayctl.actions)."""

from __future__ import annotations


import os
import click

from . import actions
from .context import settings
from .options import declared


@click.command()
@click.argument("name")
@click.option("--role", metavar="TEXT", help='What the agent does in the team, e.g. "reviewer" (shown in presence).')
@click.option("--program", metavar="TEXT", help='Agent program, e.g. "claude-code", "codex".')
@click.option("--model", metavar="TEXT", help='Model name, e.g. "opus".')
@click.option("--task", metavar="TEXT", help="Current task.")
@click.option("--bead", metavar="ID", help="Associated bead / ticket id.")
@click.option("--notify", metavar="HOW", help="How new mail reaches the agent: tmux:TARGET, zellij:PANE_ID, cmd:ARGV..., channel, hook or none.")
@click.option("--session", metavar="NAME", help="Session name for slash commands, e.g. agent:main:main; with --notify zellij:..., the zellij session (default: $OVLD_SESSION, then $ZELLIJ_SESSION_NAME).")
def register(name: str, role, program, model, task, bead, notify, session) -> None:
    """Register agent NAME (or update it): creates its inbox, meta.json and heartbeat.

    Names are 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit.

    \b
    Examples:
      relayctl register agent-bd-42 --program claude-code --model opus --task "Auth refactor" --bead bd-42
      relayctl register inferno --notify tmux:%3
      relayctl register alice --role reviewer
      relayctl register storm --notify zellij:3        # run in the pane: records its zellij session
    """
    if session is None and notify and notify.startswith("zellij:"):
        # relayd types into the pane from outside zellij: it must name the session
        session = os.environ.get("OVLD_SESSION") or os.environ.get("ZELLIJ_SESSION_NAME") or None
    s = settings()
    params = {"name": name, "role": role, "program": program, "model": model, "task": task, "bead": bead, "notify": notify, "session": session}
    result = s.call("register", params)
    s.out(result, lambda r: f"registered {r['name']}" + (f" (task: {r['task']})" if r.get("task") else ""))


@click.command()
@declared("heartbeat", "--task", metavar="TEXT", help="Also update the task description.")
def heartbeat(task: str | None) -> None:
    """Refresh your heartbeat so others see you as alive (run it every minute or so).

    \b
    Examples:
      relayctl --agent agent-bd-42 heartbeat
      relayctl heartbeat --task "Now working on tests"
      while true; do relayctl heartbeat; sleep 60; done &
    """
    actions.heartbeat(settings(), task)


@click.command("set-status")
@click.argument("status")
@declared("set-status", "--task", metavar="TEXT", help="Also set the current task.")
def set_status(status: str, task: str | None) -> None:
    """Tell the team what you are doing: a short STATUS (and task); refreshes your heartbeat.

    \b
    Examples:
      relayctl --agent inferno set-status working --task "implementing login"
      relayctl set-status blocked --task "waiting for review of #42"
    """
    actions.set_status(settings(), status, task)


@click.command()
@declared("status", "--agents", help="Show only agents.")
@declared("status", "--reservations", help="Show only reservations.")
@declared("status", "--commands", help="Show only pending commands.")
@declared("status", "--stale", show_default=True, metavar="DURATION", help="Heartbeat age after which an agent counts as stale.")
def status(only_agents: bool, only_reservations: bool, only_commands: bool, stale: str) -> None:
    """Show agents (alive or stale), reservations and pending commands, and whether relayd runs;
    how each agent's mail reaches it (register --notify) and, when announcing it keeps failing,
    since when, how many times and the last error; messages sent with --ack that are still
    owed or dead-lettered, when there are any.

    \b
    Examples:
      relayctl status
      relayctl status --agents --stale 2m
      relayctl --json status | jq '.agents[] | select(.alive)'
    """
    actions.status(settings(), only_agents, only_reservations, only_commands, stale)
