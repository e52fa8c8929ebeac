"""When a recorded "asking" is over although no hook said so: the screen's evidence.

After the person declines a permission question (Esc, "No"), Claude Code, Gemini CLI and
Copilot CLI run no hook: the recorded state stays "asking" until the person's next prompt,
and mail waits that long. The program's own empty prompt on the screen, with no question
drawn, seen at two looks at least `settle` seconds apart while the recorded state has not
changed and the screen itself has not changed either, is taken as the question's end
(relayd.arrival.notify then records "idle"). The unchanged screen matters: Copilot CLI
reports a permission request even for a tool the person allowed beforehand and then runs
it with its empty prompt showing, as Claude Code and Codex show theirs while they work;
but a working program's screen moves (a spinner, a timer), a program at rest does not.
A question on the screen at any look starts the wait again: relay never types into one.

No I/O and no clock of its own: `AskingEnds(clock)` is tested with a clock the test moves.
"""

from __future__ import annotations

import time
from typing import Callable

ASKING_SETTLE = 3.0  # seconds of empty prompt, no question, before "asking" counts as over


class AskingEnds:
    """Per agent: since when its program, recorded as asking, has looked at rest."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, settle: float = ASKING_SETTLE) -> None:
        self.clock = clock
        self.settle = settle
        # agent -> (the asking state's `at`, the screen, the first look at it)
        self._since: dict[str, tuple[str, str, float]] = {}

    def look(self, agent: str, asked_at: str, at_rest: str | None) -> bool:
        """One look at the agent's screen while its state (recorded at `asked_at`) says
        asking; `at_rest`: the screen if its empty prompt shows and no question does, else
        None. True once the same screen has shown so for `settle` seconds."""
        if at_rest is None:
            self._since.pop(agent, None)
            return False
        now = self.clock()
        seen = self._since.get(agent)
        if seen is None or seen[0] != asked_at or seen[1] != at_rest:
            self._since[agent] = (asked_at, at_rest, now)
            return False
        return now - seen[2] >= self.settle

    def since(self, agent: str) -> float | None:
        """When (on the clock) the agent's program was first seen at rest, if it is now."""
        seen = self._since.get(agent)
        return seen[2] if seen else None

    def forget(self, agent: str) -> None:
        self._since.pop(agent, None)
