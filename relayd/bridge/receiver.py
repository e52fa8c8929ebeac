"""Mail in: this host's messages from JetStream into the local inboxes.

A durable pull consumer (`mail-<host>`) hands out batches. Each message is appended to
its recipient's inbox with the id it was sent with, its id to `bridge/received.jsonl`, and
an inbox event to the event log; only once those writes are fsynced is it acknowledged to
JetStream. A crash before the ack means JetStream delivers it again; an id this host
already holds is then acknowledged without a second append, so nobody reads it twice.
What it holds: the ids in `bridge/received.jsonl` (and its rotated `.1`) plus, read at
start, the ids in the last 256 KiB of each inbox (what a kill between the two appends
leaves only there).

Nothing is stored unchecked. The sending host is the last token of the subject
(`relay.mail.<this host>.<sender host>`), which NATS let only that host publish on; a
message is stored only if its `from` is an agent the directory gives to that host and it
passes the checks of a local send (`relayd.inbox.send.check_message`: names, ULID id, sizes,
tags). Anything else -- a forged sender, a bad id, a 900 KB body, mail for a name this
host does not have -- goes to `bridge/undeliverable.jsonl`, one line each with the
reason, the sending host and the first 4 KiB of what came, and is acknowledged rather
than redelivered forever. So is a message that makes the checks themselves fail: one
message never stops the stream for the ones behind it.

Nothing another host sends is kept without bound (`budget`). That file is rotated at
UNDELIVERABLE_ROTATE_BYTES (one older `.1` kept), and each host gets at most
`refusals_per_hour` records in it; what it sends beyond is counted only. Valid mail is
charged to its sending host, and mail over that host's hourly budget is left
unacknowledged in JetStream until the next hour; the others' mail goes on meanwhile.
"""

from __future__ import annotations

import os
from typing import Awaitable, Callable

import msgspec
import nats.errors
import structlog

from relayd import layout
from relayd.errors import RelayError
from relayd.fsio import Dir, append_file, complete_lines, line_start_at
from relayd.inbox.append import deliver
from relayd.inbox.send import check_message
from relayd.records import Message, json_encoder, message_decoder
from relayd.store import Store

from . import link
from .budget import Budget
from .subjects import sender_of

log = structlog.get_logger()

FETCH_BATCH = 256
RECEIVED_ROTATE_BYTES = 1 << 20  # two files of ids: ~70,000 of the latest messages
INBOX_TAIL_BYTES = 256 * 1024  # read from each inbox at start (see _load)
KEPT_BYTES = 4096  # of a refused message, in undeliverable.jsonl
UNDELIVERABLE_ROTATE_BYTES = 1 << 20  # two files of refusals at most: ~2 MiB
# Failures of NATS, not of a message: the session ends and JetStream delivers it again.
TRANSIENT = (nats.errors.Error, OSError, TimeoutError)


class Refused(msgspec.Struct, kw_only=True):
    """A line of `bridge/undeliverable.jsonl`."""

    reason: str
    host: str  # the sending host, as NATS vouches for it
    size: int
    data: str  # the first KEPT_BYTES of what came, as text


class _Id(msgspec.Struct):
    id: str


class _Line(msgspec.Struct):
    """An inbox line (`to` set) or a received.jsonl line (`id` is already `<recipient>/<id>`)."""

    id: str
    to: str = ""


_line_decoder = msgspec.json.Decoder(_Line)


class Receiver:
    def __init__(self, store: Store, host: str, durable: Callable[[], Awaitable[None]], sender_host: Callable[[str], Awaitable[str | None]], budget: Budget | None = None) -> None:
        self.store = store
        self.host = host
        self.durable = durable  # returns once the writes made so far are fsynced (raises if not)
        self.sender_host = sender_host  # the host owning an agent name (the directory)
        self.budget = budget or Budget()
        self.refused = 0
        self.older: set[str] = set()
        self.recent: set[str] = set()
        self.delivered = 0
        self.duplicates = 0
        self._load()

    def _load(self) -> None:
        folder = self.store.top(layout.BRIDGE)
        for name, target in ((layout.RECEIVED_ROTATED, self.older), (layout.RECEIVED, self.recent)):
            self._ids(_lines(folder, name), target)
        # A kill between an inbox append and the append to received.jsonl leaves ids that
        # only the inbox knows; they are its last lines, so the tail of each inbox is enough.
        for agent in self.store.known_agents():
            with self.store.agent_dir(agent) as folder:
                self._ids(_lines(folder, layout.INBOX, last=INBOX_TAIL_BYTES), self.recent)

    @staticmethod
    def _ids(lines: list[bytes], into: set[str]) -> None:
        for line in lines:
            try:
                seen = _line_decoder.decode(line)
                into.add(f"{seen.to}/{seen.id}" if seen.to else seen.id)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue

    def holds(self, message_id: str) -> bool:
        return message_id in self.recent or message_id in self.older

    async def run(self, js) -> None:
        sub = await link.mail_consumer(js, self.host)
        while True:
            # Wait for one message, then take as many as JetStream says are waiting behind
            # it: a fetch of more than are there lingers until all came or it times out.
            try:
                batch = await sub.fetch(batch=1, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            waiting = batch[-1].metadata.num_pending
            if waiting:
                try:
                    batch += await sub.fetch(batch=min(waiting, FETCH_BATCH - 1), timeout=1.0)
                except nats.errors.TimeoutError:
                    pass
            await self.deliver(batch)

    async def deliver(self, batch: list) -> None:
        fresh: list[Message] = []
        charged: list[tuple[str, int]] = []  # (sending host, bytes) of each message in `fresh`
        held: list = []  # over their host's budget: left in JetStream until the next hour
        in_batch: set[str] = set()
        undeliverable: list[bytes] = []
        refused_by: dict[str, int] = {}
        for msg in batch:
            sender = sender_of(msg.subject)
            try:
                message = message_decoder.decode(msg.data)
                reason = await self._refusal(message, sender)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                reason = f"not a relay message: {exc}"
            except TRANSIENT:
                raise  # NATS itself failed (asking the directory): the batch comes again
            except Exception as exc:
                # Whatever else one message does to the checks, it is that message's
                # failure: kept with its reason, never a stop of the stream for the others.
                reason = f"could not be checked ({type(exc).__name__}: {exc})"
            if reason is not None:
                refused_by[sender] = refused_by.get(sender, 0) + 1
                if self.budget.refusal(sender):
                    undeliverable.append(_refused(reason, sender, msg.data))
                continue
            key = _key(message)  # ids are unique per inbox: a broadcast's copies share one
            if self.holds(key) or key in in_batch:
                self.duplicates += 1
                continue
            if not self.budget.take(sender, len(msg.data)):
                held.append(msg)
                continue
            in_batch.add(key)
            fresh.append(message)
            charged.append((sender, len(msg.data)))
        by_inbox: dict[str, list[Message]] = {}
        for message in fresh:
            by_inbox.setdefault(message.to, []).append(message)
        try:
            deliver(self.store, by_inbox)  # each arrival emitted under its inbox's lock
            if undeliverable:
                self._append(layout.UNDELIVERABLE, undeliverable, rotate_bytes=UNDELIVERABLE_ROTATE_BYTES, rotate=self._rotate_undeliverable)
            delivered = [m for messages in by_inbox.values() for m in messages]
            if fresh:
                self._remember([_key(m) for m in fresh])
                # Held from now on, even if this task is cancelled before the ack (a lost
                # connection): the appends are made and the group commit will sync them.
                self.recent.update(_key(m) for m in fresh)
            await self.durable()
        except RelayError as exc:
            # Not durable here: JetStream keeps the batch and delivers it again.
            self.recent.difference_update(_key(m) for m in fresh)
            for sender, size in charged:
                self.budget.refund(sender, size)
            log.error("could not store bridge mail; JetStream will redeliver", error=exc.message)
            for msg in batch:
                await msg.nak(delay=1.0)
            return
        self._tell(refused_by, held)
        kept = {id(msg) for msg in held}
        wait = self.budget.wait()
        for msg in batch:
            if id(msg) in kept:
                await msg.nak(delay=wait)
            else:
                await msg.ack()
        self.refused += sum(refused_by.values())
        self.delivered += len(delivered)

    def _tell(self, refused_by: dict[str, int], held: list) -> None:
        """Log what a host's mail was refused or held for: once per host and hour each, so
        a flood cannot fill this host's log either (the counts are in status)."""
        for host, count in refused_by.items():
            if self.budget.first(host, "refused"):
                log.warning("bridge mail refused; more from this host this hour are only counted (relayctl status --json: bridge.from_hosts)", host=host, count=count, file=f"{layout.BRIDGE}/{layout.UNDELIVERABLE}")
        for host in {sender_of(msg.subject) for msg in held}:
            if self.budget.first(host, "held"):
                limits = self.budget.limits
                log.warning(
                    "a host is over its hourly budget; its mail waits in JetStream until the next hour",
                    host=host,
                    messages_per_hour=limits.messages_per_hour,
                    mib_per_hour=limits.mib_per_hour,
                    retry_in_s=round(self.budget.wait()),
                )

    def _remember(self, ids: list[str]) -> None:
        self._append(layout.RECEIVED, [json_encoder.encode(_Id(id=i)) for i in ids], rotate_bytes=RECEIVED_ROTATE_BYTES, rotate=self._rotate_received)

    def _rotate_undeliverable(self, _size: int) -> None:
        self.store.top(layout.BRIDGE).rename(layout.UNDELIVERABLE, layout.UNDELIVERABLE_ROTATED)

    def _rotate_received(self, _size: int) -> None:
        self.store.top(layout.BRIDGE).rename(layout.RECEIVED, layout.RECEIVED_ROTATED)
        self.older, self.recent = self.recent, set()

    def _append(self, name: str, lines: list[bytes], rotate_bytes: int | None = None, rotate: Callable[[int], None] | None = None) -> None:
        payload = b"".join(line + b"\n" for line in lines)
        append_file(self.store.top(layout.BRIDGE), name, payload, self.store.sync, rotate_bytes=rotate_bytes, rotate=rotate)

    async def _refusal(self, message: Message, sender: str) -> str | None:
        """Why `message`, published by host `sender`, is not stored here (None: it is)."""
        try:
            check_message(message)
        except RelayError as exc:
            return exc.message
        owner = await self.sender_host(message.from_)
        if owner != sender:
            held = f"an agent of host {owner}" if owner else "no agent in the team directory"
            return f"forged sender: host {sender} sent mail from {message.from_}, which is {held}"
        remote = self.store.remote
        # A name the directory gives to another host (a clash from before the bridge) is
        # not delivered here: appending would route it on to that host.
        if not self.store.is_agent(message.to) or (remote is not None and remote.host_of(message.to) is not None):
            return f"{message.to} is not an agent of this host"
        return None


def _refused(reason: str, host: str, data: bytes) -> bytes:
    kept = bytes(data[:KEPT_BYTES]).decode("utf-8", errors="replace")
    return json_encoder.encode(Refused(reason=reason, host=host, size=len(data), data=kept))


def _lines(folder: Dir, name: str, last: int | None = None) -> list[bytes]:
    """The complete lines of `folder/name` (of its last `last` bytes: the lines that start
    there); none when it does not exist."""
    try:
        fd = folder.open(name, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        start = 0 if last is None else line_start_at(fd, max(0, os.fstat(fd).st_size - last))
        return [line for _, line in complete_lines(fd, start)]
    finally:
        os.close(fd)


def _key(message: Message) -> str:
    """What this host remembers of a message it received: `<recipient>/<id>`."""
    return f"{message.to}/{message.id}"
