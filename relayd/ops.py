"""The operation table and the one way to run an operation.

One definition serves everyone: the daemon hands a request's `params` (the raw JSON text
of them, decoded here once, straight into the operation's Struct) to `run`, and a client in
direct mode hands its dict to the very same `run`. Both get the same checks (a looking
operation needs a store that is there), the same errors (a bug in an operation is an
`Internal` error with one text), and results converted to plain data the same way, so the
two modes give identical answers.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import msgspec

from .errors import Internal, RelayError, UsageError
from .registry import REGISTERED, Operation
from .store import Store


def table() -> dict[str, Operation]:
    """All operations; importing the domain modules fills the registry."""
    # (registration side effect) deferred imports, for start-up speed: a command that
    # imported its own operation's module runs without loading all the others
    from . import overview  # noqa: F401
    from .agents import roster  # noqa: F401
    from .arrival import budget, claude_inbox, codex_queue, copilot_extension, program_state  # noqa: F401
    from .delivery import ack, dlq, receipts, spend, sweep  # noqa: F401
    from .inbox import read, send  # noqa: F401
    from .reservations import handoff, reserve  # noqa: F401
    from .team import commands, wake  # noqa: F401
    from .upkeep import admin, gc  # noqa: F401

    return REGISTERED


# One JSON decoder per parameter type, built on first use (msgspec: build once, reuse).
_decoders: dict[type, msgspec.json.Decoder] = {}


def decode_params(op: Operation, params: object) -> msgspec.Struct:
    """Validate parameters into the operation's Struct, always by one JSON decoder: a
    request's params arrive as JSON text (`msgspec.Raw`) and are decoded once, straight
    into the Struct; a client's mapping (direct mode, the CLI) is encoded first, so every
    refusal reads the same on both paths."""
    if isinstance(params, op.params):
        return params
    decoder = _decoders.get(op.params)
    if decoder is None:
        decoder = _decoders[op.params] = msgspec.json.Decoder(op.params)
    try:
        if not isinstance(params, msgspec.Raw):
            params = _encoder.encode(params if params is not None else {})
        return decoder.decode(params)
    except (msgspec.ValidationError, msgspec.EncodeError) as exc:
        raise UsageError(f"{op.name}: {exc}") from None


_encoder = msgspec.json.Encoder()


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
    """Run `op` on `store` (the one dispatcher); returns what the operation returns.

    Raises the operation's RelayError, or `Internal` (chained to the exception) for a bug."""
    return _checked(store, op, op.run, decode_params(op, params))


def run_batch(store: Store, op: Operation, params: list[msgspec.Struct]) -> list[Any]:
    """Run many decoded requests of a batchable `op` as one: a result or a RelayError for
    each, in order. The same checks and errors as `run`; a bug fails them all (`Internal`)."""
    assert op.batch is not None
    return _checked(store, op, op.batch, params)


def _checked(store: Store, op: Operation, func: Callable[[Store, Any], Any], params: Any) -> Any:
    require_store(store, op)
    try:
        return func(store, params)
    except RelayError:
        raise
    except Exception as exc:
        raise internal(op.name, exc) from exc


def require_store(store: Store, op: Operation) -> None:
    """Looking must not create: a mistyped RELAY_DIR would otherwise yield an empty,
    healthy-looking store instead of an error. Checked by path, not by the open handle:
    relayd (and relay-mcp in direct mode) keep the store open, and a store removed under
    them is gone all the same."""
    if op.mutates or op.name == "version" or os.path.isdir(store.root):
        return
    Store(store.root).require_existing()  # a handle that opened nothing: raises its NotFound


def internal(name: str, exc: BaseException) -> Internal:
    """A bug in operation `name`, in the one wording every path reports it with."""
    return Internal(f"internal error in {name}: {type(exc).__name__}: {exc}")
