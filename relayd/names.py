"""The names and words the store accepts: agent names and message priorities.

Kept apart from `records` (and free of msgspec) so that a process which only checks its
own identity at start-up, such as relay-mcp, does not pay for loading the record types.
"""

from __future__ import annotations

import re

from .errors import InvalidName, UsageError

PRIORITIES: tuple[str, ...] = ("low", "normal", "high", "urgent")
_PRIORITY_ALIASES = {"critical": "urgent"}  # IGNITE's top level (seed 003)

# IGNITE's standard message types (seed 003, X-IGNITE-Type). `--type` takes any word;
# these are the ones IGNITE agents understand, and anything else draws a warning.
MESSAGE_TYPES: tuple[str, ...] = (
    "user_goal",
    "strategy_request",
    "strategy_response",
    "task_list",
    "architecture_request",
    "architecture_response",
    "task_assignment",
    "task_completed",
    "evaluation_request",
    "evaluation_result",
    "improvement_request",
    "improvement_suggestion",
    "improvement_completed",
    "progress_update",
    "system_init",
    "github_event",
    "github_task",
    "escalation",
    "dead_letter",
)

AGENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def check_agent_name(name: str, what: str = "agent name") -> str:
    """Agent names become directory names, so only this shape is ever accepted."""
    if not isinstance(name, str) or not AGENT_NAME_RE.fullmatch(name):
        shown = name if isinstance(name, str) and len(name) <= 80 else f"{str(name)[:77]}..."
        raise InvalidName(
            f"invalid {what} {shown!r}: use 1-64 characters a-z, 0-9, '_' or '-', starting with a letter or digit",
            name=shown,
        )
    return name


def normalize_priority(value: str | None) -> str:
    if value is None:
        return "normal"
    lowered = _PRIORITY_ALIASES.get(value.lower(), value.lower())
    if lowered not in PRIORITIES:
        raise UsageError(f"invalid priority {value!r}: use one of {', '.join(PRIORITIES)}")
    return lowered
