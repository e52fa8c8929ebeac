"""Every agent program relay knows, by name (`PROGRAMS`), in the order relay lists them.

A sixth program is one new module in this wing (defining its `PROGRAM`) and one line here.
"""

from __future__ import annotations

import os

from . import claude, codex, copilot, gemini, opencode
from .program import Program

PROGRAMS: dict[str, Program] = {p.name: p for p in (claude.PROGRAM, codex.PROGRAM, gemini.PROGRAM, copilot.PROGRAM, opencode.PROGRAM)}


def guests_of(host: str) -> tuple[Program, ...]:
    """The programs that also run `host`'s project hooks."""
    return tuple(p for p in PROGRAMS.values() if p.guest is not None and p.guest.host == host)


def owner_of(event: object, but: str) -> Program | None:
    """The first program other than `but` that has the hook event `event`."""
    return next((p for name, p in PROGRAMS.items() if name != but and (event in p.hooks.installed or event in p.hooks.other)), None)


def takes_channel(program: str) -> bool:
    """Whether an agent registered with this program (free text: "claude-code") is one
    relay-mcp can push mail to."""
    return any(program.lower().startswith(p.name) for p in PROGRAMS.values() if p.launch.channel is not None)


def named(program: str | None) -> Program | None:
    """The program an agent was registered with (free text: "claude-code", "codex", a
    command's path), when relay knows it."""
    word = os.path.basename((program or "").split()[0]).lower() if (program or "").strip() else ""
    return next((p for p in PROGRAMS.values() if word.startswith(p.name)), None)
