"""The one reader of a session door's record (agents/<name>/<door file>), for every door
module (relayd.arrival.claude_inbox, codex_queue, copilot_extension).

A record that is missing, empty or not what its door writes reads as no door at all: a
torn or foreign file must never make relay write into a socket or a queue.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from ..fsio import Dir

T = TypeVar("T")


def read(agent: Dir, name: str, decoder: msgspec.json.Decoder[T]) -> T | None:
    raw = agent.read_bytes(name)
    if not raw:
        return None
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:
        return None
