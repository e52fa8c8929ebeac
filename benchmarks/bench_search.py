"""Search on a store of 1,000,000 messages (`relayd.inbox.search`, behind `relayctl search` and
the web view).

The store is generated fast: agents are registered with the store's own operation, then
each inbox is written in one append of lines made by the project's encoder (the older half
of each inbox as the rotated file `inbox.jsonl.1`, as rotation leaves it). Timestamps span
30 days in order, as appends do. Queries run warm (the files in the page cache, as on a
machine where the agents just wrote them); each is the median of several runs.
"""

from __future__ import annotations

import os
import random
from datetime import datetime, timezone
import shutil
import sys

from relayd import layout, ops
from relayd.fsio import append_lines
from relayd.records import Message, json_encoder
from relayd.inbox.search import SearchQuery, search
from relayd.store import Store
from relayd.timefmt import now, to_iso
from relayd.ulid import new_ulid

from .common import Row, median_ms, scratch_dir, time_calls

AREA = "search"
AGENTS = 40
TARGET_MS = 1000.0
WORDS = (
    "auth refactor tests pass review merge branch deploy parser endpoint schema migration "
    "token session cache retry timeout flaky build lint docs bead ticket rebase conflict "
    "handler module fixture coverage release hotfix rollback queue worker config"
).split()


def _write(store: Store, owner: str, name: str, lines: list[bytes]) -> None:
    with store.agent_dir(owner) as agent:
        fd = agent.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            append_lines(fd, b"".join(lines), f"bench {name}")
        finally:
            os.close(fd)


def generate(store_dir: str, total: int, seed: int = 7) -> dict[str, str]:
    """A store of `total` messages among AGENTS agents; returns the planted needles."""
    rng = random.Random(seed)
    names = [f"agent-{n:02d}" for n in range(AGENTS)]
    with Store(store_dir, fsync=False, rotate_bytes=1 << 40) as store:
        for name in names:
            ops.call(store, "register", {"name": name, "program": "bench"})
        per_agent = total // AGENTS
        start = now().timestamp() - 30 * 86400
        step = 30 * 86400 / per_agent
        planted = {"rare": "zanzibar", "thread": "bd-rare-7"}
        for index, owner in enumerate(names):
            lines = []
            for n in range(per_agent):
                body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
                thread = f"bd-{rng.randint(1, 5000)}"
                if n % 100_003 == 5_000 + index:  # a handful of needles spread over the store
                    body += " zanzibar"
                    thread = planted["thread"]
                stamp = to_iso(datetime.fromtimestamp(start + n * step, tz=timezone.utc))
                sender = names[(index + 1 + n % (AGENTS - 1)) % AGENTS]
                message = Message(id=new_ulid(), ts=stamp, from_=sender, to=owner, subject=body[:60], body=body, thread=thread)
                lines.append(json_encoder.encode(message) + b"\n")
            half = len(lines) // 2
            _write(store, owner, layout.INBOX_ROTATED, lines[:half])
            _write(store, owner, layout.INBOX, lines[half:])
    return planted


def run(quick: bool) -> list[Row]:
    total = 100_000 if quick else 1_000_000
    root = scratch_dir()
    try:
        store_dir = os.path.join(root, "store")
        print(f"    generating {total:,} messages ...", file=sys.stderr, flush=True)
        planted = generate(store_dir, total)
        size = sum(
            os.path.getsize(os.path.join(store_dir, layout.AGENTS, name, f))
            for name in os.listdir(os.path.join(store_dir, layout.AGENTS))
            for f in (layout.INBOX, layout.INBOX_ROTATED)
        )
        queries = [
            ("newest 100, no terms (the web view's message list)", SearchQuery(limit=100)),
            ("a word in 40 messages", SearchQuery(text=planted["rare"])),
            ("a word found nowhere (every byte read)", SearchQuery(text="qwertyuiop")),
            ("a common word, newest 50", SearchQuery(text="rollback")),
            ("two words, newest 50", SearchQuery(text="Flaky HOTFIX")),
            ("--thread of 40 messages", SearchQuery(thread=planted["thread"])),
            ("--from one agent, newest 50", SearchQuery(from_="agent-07")),
            ("--to one agent + a word nowhere", SearchQuery(to="agent-07", text="qwertyuiop")),
            ("a word nowhere --since 1d", SearchQuery(text="qwertyuiop", since="1d")),
        ]
        rows = []
        with Store(store_dir) as store:
            for label, q in queries:
                result = search(store, q)  # warms the page cache for this query's files
                samples = time_calls(lambda: search(store, q), 3 if quick else 5)
                ms = median_ms(samples)
                rows.append(
                    Row(AREA, f"search {total:,} messages: {label}", round(ms, 1), "ms", target=f"< {TARGET_MS:.0f} ms", ok=ms < TARGET_MS if not quick else None,
                        note=f"{len(result.messages)} found, {result.scanned_bytes / 2**20:.0f} of {size / 2**20:.0f} MiB read")
                )
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)
