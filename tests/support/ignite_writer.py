"""IGNITE's message tool as relay's queue meets it: `build ... -o FILE` writes FILE in place.

IGNITE's senders run `ignite_mime.py build --from F --to T --type X --priority P --body Y
-o workspace/queue/T/X_$(date +%s%6N).mime`, which opens FILE with open(FILE, "w") and
writes the message into it: the file exists, empty, before its first byte is written.
This stand-in writes the same headers (seed 003's order) the same way, and can pause
after creating the file and in the middle of it, which is what a loaded machine does.
Deliberately free of relay imports: it is the other project's tool, not relay's.
"""

from __future__ import annotations

import argparse
import email.utils
import os
import random
import time


def message(sender: str, to: str, kind: str, priority: str, body: str) -> str:
    headers = [
        ("MIME-Version", "1.0"),
        ("Message-ID", f"<{int(time.time())}.{os.getpid()}.{random.getrandbits(24):06x}@ignite.local>"),
        ("From", sender),
        ("To", to),
        ("Date", email.utils.formatdate(localtime=True)),
        ("X-IGNITE-Type", kind),
        ("X-IGNITE-Priority", priority),
        ("Content-Type", "text/x-yaml; charset=utf-8"),
        ("Content-Transfer-Encoding", "8bit"),
    ]
    return "".join(f"{name}: {value}\n" for name, value in headers) + "\n" + body


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--from", dest="sender", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--type", required=True)
    parser.add_argument("--priority", default="normal")
    parser.add_argument("--body", default="")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--pause-after-create", type=float, default=0.0, help="(the test's) seconds between creating the file and writing it")
    parser.add_argument("--pause-mid", type=float, default=0.0, help="(the test's) seconds between the first half and the rest")
    args = parser.parse_args()
    text = message(args.sender, args.to, args.type, args.priority, args.body)
    with open(args.output, "w") as out:
        time.sleep(args.pause_after_create)
        half = len(text) // 2
        out.write(text[:half])
        out.flush()
        time.sleep(args.pause_mid)
        out.write(text[half:])


if __name__ == "__main__":
    main()
