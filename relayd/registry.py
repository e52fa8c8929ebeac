"""Where operations register: the `operation` decorator and what it records.

Kept apart from the table (`relayd.ops`), which imports every domain module to fill
itself: a domain module imports only this, so nothing imports in a circle, and a command
that needs one operation loads one domain module.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from .store import Store


class Operation(msgspec.Struct, frozen=True):  # not a dataclass: dataclasses (with inspect) costs relayctl ~9 ms of start-up
    name: str
    params: type[msgspec.Struct]
    run: Callable[[Store, Any], Any]
    mutates: bool
    summary: str
    # Optional: run many requests of this operation as one (list of params -> list of
    # results or RelayErrors, same order); the daemon uses it for requests that arrive together.
    batch: Callable[[Store, list[Any]], list[Any]] | None = None


REGISTERED: dict[str, Operation] = {}

# Operations a relayd running --bridge decides team-wide (relayd/bridge/service.py
# `team_ops`) instead of running them here: each travels only as a request of its own.
TEAM_DECIDED = frozenset({"register", "reserve", "release"})


def operation(name: str, params: type[msgspec.Struct], *, mutates: bool = True, batch: Callable[[Store, list[Any]], list[Any]] | None = None) -> Callable:
    """Register a store function as the operation `name`."""

    def register(func: Callable[[Store, Any], Any]) -> Callable[[Store, Any], Any]:
        if name in REGISTERED:
            raise RuntimeError(f"operation {name!r} defined twice")
        summary = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else ""
        REGISTERED[name] = Operation(name, params, func, mutates, summary, batch)
        return func

    return register
