"""Waiting in tests for something another process does: poll, never sleep blindly."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(what: str, predicate: Callable[[], T], timeout: float = 20.0, every: float = 0.02,
             explain: Callable[[], str] | None = None) -> T:
    """The first truthy value of `predicate()`, asked every `every` seconds; fails naming
    `what` when `timeout` seconds pass without one, with what `explain()` says of the state
    then (what relay recorded: a timeout on a loaded machine is otherwise a mystery)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = ""
            if explain is not None:
                try:
                    said = "\n" + explain()
                except Exception as exc:  # the explanation must not hide the timeout
                    said = f"\n(explaining failed: {exc!r})"
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{said}")
        time.sleep(every)
