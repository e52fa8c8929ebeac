"""The delivery wing: what happens to a message after it is stored, until it is settled.

It owns the delivery ledger: what a message sent with `ack` owes and where that record is,
the receipts that tell a sender how its message went, the announcement of lines stored
without their event, retention of old mail, and the redelivery sweep. The inbox
(`relayd.inbox`) stores and reads lines; this wing builds on it and never the other way.

The rule it keeps: every record is in exactly one state whatever crashes (owed, acked or
dead-lettered), and every message it delivers (a redelivery, an escalation, a bounce, a
`dlq retry`) reaches its inbox through `relayd.inbox.append.deliver`, which emits the
arrival under the inbox lock. Every change of a record holds `delivery.lock`.

Its modules, lowest first (a module imports only those above it in this list):
  record     one owed record's file, name and moves between owed/, acked/, dead_letter/
  log        the delivery log: receipts, and owed records an inbox rotation handed over
  parked     records not due for a while, one file per minute of due times
  owed       every form a record takes on disk, absorbing them, and `read_owed`, the one
             locked read of everything owed (status, the sweep, the web view)
  announce   inbox lines stored without their event, announced late
  held       why mail is not in front of its recipient's model yet; the one notice to its sender
  receipts   `track`, announcements and bounces, `announced`
  retention  `gc --keep`: trimming read mail of rotated inboxes
  ack        `ack`, and forgetting old acknowledgements
  sweep      `redeliver`: the redelivery sweep
  dlq        the dead-letter commands
The send-time terms (`relayd.owing`) lie below the inbox, which writes them.

Importing this package fills the inbox's hooks (`relayd.inbox.hooks`): the inbox calls
them where it must tell the wing something, without importing it. The inbox's operation
modules import this package, so whoever sends or reads has them filled.
"""

from __future__ import annotations

from ..fsio import Dir
from ..inbox import hooks
from ..records import Message
from ..store import Store


# The functions below import their module when first called, for start-up speed: a plain
# send or read in relayctl's direct mode loads none of the ledger (tests/client/test_startup_imports.py).


def _hand_over(store: Store, agent: Dir, name: str) -> None:
    # deferred imports: the inbox loads this package on every send and read; owed records and the
    # log load only when a hook runs
    from .owed import hand_over  # (start-up: rotations are rare)

    hand_over(store, agent, name)


def _read_passed(store: Store, name: str, newest: Message) -> None:
    from .log import read_passed  # (start-up: only a read that marks mail read logs it)

    read_passed(store, name, newest)


def _delivery_states(store: Store, name: str, ids: list[str]) -> dict[str, str]:
    from .owed import states  # (start-up: only a read showing mail sent with ack asks)

    return states(store, name, ids)


hooks.register(hand_over=_hand_over, read_passed=_read_passed, delivery_states=_delivery_states)
