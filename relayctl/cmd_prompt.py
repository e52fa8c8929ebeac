"""prompt: the short instructions an agent needs to work in a relay team."""

from __future__ import annotations

import click

from relayd.team.prompt import KINDS, LANGS, agent_prompt, tokens

from .context import settings


@click.command()
@click.option("--for", "kind", type=click.Choice(KINDS), default="cli", show_default=True, help="cli: the relayctl commands; mcp: the relay-mcp tools.")
@click.option("--lang", type=click.Choice(LANGS), default="en", show_default=True, help="English or Japanese.")
def prompt(kind: str, lang: str) -> None:
    """Print the instructions to put in an agent's system prompt (or AGENTS.md, CLAUDE.md):
    unread mail first, reserve before editing, release when done, report your phase.

    Under 300 tokens. Names the agent given with --agent (or RELAY_AGENT). relay-mcp
    gives the --for mcp text to its clients as the server's instructions.

    \b
    Examples:
      relayctl --agent inferno prompt >> AGENTS.md
      relayctl prompt --for mcp
      relayctl --agent glacier prompt --lang ja
      relayctl --json prompt | jq -r .tokens
    """
    s = settings()
    text = agent_prompt(kind, lang, s.agent)
    s.out({"for": kind, "lang": lang, "agent": s.agent, "text": text, "tokens": round(tokens(text))}, lambda r: r["text"])
