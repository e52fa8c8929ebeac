"""A host name is leased: two relayd under one name would take each other's mail.

The key `<host>` in the bucket `relay-hosts` (max age `streams.LEASE_TTL`) holds the lease:
which store holds the name (a random id kept in `bridge/store-id`) and which process (a
random id made at start), rewritten with compare-and-set every quarter of the max age
while that process is connected. A relayd taking the name finds either

* no key (free, or its holder stopped rewriting it and it expired): it creates it;
* another store's key: `NameTaken`, and relayd stops with that error rather than start a
  second receiver of the host's mail;
* a key of its own store but another process: its own predecessor, killed (a restart
  after a crash), or a copy of this store running somewhere else -- a store id cannot
  tell them apart. A live holder rewrites its key within a quarter of the max age, so
  the newcomer watches it that long and a half again: rewritten means a live copy, and
  `NameTaken`; left alone means a dead predecessor, and the newcomer takes it over with
  compare-and-set. A restart after a crash so waits up to ~8 s; after a clean stop (the
  key deleted) it does not wait.

A lease lost while running (taken over after a partition longer than the max age) stops
relayd the same way. Nothing that acts as the host -- the mail consumer above all -- is
made before the lease is held.
"""

from __future__ import annotations

import os
import secrets

import anyio
import msgspec
import structlog
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from relayd import layout
from relayd.errors import Conflict
from relayd.store import Store
from relayd.timefmt import now_iso

from .link import finish
from .streams import LEASE_TTL

log = structlog.get_logger()


class NameTaken(Conflict):
    """Another relayd holds this host name: this one must not run bridged under it."""


class Holder(msgspec.Struct, kw_only=True):
    store: str
    pid: int
    since: str
    process: str = ""  # random per relayd process (older relayd wrote none)


_decode = msgspec.json.Decoder(Holder).decode


def store_id(store: Store) -> str:
    folder = store.top(layout.BRIDGE)
    raw = (folder.read_bytes(layout.STORE_ID) or b"").strip()
    if len(raw) == 32:
        return raw.decode()
    made = secrets.token_hex(16)
    folder.replace(layout.STORE_ID, made.encode() + b"\n", store.sync)
    return made


class Lease:
    def __init__(self, store: Store, host: str) -> None:
        self.host = host
        self.store_id = store_id(store)
        self.process = secrets.token_hex(16)
        self.value = msgspec.json.encode(Holder(store=self.store_id, pid=os.getpid(), since=now_iso(), process=self.process))
        self.revision = 0  # of our last write of the key

    def _taken(self, holder: Holder | None) -> NameTaken:
        if holder is None:
            who = "another relayd"
        else:
            whose = "this store or a copy of it" if holder.store == self.store_id else "another store"
            who = f"relayd pid {holder.pid} of {whose}, holding it since {holder.since}"
        return NameTaken(
            f"host name {self.host!r} is in use by {who}; give this relayd its own --host-name (and credentials: relayctl bridge setup --hosts ...), or stop the other one (its lease ends within {LEASE_TTL:.0f} s after it stops)",
            host=self.host,
        )

    async def take(self, kv) -> None:
        """Hold the name, or raise NameTaken."""
        self.revision = await self._take(kv)

    async def _take(self, kv) -> int:
        for _ in range(5):
            try:
                return await kv.create(self.host, self.value)
            except KeyWrongLastSequenceError:
                pass
            try:
                entry = await kv.get(self.host)
            except KeyNotFoundError:
                continue  # expired or deleted meanwhile: create again
            holder = _holder(entry.value)
            if holder is None or holder.store != self.store_id:
                raise self._taken(holder)
            if holder.process != self.process and await self._rewritten(kv, entry.revision):
                raise self._taken(holder)  # a live copy of this store
            try:
                return await kv.update(self.host, self.value, last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
        raise self._taken(None)

    async def _rewritten(self, kv, revision: int) -> bool:
        """Whether the lease at `revision` is rewritten (or deleted and taken) within the
        time its holder, if alive, must rewrite it."""
        max_age = (await kv.status()).ttl or LEASE_TTL
        with anyio.move_on_after(max_age / 4 * 1.5):
            while True:
                await anyio.sleep(0.25)
                try:
                    if (await kv.get(self.host)).revision != revision:
                        return True
                except KeyNotFoundError:
                    return False  # given back: free
        return False

    async def keep(self, kv) -> None:
        """Rewrite the lease until cancelled; NameTaken if another store took it."""
        max_age = (await kv.status()).ttl or LEASE_TTL
        while True:
            await anyio.sleep(max_age / 4)
            try:
                self.revision = await kv.update(self.host, self.value, last=self.revision)
            except KeyWrongLastSequenceError:
                await self.take(kv)  # expired while we were cut off: ours again, or NameTaken
                log.warning("host name lease taken again after it lapsed", host=self.host)

    async def release(self, kv) -> None:
        """Give the name back (a clean stop), so another store need not wait for the max age."""
        if self.revision:
            revision, self.revision = self.revision, 0
            await finish(lambda: kv.delete(self.host, last=revision))



def _holder(raw: bytes | None) -> Holder | None:
    try:
        return _decode(raw or b"")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
