"""What the inbox tells the delivery wing above it, through functions that wing registers.

The inbox (append, cursor, read) sits below `relayd.delivery`, which reads and writes
inboxes; it may not import the wing back. Where the inbox must tell the wing something, it
calls a slot here, and `relayd/delivery/__init__.py` fills every slot when it is imported.
The inbox's operation modules (`relayd.inbox.send`, `relayd.inbox.read`) import the wing,
so any process that can write or read an inbox through them has the slots filled.

The slots (each called with the store first):
* `hand_over(store, agent_dir, name)`: an inbox rotation is about to drop
  `inbox.jsonl.1`; owed records its lines carry must be kept elsewhere first (under the
  inbox lock). Required: a rotation without it could lose what a message owes, so an
  unfilled slot is a bug and raises.
* `read_passed(store, name, newest)`: the read cursor just moved past mail up to `newest`
  (a read receipt). A report: never raises.
* `delivery_states(store, name, ids)`: for shown messages sent with ack, "owed", "acked"
  or "dead_letter" by id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..fsio import Dir
    from ..records import Message
    from ..store import Store


class Hooks:
    """The slots; `relayd.delivery` fills them (see the module docstring)."""

    hand_over: Callable[[Store, Dir, str], None] | None = None
    read_passed: Callable[[Store, str, Message], None] | None = None
    delivery_states: Callable[[Store, str, list[str]], dict[str, str]] | None = None


def register(*, hand_over: Callable[[Store, Dir, str], None], read_passed: Callable[[Store, str, Message], None], delivery_states: Callable[[Store, str, list[str]], dict[str, str]]) -> None:
    """Fill every slot at once (the delivery wing does, when imported)."""
    Hooks.hand_over = hand_over
    Hooks.read_passed = read_passed
    Hooks.delivery_states = delivery_states


def hand_over(store: Store, agent: Dir, name: str) -> None:
    if Hooks.hand_over is None:
        raise RuntimeError("an inbox rotation before relayd.delivery registered its hand-over (import relayd.delivery first)")
    Hooks.hand_over(store, agent, name)


def read_passed(store: Store, name: str, newest: Message) -> None:
    if Hooks.read_passed is None:
        raise RuntimeError("a read before relayd.delivery registered its read receipts (import relayd.delivery first)")
    Hooks.read_passed(store, name, newest)


def delivery_states(store: Store, name: str, ids: list[str]) -> dict[str, str]:
    if Hooks.delivery_states is None:
        raise RuntimeError("a read of mail sent with ack before relayd.delivery registered its states (import relayd.delivery first)")
    return Hooks.delivery_states(store, name, ids)
