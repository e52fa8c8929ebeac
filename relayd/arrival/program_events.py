"""Which state an agent program is in after each of its hook events: the tables are each
program's own (`Hooks.states` in relayd.programs), kept apart from the store code so that
`relayctl hook`, which runs at every event of every session, loads only this and the
programs wing (relayctl.fast).
"""

from __future__ import annotations

from relayd.programs.program import STATES
from relayd.programs.registry import PROGRAMS

__all__ = ["STATES", "state_after", "turn_failed", "turn_stopped"]


def state_after(program: str, event: dict, continued: bool = False) -> str | None:
    """The state a program is in once it has run its hook for `event` (the hook's JSON on
    stdin); `continued`: the hook's answer to a turn's end keeps the session working."""
    spec = PROGRAMS.get(program)
    return spec.state_after(event, continued) if spec is not None else None


def turn_failed(program: str, event: dict) -> bool:
    """Whether the hook event `event` (the hook's JSON on stdin) ends a turn in failure
    (`Hooks.failed`, `Hooks.failure`): mail handed into that turn is unread again."""
    spec = PROGRAMS.get(program)
    return spec is not None and spec.turn_failed(event)


def turn_stopped(program: str, event: dict) -> bool:
    """Whether the hook event `event` says the person stopped the turn before the model saw
    the mail handed into it (`Hooks.stopped`): that mail waits for their next prompt."""
    spec = PROGRAMS.get(program)
    return spec is not None and spec.turn_stopped(event)
