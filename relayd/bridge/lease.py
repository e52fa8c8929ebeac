"""A host name is leased: two relayd under one name would take each other's mail.

The key `<host>` in the bucket `relay-hosts` (max age `streams.LEASE_TTL`) holds the lease:
which store holds the name (a random id kept in `bridge/store-id`), rewritten with
compare-and-set every quarter of the max age. A relayd taking the name finds either no
key (free, or its holder stopped rewriting it and it expired) and creates it, or a key
of its own store (a restart of this store after a crash: the store's flock keeps two
relayd off one store) and takes it over, or another store's key: then `NameTaken`, and
relayd stops with that error rather than start a second receiver of the host's mail.
A lease lost while running (taken over after a partition longer than the max age)
stops relayd the same way.
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
        self.value = msgspec.json.encode(Holder(store=self.store_id, pid=os.getpid(), since=now_iso()))
        self.revision = 0  # of our last write of the key

    def _taken(self, holder: Holder | None) -> NameTaken:
        who = f"relayd pid {holder.pid} of another store, holding it since {holder.since}" if holder else "another relayd"
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
            try:
                return await kv.update(self.host, self.value, last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
        raise self._taken(None)

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
