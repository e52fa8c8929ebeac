"""A sender process for the concurrency and crash tests (not a test module itself).

    python tests/support/store_writer.py STORE SENDER RECIPIENT COUNT [BODY_BYTES [ROTATE_BYTES]]

Calls the store's `send` operation COUNT times (0 = until killed) and prints each
message id on its own line, flushed, only after the call has returned: a printed id is
a send that reported success.
"""

from __future__ import annotations

import sys

from relayd import ops
from relayd.store import Store


def main() -> None:
    store_dir, sender, recipient, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    body_bytes = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    padding = "x" * body_bytes
    # Rotation off unless asked for: most callers check that every acknowledged send stays
    # readable, and rotation drops old unread mail by design.
    rotate_bytes = int(sys.argv[6]) if len(sys.argv) > 6 else 1 << 40
    store = Store(store_dir, rotate_bytes=rotate_bytes)
    out = sys.stdout
    seq = 0
    while count == 0 or seq < count:
        body = f"{sender} {seq} {padding}"
        result = ops.call(store, "send", {"agent": sender, "to": [recipient], "body": body})
        out.write(f"{result['messages'][0]['id']} {seq}\n")
        out.flush()
        seq += 1


if __name__ == "__main__":
    main()
