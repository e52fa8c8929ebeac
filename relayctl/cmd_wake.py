"""wake and gc."""

from __future__ import annotations

import click

from .context import settings


def wake_and_report(s, text: str, method: str | None = None) -> dict:
    """Wake through the layers and say which one worked (used by wake, send --wake, cmd --wake)."""
    # deferred imports: relayctl send --wake loads this module; relayd.team.wake (msgspec, config)
    # only when a wake is sent
    from relayd.team.wake import wake as run_wake

    result = run_wake(s.client().store(), s.call, text, method, s.agent)
    failed = [t for t in result["tried"] if not t["ok"]]
    reasons = "; ".join(f"{t['method']}: {t['error']}" for t in failed)
    detail = f" ({reasons})" if failed else ""
    s.note(f"woke via {result['method']}{detail}")
    return result


@click.command()
@click.argument("text", required=False)
@click.option("--method", type=click.Choice(["gateway", "socket", "file"]), help="Use only this layer. [default: gateway, then socket, then file]")
@click.option("--forward", is_flag=True, help="Hand the last file-trigger wake to the gateway or socket (for the systemd path unit).")
def wake(text: str | None, method: str | None, forward: bool) -> None:
    """Wake the orchestrator with TEXT: gateway command, then gateway socket, then file trigger.

    Configure the layers in config.json in the store:
    {"wake": {"gateway_command": ["~/athena/scripts/wake-gateway.sh"], "gateway_socket": "/path/to.sock"}}.
    The file layer writes wake/last-message and touches wake/trigger; it always works.
    Prints which method worked; exits 1 when a forced --method fails.

    \b
    Examples:
      relayctl wake "Agent bd-42 completed. Check results."
      relayctl wake --method file "Agent done"
      relayctl wake --forward            # what contrib/systemd/relay-wake.service runs
    """
    s = settings()
    if forward:
        if text or method:
            raise click.UsageError("--forward takes no TEXT or --method: it sends wake/last-message")
        from relayd.team.wake import forward_pending

        result = forward_pending(s.client().store())
        s.note(f"forwarded via {result['method']}")
        s.out(result)
        return
    result = wake_and_report(s, text or (f"relay wake from {s.agent}" if s.agent else "relay wake"), method)
    s.out(result)


@click.command()
@click.option("--dry-run", is_flag=True, help="Only show what would be cleaned.")
@click.option("--expired-only", is_flag=True, help="Only expired reservations; leave agents and commands alone.")
@click.option("--stale", default="30m", show_default=True, metavar="DURATION", help="Archive agents whose heartbeat is older than this.")
@click.option("--keep", metavar="DURATION", help='Drop read messages older than this (e.g. 30d) from rotated inboxes; never unread or owed ones. [default: config.json "gc": {"keep": ...}, else keep all]')
@click.option("--dead-letter-keep", metavar="DURATION", help='Delete rotated-out unread mail in dead_letter/ older than this ("never": keep it by age). [default: config.json "gc": {"dead_letter_keep": ...}, else 30d]')
@click.option("--dead-letter-mib", type=click.IntRange(min=1), metavar="MIB", help='Keep at most this many MiB of it, deleting the oldest first. [default: config.json "gc": {"dead_letter_mib": ...}, else 256]')
def gc(dry_run: bool, expired_only: bool, stale: str, keep: str | None, dead_letter_keep: str | None, dead_letter_mib: int | None) -> None:
    """Clean up: expired reservations, stale agents (heartbeat -> heartbeat.stale), and
    consumed/done commands older than an hour; with --keep (or config.json gc.keep), read
    messages older than that from rotated inboxes (inbox.jsonl.1); rotated-out unread mail
    in dead_letter/ past its age or size limit. relayd runs this on a timer, with
    config.json's settings.

    \b
    Examples:
      relayctl gc
      relayctl gc --dry-run
      relayctl gc --expired-only
      relayctl gc --keep 30d --dry-run
      relayctl gc --dead-letter-keep 7d --dead-letter-mib 64 --dry-run
    """
    s = settings()
    params = {"dry_run": dry_run, "expired_only": expired_only, "stale": stale}
    if keep is not None:
        params["keep"] = keep
    if dead_letter_keep is not None:
        params["dead_letter_keep"] = dead_letter_keep
    if dead_letter_mib is not None:
        params["dead_letter_mib"] = dead_letter_mib
    result = s.call("gc", params)

    def human(r: dict) -> str:
        verb = "would remove" if r["dry_run"] else "removed"
        lines = [f"{verb} reservation {x['pattern']} in {x['repo']} ({x['agent']}, expired {x['expires_at']})" for x in r["reservations"]]
        lines += [f"{'would archive' if r['dry_run'] else 'archived'} stale agent {name}" for name in r["agents"]]
        lines += [f"{verb} finished command {cid}" for cid in r["commands"]]
        lines += [f"{'would drop' if r['dry_run'] else 'dropped'} {t['dropped']} read message{'s' if t['dropped'] != 1 else ''} of {t['agent']} from {t['file']} ({t['kept']} kept)" for t in r.get("trimmed", [])]
        lines += [f"{'would delete' if r['dry_run'] else 'deleted'} {d['file']} ({d['bytes']} bytes of unread mail of {d['agent']}: {d['why']})" for d in r.get("dead_letters", [])]
        return "\n".join(lines) or "nothing to clean"

    s.out(result, human)
