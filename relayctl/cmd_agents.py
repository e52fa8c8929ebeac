"""register, heartbeat, set-status, status."""

from __future__ import annotations

import click

from relayd.timefmt import parse_iso, short_span

from .context import clip, settings


@click.command()
@click.argument("name")
@click.option("--program", metavar="TEXT", help='Agent program, e.g. "claude-code", "codex".')
@click.option("--model", metavar="TEXT", help='Model name, e.g. "opus".')
@click.option("--task", metavar="TEXT", help="Current task.")
@click.option("--bead", metavar="ID", help="Associated bead / ticket id.")
@click.option("--notify", metavar="HOW", help="How new mail reaches the agent: tmux:TARGET, zellij:PANE_ID, cmd:ARGV..., channel, hook or none.")
@click.option("--session", metavar="NAME", help="Session name for slash commands, e.g. agent:main:main.")
def register(name: str, program, model, task, bead, notify, session) -> None:
    """Register agent NAME (or update it): creates its inbox, meta.json and heartbeat.

    Names are 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit.

    \b
    Examples:
      relayctl register agent-bd-42 --program claude-code --model opus --task "Auth refactor" --bead bd-42
      relayctl register inferno --notify tmux:%3
    """
    s = settings()
    params = {"name": name, "program": program, "model": model, "task": task, "bead": bead, "notify": notify, "session": session}
    result = s.call("register", params)
    s.out(result, lambda r: f"registered {r['name']}" + (f" (task: {r['task']})" if r.get("task") else ""))


@click.command()
@click.option("--task", metavar="TEXT", help="Also update the task description.")
def heartbeat(task: str | None) -> None:
    """Refresh your heartbeat so others see you as alive (run it every minute or so).

    \b
    Examples:
      relayctl --agent agent-bd-42 heartbeat
      relayctl heartbeat --task "Now working on tests"
      while true; do relayctl heartbeat; sleep 60; done &
    """
    s = settings()
    result = s.call("heartbeat", {"agent": s.require_agent("heartbeat"), "task": task})
    s.out(result, lambda r: f"heartbeat {r['agent']} at {r['heartbeat']}")


@click.command("set-status")
@click.argument("status")
@click.option("--task", metavar="TEXT", help="Also set the current task.")
def set_status(status: str, task: str | None) -> None:
    """Tell the team what you are doing: a short STATUS (and task); refreshes your heartbeat.

    \b
    Examples:
      relayctl --agent inferno set-status working --task "implementing login"
      relayctl set-status blocked --task "waiting for review of #42"
    """
    s = settings()
    result = s.call("set_status", {"agent": s.require_agent("set-status"), "status": status, "task": task})
    s.out(result, lambda r: f"{r['name']}: {r['status']}" + (f" (task: {r['task']})" if r.get("task") else ""))


def _agent_line(a: dict) -> str:
    state = "alive" if a["alive"] else "ARCHIVED" if a.get("archived") else "STALE"
    if a["last_heartbeat"] is None:
        beat = "never"
    else:
        beat = f"{short_span(a['age_seconds'] or 0)} ago"
    status = f"   status: {clip(a['status'], 20)}" if a.get("status") else ""
    return f"  {a['name']:<16} {state:<7} last heartbeat: {beat:<10} task: {clip(a.get('task'), 40) or '(unknown)'}{status}"


def _bridge_line(b: dict) -> str:
    line = f"bridge: {b['state']} ({b['url']}) as host {b['host']}, backlog {b.get('backlog', 0)}"
    if b.get("last_error") and b["state"] != "connected":
        line += f"; last error: {clip(b['last_error'], 80)}"
    for name, owner in sorted((b.get("name_conflicts") or {}).items()):
        line += f"\n  warning: agent name {name} is owned by host {owner}; mail for it goes there"
    return line


def _remote_agent_line(a: dict) -> str:
    if a.get("alive") is None:  # from the last directory relayd saw: no presence
        return f"  {a['name']:<16} @{a['host']:<14} (relayd not running: presence unknown)"
    return _agent_line(a).replace(f"  {a['name']:<16} ", f"  {a['name']:<16} @{clip(a['host'], 13):<14}", 1)


def _reservation_line(r: dict) -> str:
    from relayd.timefmt import now

    expires = parse_iso(r["expires_at"])
    left = (expires - now()).total_seconds()
    when = f"expires in {short_span(left)}" if left > 0 else f"EXPIRED {short_span(left)} ago"
    kind = "exclusive" if r.get("exclusive", True) else "shared"
    repo = r.get("repo", "").rstrip("/").rsplit("/", 1)[-1]
    return f"  {clip(r['pattern'], 20):<20} {r['agent']:<13} {kind:<11} {when:<16} {repo}"


def _command_line(c: dict) -> str:
    from relayd.timefmt import ago

    return f"  {c['id'][:13]}...   {c['from']} → {c['target_session']}   {clip((c['command'] + ' ' + c.get('args', '')).strip(), 40)}   {ago(parse_iso(c['ts']))}"


def render_status(r: dict, sections: set[str]) -> str:
    lines = []
    daemon = r.get("daemon")
    if daemon is not None:
        lines.append(f"relayd: {'running' if daemon.get('running') else 'not running (direct mode)'}")
        lines.append("")
    bridge = r.get("bridge")
    if bridge is not None:
        lines.append(_bridge_line(bridge))
        lines.append("")
    if "agents" in sections:
        agents = r["agents"]
        alive = sum(1 for a in agents if a["alive"])
        lines.append(f"AGENTS ({alive} alive, {len(agents) - alive} stale)")
        lines.extend(_agent_line(a) for a in agents)
        lines.append("")
        if bridge is not None and bridge.get("agents"):
            remote = bridge["agents"]
            alive = sum(1 for a in remote if a.get("alive"))
            lines.append(f"AGENTS ON OTHER HOSTS ({alive} alive, {len(remote) - alive} stale)")
            lines.extend(_remote_agent_line(a) for a in remote)
            lines.append("")
    if "reservations" in sections:
        res = r.get("reservations", [])
        from relayd.timefmt import now

        expired = sum(1 for x in res if parse_iso(x["expires_at"]) <= now())
        lines.append(f"RESERVATIONS ({len(res) - expired} active, {expired} expired)")
        lines.extend(_reservation_line(x) for x in res)
        lines.append("")
        theirs = (bridge or {}).get("reservations") or []
        if theirs:
            lines.append(f"RESERVATIONS ON OTHER HOSTS ({len(theirs)})")
            lines.extend(_reservation_line(x) + f"  @{x['host']}" for x in theirs)
            lines.append("")
    if "commands" in sections:
        cmds = r.get("commands", [])
        lines.append(f"PENDING COMMANDS ({len(cmds)})")
        lines.extend(_command_line(c) for c in cmds)
        lines.append("")
    delivery = r.get("delivery")
    if "agents" in sections and delivery and (delivery["owed"] or delivery["dead_letters"]):
        # Only when there is something: most teams never send with --ack.
        lines.append(f"DELIVERY ({delivery['owed']} owed, {delivery['dead_letters']} dead letters: relayctl dlq list)")
        for name in sorted(set(delivery["owed_by_agent"]) | set(delivery["dead_letters_by_agent"])):
            lines.append(f"  {name:<16} owed: {delivery['owed_by_agent'].get(name, 0):<5} dead letters: {delivery['dead_letters_by_agent'].get(name, 0)}")
        lines.append("")
    return "\n".join(lines).rstrip()


@click.command()
@click.option("--agents", "only_agents", is_flag=True, help="Show only agents.")
@click.option("--reservations", "only_reservations", is_flag=True, help="Show only reservations.")
@click.option("--commands", "only_commands", is_flag=True, help="Show only pending commands.")
@click.option("--stale", default="5m", show_default=True, metavar="DURATION", help="Heartbeat age after which an agent counts as stale.")
def status(only_agents: bool, only_reservations: bool, only_commands: bool, stale: str) -> None:
    """Show agents (alive or stale), reservations and pending commands, and whether relayd runs;
    messages sent with --ack that are still owed or dead-lettered, when there are any.

    \b
    Examples:
      relayctl status
      relayctl status --agents --stale 2m
      relayctl --json status | jq '.agents[] | select(.alive)'
    """
    s = settings()
    result = s.call("status", {"stale": stale})
    result["daemon"] = {"running": getattr(s.client(), "mode", "direct") == "daemon", "socket": s.client().socket_path}
    chosen = {name for name, on in (("agents", only_agents), ("reservations", only_reservations), ("commands", only_commands)) if on}
    s.out(result, lambda r: render_status(r, chosen or {"agents", "reservations", "commands"}))
