"""Waiting in tests for something another process does: poll, never sleep blindly."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(what: str, predicate: Callable[[], T], timeout: float = 20.0, every: float = 0.02) -> T:
    """The first truthy value of `predicate()`, asked every `every` seconds; fails naming
    `what` when `timeout` seconds pass without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
