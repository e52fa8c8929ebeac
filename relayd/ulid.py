"""ULIDs: 48-bit millisecond time + 80 random bits, Crockford base32, 26 characters.

Sortable as strings. Within one process, ids made in the same millisecond increment the
random part, so they stay strictly increasing (the ULID spec's monotonic mode).
"""

from __future__ import annotations

import os
import _thread
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_MAX = (1 << 80) - 1
_lock = _thread.allocate_lock()  # (_thread: threading itself costs start-up)
_last_ms = -1
_last_random = 0


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> two characters
_SHIFTS = tuple(range(120, -1, -10))  # 130 bits, the top two zero
_RANDOM_SHIFTS = _SHIFTS[5:]  # the low 80 bits: the random part, 16 characters
_time_text: tuple[int, str] = (-1, "")  # the last millisecond encoded, and its 10 characters


def _encode(value: int) -> str:
    # Two characters a step: every send makes two ids (message and event), on both sides.
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def _encode_parts(ms: int, rnd: int) -> str:
    """`_encode((ms << 80) | rnd)`, with the time's 10 characters made once a millisecond
    (relayd stamps many ids in one)."""
    global _time_text
    cached, head = _time_text
    if cached != ms:
        head = _encode(ms << 80)[:10]
        _time_text = (ms, head)
    return head + "".join([_PAIRS[(rnd >> shift) & 1023] for shift in _RANDOM_SHIFTS])


def new_ulid(now_ms: int | None = None) -> str:
    global _last_ms, _last_random
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            # Same (or an earlier, clock-stepped) millisecond: keep the order by counting up.
            ms = _last_ms
            rnd = _last_random + 1
            if rnd > _RANDOM_MAX:
                ms += 1
                rnd = int.from_bytes(os.urandom(10), "big") >> 1
        else:
            rnd = int.from_bytes(os.urandom(10), "big") >> 1  # top bit clear leaves room to count up
        _last_ms, _last_random = ms, rnd
    return _encode_parts(ms, rnd)


# Crockford's digits as int()'s base-32 digits, and the set of them: every id'd send checks
# its id and reads its time, and a Python loop over the characters showed in relayd's profile.
_AS_BASE32 = str.maketrans(_ALPHABET, "0123456789abcdefghijklmnopqrstuv")
_DIGITS = frozenset(_ALPHABET)


def ulid_time_ms(ulid: str) -> int:
    return int(ulid[:10].upper().translate(_AS_BASE32), 32)


def is_ulid(text: str) -> bool:
    return len(text) == 26 and text[0] in "01234567" and _DIGITS.issuperset(text.upper())
