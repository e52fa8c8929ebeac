"""What the agent prompt costs a model: `relayctl prompt` in each flavour and language,
and relay-mcp's `instructions`, against seed 004's < 300 tokens.

Tokens are characters / 4, as for tools/list. For Japanese that undercounts, so those rows
also give a conservative count (a token per non-ASCII character) in the note, and the
target is checked against the larger of the two.
"""

from __future__ import annotations

from .common import Row

AREA = "prompt"


def run(quick: bool) -> list[Row]:
    from mcp_shim.server import instructions
    from relayd.team.prompt import KINDS, LANGS, TOKEN_BUDGET, agent_prompt, tokens, tokens_conservative

    rows = []
    target = f"< {TOKEN_BUDGET} tokens"
    for kind in KINDS:
        for lang in LANGS:
            text = agent_prompt(kind, lang, "agent-bd-42")
            plain, careful = tokens(text), tokens_conservative(text)
            note = "chars/4" + (f"; {careful:.0f} counting a token per non-ASCII character" if careful != plain else "")
            rows.append(Row(AREA, f"relayctl prompt --for {kind} --lang {lang}", plain, "tokens", target, max(plain, careful) < TOKEN_BUDGET, note))
    shown = tokens(instructions("agent-bd-42"))
    rows.append(Row(AREA, "relay-mcp instructions (the mcp prompt + the channel note)", shown, "tokens", target, shown < TOKEN_BUDGET, "chars/4"))
    return rows
