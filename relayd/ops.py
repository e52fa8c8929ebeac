"""The operation table: every store operation by name, with its parameter type.

One definition serves everyone: the daemon decodes a request's `params` into the
operation's Struct and calls the function; a client in direct mode calls the very same
function. Results are converted to plain JSON-able data the same way on both paths, so
the two modes give identical answers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .errors import UsageError
from .registry import REGISTERED, Operation
from .store import Store


def table() -> dict[str, Operation]:
    """All operations; importing the domain modules fills the registry."""
    from . import admin, agents, commands, delivery, gc, inbox, overview, receipts, reservations, session, wake  # noqa: F401  (registration side effect)

    return REGISTERED


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
    found = REGISTERED.get(name) or table().get(name)
    if found is None:
        raise UsageError(f"unknown operation {name!r}; known: {', '.join(sorted(table()))}", op=name)
    return found


def call(store: Store, name: str, params: object) -> Any:
    """Run operation `name` directly on `store`; returns plain JSON-able data."""
    return msgspec.to_builtins(run(store, lookup(name), params))


def run(store: Store, op: Operation, params: object) -> Any:
    """Run `op` on `store`; returns what the operation returns."""
    params = decode_params(op, params)
    if not op.mutates and op.name != "version":
        # Looking must not create: a mistyped RELAY_DIR would otherwise yield an empty,
        # healthy-looking store instead of an error.
        store.require_existing()
    return op.run(store, params)
