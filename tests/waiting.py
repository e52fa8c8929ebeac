"""Waiting for something a test can see, with a deadline (never a bare sleep)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout: float = 20.0) -> T:
    """`condition()`'s first true value; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return found
