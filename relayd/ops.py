"""The operation table: every store operation by name, with its parameter type.

One definition serves everyone: the daemon decodes a request's `params` into the
operation's Struct and calls the function; a client in direct mode calls the very same
function. Results are converted to plain JSON-able data the same way on both paths, so
the two modes give identical answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import msgspec

from .errors import UsageError
from .store import Store


@dataclass(frozen=True)
class Operation:
    name: str
    params: type[msgspec.Struct]
    run: Callable[[Store, Any], Any]
    mutates: bool
    summary: str
    # Optional: run many requests of this operation as one (list of params -> list of
    # results or RelayErrors, same order); the daemon uses it for requests that arrive together.
    batch: Callable[[Store, list[Any]], list[Any]] | None = None


_REGISTRY: dict[str, Operation] = {}


def operation(name: str, params: type[msgspec.Struct], *, mutates: bool = True, batch: Callable[[Store, list[Any]], list[Any]] | None = None) -> Callable:
    """Register a store function as the operation `name`."""

    def register(func: Callable[[Store, Any], Any]) -> Callable[[Store, Any], Any]:
        if name in _REGISTRY:
            raise RuntimeError(f"operation {name!r} defined twice")
        summary = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else ""
        _REGISTRY[name] = Operation(name, params, func, mutates, summary, batch)
        return func

    return register


def table() -> dict[str, Operation]:
    """All operations; importing the domain modules fills the table."""
    from . import admin, agents, commands, gc, inbox, overview, reservations, wake  # noqa: F401  (registration side effect)

    return _REGISTRY


def decode_params(op: Operation, params: object) -> msgspec.Struct:
    """Validate wire or CLI parameters into the operation's Struct."""
    if isinstance(params, op.params):
        return params
    try:
        return msgspec.convert(params if params is not None else {}, op.params, from_attributes=False)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{op.name}: {exc}") from None


def lookup(name: str) -> Operation:
    # A caller that imported the operation's module already skips importing all the others
    # (relayctl starts faster); anything else loads the full table.
    found = _REGISTRY.get(name) or table().get(name)
    if found is None:
        raise UsageError(f"unknown operation {name!r}; known: {', '.join(sorted(table()))}", op=name)
    return found


def call(store: Store, name: str, params: object) -> Any:
    """Run operation `name` directly on `store`; returns plain JSON-able data."""
    op = lookup(name)
    params = decode_params(op, params)
    if not op.mutates and name != "version":
        # Looking must not create: a mistyped RELAY_DIR would otherwise yield an empty,
        # healthy-looking store instead of an error.
        store.require_existing()
    return msgspec.to_builtins(op.run(store, params))
