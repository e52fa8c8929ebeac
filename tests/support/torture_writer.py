"""A writer process for the torture suite (not a test module).

    python writer.py STORE SOCKET WRITER START COUNT [RESUME_ID]

Sends COUNT messages to `sink`, bodies `WRITER:SEQ` from SEQ=START, through relay's own
client (relayd when it runs, the files otherwise). Before each send it prints
`intent ID KEY`, after success `ack ID KEY MODE`, both flushed. A failed attempt prints
`error CODE MESSAGE` and is repeated with the same id, as a careful user would. With
RESUME_ID the first send reuses that id: the send a killed predecessor had started.
"""

from __future__ import annotations

import sys
import time

from relayd.client.full import Client
from relayd.errors import RelayError
from relayd.ulid import new_ulid


def main() -> None:
    store_dir, socket_path, writer = sys.argv[1], sys.argv[2], sys.argv[3]
    start, count = int(sys.argv[4]), int(sys.argv[5])
    resume = sys.argv[6] if len(sys.argv) > 6 else None
    out = sys.stdout
    with Client(store_dir, socket_path, timeout=10) as client:
        for seq in range(start, start + count):
            key = f"{writer}:{seq}"
            message_id = resume or new_ulid()
            resume = None
            out.write(f"intent {message_id} {key}\n")
            out.flush()
            while True:
                try:
                    client.call("send", {"agent": writer, "to": ["sink"], "body": key, "id": message_id})
                except RelayError as exc:
                    out.write(f"error {exc.code} {' '.join(exc.message.split())}\n")
                    out.flush()
                    time.sleep(0.05)
                    continue
                break
            out.write(f"ack {message_id} {key} {client.mode}\n")
            out.flush()


if __name__ == "__main__":
    main()
