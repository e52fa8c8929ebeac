"""init, reset, version."""

from __future__ import annotations


import sys
import click

from .context import settings


@click.command()
@click.option("--preset", type=click.Choice(["overlord", "ignite"]), help="Also register a team: overlord = overlord, strategist, inferno, glacier, shadow, storm; ignite = leader, strategist, architect, evaluator, coordinator, innovator and the workers ignitian_1..N, with leader as the escalation agent.")
@click.option("--workers", type=click.IntRange(0, 64), metavar="N", help="With --preset ignite: how many workers (ignitian_1..N).  [default: 3]")
@click.option("--allow-new-agents/--fixed-team", default=None, help="With --preset: may an agent program (relay-mcp with OVLD_ROLE) register a name the team does not have? A fixed team refuses it, naming the known ones, so a typo'd role is caught.  [default: --fixed-team; config.json \"team\"]")
def init(preset: str | None, workers: int | None, allow_new_agents: bool | None) -> None:
    """Create the store (directories 0700, files 0600) and optionally a team of agents.

    A preset's team is fixed: relay-mcp started with a role the team does not have
    (OVLD_ROLE=infern) is refused with the list of known agents. `relayctl register NAME`
    still adds an agent on purpose; --allow-new-agents lets agent programs add themselves.

    \b
    Examples:
      relayctl init
      relayctl init --preset overlord
      relayctl --dir /tmp/team init --preset ignite
      relayctl init --preset ignite --workers 8 --allow-new-agents
    """
    s = settings()
    params: dict = {"preset": preset}
    if workers is not None:
        params["workers"] = workers
    if allow_new_agents is not None:
        params["allow_new_agents"] = allow_new_agents
    result = s.call("init", params)
    created = f", registered {', '.join(result['created'])}" if result["created"] else ""
    escalation = f"; dead letters escalate to {result['escalate_to']}" if result.get("escalate_to") else ""
    fixed = "; the team is fixed (relayctl register adds an agent)" if not result.get("allow_new_agents", True) else ""
    s.out(result, lambda r: f"store ready at {r['dir']} (format {r['format']}){created}{escalation}{fixed}")


@click.command()
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def reset(yes: bool) -> None:
    """Delete every agent, message, reservation, command and event in the store.

    The store directory and its config file stay, except a fixed team's definition
    (init --preset): it goes with the agents, so agent programs can register again;
    'relayctl init --preset NAME' makes the team again. Asks first unless --yes.

    \b
    Examples:
      relayctl reset
      relayctl reset --yes
    """
    s = settings()
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("reset needs confirmation: run it in a terminal, or pass --yes")
        click.confirm(f"Delete all agents and messages in {s.dir}?", abort=True)
    result = s.call("reset", {"confirm": True})
    s.out(result, _render_reset)


def _render_reset(r: dict) -> str:
    text = f"reset {r['dir']}: removed {', '.join(r['removed']) or 'nothing'}"
    if r.get("unfixed"):
        text += f"; the fixed team (preset {r['unfixed']}) went with its agents: make it again with 'relayctl init --preset {r['unfixed']}'"
    return text


@click.command()
def version() -> None:
    """Print relay's version, store format and protocol version.

    \b
    Examples:
      relayctl version
      relayctl --json version
    """
    s = settings()
    result = s.call("version")
    s.out(result, lambda r: f"relay {r['version']} (store format {r['store_format']}, protocol {r['protocol']})")
