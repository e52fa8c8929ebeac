"""What a send with `ack` owes, in the terms the send itself writes down.

A first delivery with ack carries its terms in the inbox line it appends anyway
(`"owed": {"due", "base", "cap", "max_deliver"}` after the message's own fields; readers
decode the line as a plain message and never see them). That line is the message's owed
record from the moment it is durable: `--ack` costs no extra file, write or fsync. The
delivery wing (`relayd.delivery.owed`) takes such lines into its own state later.

Kept below the inbox and the wing both: the send needs these terms, the wing reads them,
and neither needs the other for it.
"""

from __future__ import annotations

import functools
import os

import msgspec

from . import layout
from .errors import UsageError
from .records import Message
from .store import Store
from .timefmt import parse_duration

MAX_DELIVER_LIMIT = 100


class Policy(msgspec.Struct, frozen=True):
    """How long to wait for an ack before presenting a message again, and how often."""

    base: float  # seconds: `ack_wait`
    cap: float  # seconds
    max_deliver: int  # redeliveries after the first delivery

    def wait(self, delivered: int, rand: float) -> float:
        """Seconds to wait after delivery number `delivered` (1 = the first): full jitter,
        random(0, min(cap, base * 2**(delivered - 1)))."""
        return rand * min(self.cap, self.base * 2.0 ** min(delivered - 1, 64))


def policy_for(store: Store, ack_wait: str | None, max_deliver: int | None) -> Policy:
    """The store's defaults (config.json "delivery"), overridden per message."""
    defaults = _delivery_defaults(store)
    base = _seconds(ack_wait if ack_wait is not None else defaults.ack_wait, "ack-wait")
    cap = _seconds(defaults.cap, "delivery.cap in config.json")
    count = defaults.max_deliver if max_deliver is None else max_deliver
    if not 1 <= count <= MAX_DELIVER_LIMIT:
        raise UsageError(f"max-deliver must be 1-{MAX_DELIVER_LIMIT} redeliveries, not {count}")
    return Policy(base, max(cap, base), count)


# Every send --ack asks for the defaults: config.json is read again only when it changed.
_defaults_seen: dict[str, tuple[tuple[int, int, int], object]] = {}


def _delivery_defaults(store: Store):  # -> config.Delivery
    # deferred imports: config.json (and with it relayd.config and arrival.paneinput) only when the
    # delivery defaults are read: relayctl status with relayd down loads this module without them
    from .config import load_config  # (start-up: config.json is read only for a send --ack)

    try:
        info = os.stat(layout.CONFIG_FILE, dir_fd=store.root_dir().fd, follow_symlinks=False)
        identity = (info.st_ino, info.st_size, info.st_mtime_ns)
    except FileNotFoundError:
        identity = (0, 0, 0)
    seen = _defaults_seen.get(store.root)
    if seen is not None and seen[0] == identity:
        return seen[1]
    defaults = load_config(store).delivery
    _defaults_seen[store.root] = (identity, defaults)
    return defaults


@functools.lru_cache(maxsize=64)  # every send --ack asks again for the same few durations
def _seconds(text: str, what: str) -> float:
    seconds = parse_duration(text).total_seconds()
    if seconds <= 0:
        raise UsageError(f"{what} must be longer than 0, not {text!r}")
    return seconds


class Terms(msgspec.Struct, kw_only=True):
    """What a first delivery owes, carried by its inbox line (see the module docstring)."""

    due: float  # epoch seconds: when the first redelivery (or the dead letter) is due
    base: float
    cap: float
    max_deliver: int


class OwedLine(Message, kw_only=True):
    """An inbox line of a message sent with ack, first delivery: the message and its terms.
    Readers decode it as a plain `Message` (the extra field is ignored)."""

    owed: Terms


# How an owed line is told from the others without decoding them: the key only a real field
# can spell (quotes inside strings are escaped), placed last by the encoder.
MARKER = b',"owed":{'


def owed_line(store: Store, message: Message, policy: Policy) -> OwedLine:
    """The inbox line of a message's first delivery with ack: it owes from the moment it is durable."""
    due = store.clock() + policy.wait(1, store.rand())
    return OwedLine(**msgspec.structs.asdict(message), owed=Terms(due=due, base=policy.base, cap=policy.cap, max_deliver=policy.max_deliver))
