"""The torture suite's checker (Jepsen-style): compare what clients were told with what
the store holds.

Writers log an *intent* (the id they chose) before each send and an *ack* once it
returned success. Afterwards every line of the inbox files is read raw:
* lost       an acknowledged id that is not in the inbox;
* duplicated an id (or a writer's sequence number) stored more than once;
* corrupt    a line that does not decode, or a file not ending in a newline;
* reordered  a writer's messages stored out of the order it sent them in (each writer
             sends one message at a time, so its sequence numbers must rise).
An intent without an ack (cut short by a crash) may be present once or not at all.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from relayd import layout
from relayd.records import Message, message_decoder

TOTALS = Counter()  # across the session, for the summary line


@dataclass
class History:
    intents: dict[str, str] = field(default_factory=dict)  # id -> "writer seq"
    acked: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # error lines the writers printed
    modes: Counter = field(default_factory=Counter)

    def feed(self, line: str) -> None:
        """One line of a writer's output: `intent ID KEY`, `ack ID KEY MODE`, `error CODE MESSAGE`
        (KEY is `writer:seq`, also the message body)."""
        kind, _, rest = line.strip().partition(" ")
        if kind == "intent":
            message_id, key = rest.split(" ")
            self.intents[message_id] = key
        elif kind == "ack":
            message_id, key, mode = rest.split(" ")
            self.acked[message_id] = key
            self.modes[mode] += 1
        elif kind == "error":
            self.errors.append(rest)


@dataclass
class Verdict:
    acked: int
    stored: int
    lost: list[str]
    duplicated: list[str]
    corrupt: list[str]
    reordered: list[str]

    def summary(self) -> str:
        return (
            f"{self.acked} acknowledged, {self.stored} stored, {len(self.lost)} lost, {len(self.duplicated)} duplicated, "
            f"{len(self.corrupt)} corrupt, {len(self.reordered)} out of order"
        )

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.corrupt or self.reordered)


def raw_messages(store_dir: str, agent: str) -> tuple[list[Message], list[str]]:
    """Every line of the agent's inbox files, decoded; and what is corrupt about them."""
    messages: list[Message] = []
    corrupt: list[str] = []
    folder = os.path.join(store_dir, layout.AGENTS, agent)
    for name in (layout.INBOX_ROTATED, layout.INBOX):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if data and not data.endswith(b"\n"):
            corrupt.append(f"{name}: ends without a newline (a partial line)")
        for number, line in enumerate(data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"), 1):
            try:
                messages.append(message_decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                corrupt.append(f"{name} line {number}: {line[:80]!r}")
    return messages, corrupt


def check(history: History, store_dir: str, agent: str, scenario: str) -> Verdict:
    messages, corrupt = raw_messages(store_dir, agent)
    ids = Counter(m.id for m in messages)
    keys = Counter(m.body for m in messages)
    lost = sorted(set(history.acked) - set(ids))
    duplicated = sorted({i for i, n in ids.items() if n > 1} | {k for k, n in keys.items() if n > 1})
    unknown = [m.id for m in messages if m.id not in history.intents]
    corrupt += [f"unexpected message {i}" for i in unknown]
    last: dict[str, int] = {}
    reordered = []
    for m in messages:
        writer, _, seq = m.body.partition(":")
        if seq.isdigit():
            if int(seq) <= last.get(writer, -1):
                reordered.append(m.body)
            last[writer] = int(seq)
    verdict = Verdict(acked=len(history.acked), stored=len(messages), lost=lost, duplicated=duplicated, corrupt=corrupt, reordered=reordered)
    TOTALS["scenarios"] += 1
    TOTALS["acknowledged"] += verdict.acked
    TOTALS["lost"] += len(lost)
    TOTALS["duplicated"] += len(duplicated)
    TOTALS["corrupt"] += len(corrupt)
    TOTALS["reordered"] += len(reordered)
    print(f"\ntorture {scenario}: {verdict.summary()}")
    return verdict


def events_agree(store_dir: str, agent: str) -> tuple[set[str], set[str]]:
    """(messages without an event, events without a message) for one inbox."""
    messages, _ = raw_messages(store_dir, agent)
    stored = {m.id for m in messages}
    announced = set()
    path = os.path.join(store_dir, layout.EVENTS)
    if os.path.exists(path):
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("action") == "message" and event.get("agent") == agent:
                    announced.add(event["message_id"])
    return stored - announced, announced - stored
