"""The team directory: which agent lives on which host, and how it is doing.

The bucket `relay-agents` holds one key per agent name; its value is a `DirectoryEntry`
written by the host that owns the name. Names are claimed with a create-only write (the
key must not exist), so two hosts registering the same new name cannot both win; after
that the owner updates its entries with compare-and-set on the revision it last saw, so
a host never overwrites another host's entry.

Each relayd keeps the whole bucket in memory (`entries`), fed by a watcher: a send asks
`host_of` without a network round trip.
"""

from __future__ import annotations

from typing import Callable

import anyio
import msgspec
import structlog
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from relayd.agents import agent_states
from relayd.errors import Conflict, RelayError
from relayd.store import Store
from relayd.timefmt import now, parse_iso

from .link import finish

log = structlog.get_logger()

REFRESH_SECONDS = 30.0  # every entry is rewritten this often, so heartbeat ages stay fresh
COALESCE_SECONDS = 0.05


class DirectoryEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str
    host: str
    program: str | None = None
    model: str | None = None
    task: str | None = None
    status: str | None = None
    bead: str | None = None
    last_heartbeat: str | None = None
    archived: bool = False


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(DirectoryEntry).decode


class Directory:
    def __init__(self, store: Store, host: str) -> None:
        self.store = store
        self.host = host
        self.entries: dict[str, DirectoryEntry] = {}
        self.revisions: dict[str, int] = {}
        self.published: dict[str, bytes] = {}  # what this host last wrote per name
        self.conflicts: dict[str, str] = {}  # local agent -> the other host that owns the name
        self.claiming: set[str] = set()  # claimed, the local register not yet run: not stale
        self.ready = anyio.Event()  # the watcher has delivered the bucket's contents
        self.on_change: Callable[[], None] = lambda: None
        self._dirty = anyio.Event()

    # -- asked by the store operations (no I/O) ----------------------------------------
    def host_of(self, name: str) -> str | None:
        entry = self.entries.get(name)
        return entry.host if entry is not None and entry.host != self.host else None

    def remote_names(self) -> list[str]:
        return sorted(name for name, entry in self.entries.items() if entry.host != self.host)

    def remote_states(self, stale_seconds: float = 300.0) -> list[dict]:
        reference = now()
        out = []
        for name in self.remote_names():
            entry = self.entries[name]
            age = None
            if entry.last_heartbeat:
                try:
                    age = max(0.0, (reference - parse_iso(entry.last_heartbeat)).total_seconds())
                except RelayError:
                    age = None
            out.append(
                {
                    "name": name,
                    "host": entry.host,
                    "alive": age is not None and age <= stale_seconds and not entry.archived,
                    "last_heartbeat": entry.last_heartbeat,
                    "age_seconds": round(age, 3) if age is not None else None,
                    "status": entry.status,
                    "task": entry.task,
                    "program": entry.program,
                    "model": entry.model,
                    "bead": entry.bead,
                    "archived": entry.archived,
                }
            )
        return out

    def changed(self) -> None:
        """A local agent changed (register, presence): publish soon."""
        self._dirty.set()

    # -- the watcher -------------------------------------------------------------------
    async def watch(self, kv) -> None:
        watcher = await kv.watchall()
        try:
            async for update in watcher:
                if update is None:  # the bucket's contents so far have all arrived
                    self.ready.set()
                    self.on_change()
                    continue
                self._apply(update)
                if self.ready.is_set():
                    self.on_change()
        finally:
            await finish(watcher.stop)

    def _apply(self, update) -> None:
        name = update.key
        if update.operation in ("DEL", "PURGE") or not update.value:
            self.entries.pop(name, None)
            self.revisions.pop(name, None)
            return
        try:
            entry = _decode(update.value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("skipped a damaged directory entry", agent=name)
            return
        self.entries[name] = entry
        self.revisions[name] = update.revision
        if entry.host == self.host:
            self.conflicts.pop(name, None)

    # -- claiming a name (register) ------------------------------------------------------
    async def claim(self, kv, name: str) -> None:
        """Make `name` this host's, or raise Conflict naming the host that has it."""
        entry = self.entries.get(name)
        if entry is not None and entry.host != self.host:
            raise taken(name, entry.host)
        if entry is not None:
            return
        self.claiming.add(name)  # the caller discards it once the local register has run
        value = _encode(DirectoryEntry(name=name, host=self.host))
        try:
            revision = await kv.create(name, value)
        except KeyWrongLastSequenceError:
            try:
                found = await kv.get(name)
            except KeyNotFoundError:
                raise Conflict(f"agent name {name!r} is being registered by another host; try again") from None
            self._apply(found)
            owner = self.entries.get(name)
            if owner is not None and owner.host != self.host:
                raise taken(name, owner.host) from None
            return
        self.entries[name] = DirectoryEntry(name=name, host=self.host)
        self.revisions[name] = revision
        self.published[name] = value

    # -- publishing this host's agents ---------------------------------------------------
    async def publish_forever(self, kv) -> None:
        await self.ready.wait()
        while True:
            await self.publish(kv)
            with anyio.move_on_after(REFRESH_SECONDS) as waited:
                await self._dirty.wait()
            self._dirty = anyio.Event()
            if not waited.cancelled_caught:
                await anyio.sleep(COALESCE_SECONDS)  # a burst of changes, one round
            else:
                self.published.clear()  # rewrite all: the heartbeat ages must not go stale

    async def publish(self, kv) -> None:
        local = {state.name: state for state in agent_states(self.store)}
        for name, state in local.items():
            entry = DirectoryEntry(
                name=name,
                host=self.host,
                program=state.program,
                model=state.model,
                task=state.task,
                status=state.status,
                bead=state.bead,
                last_heartbeat=state.last_heartbeat,
                archived=state.archived,
            )
            value = _encode(entry)
            if self.published.get(name) == value:
                continue
            known = self.entries.get(name)
            if known is not None and known.host != self.host:
                if self.conflicts.get(name) != known.host:
                    log.error("agent name owned by another host; not published", agent=name, owner=known.host)
                self.conflicts[name] = known.host
                continue
            try:
                if known is None:
                    revision = await kv.create(name, value)
                else:
                    revision = await kv.update(name, value, last=self.revisions.get(name, 0))
            except KeyWrongLastSequenceError:
                # Someone else wrote it since we looked: learn what is there, decide next round.
                try:
                    self._apply(await kv.get(name))
                except KeyNotFoundError:
                    self.entries.pop(name, None)
                self._dirty.set()
                continue
            self.entries[name] = entry
            self.revisions[name] = revision
            self.published[name] = value
        # Agents this host no longer has leave the directory.
        for name, entry in list(self.entries.items()):
            if entry.host == self.host and name not in local and name not in self.claiming:
                try:
                    await kv.delete(name, last=self.revisions.get(name))
                except KeyWrongLastSequenceError:
                    continue
                self.entries.pop(name, None)
                self.published.pop(name, None)


def taken(name: str, host: str) -> Conflict:
    return Conflict(
        f"agent name {name!r} is already registered on host {host}; agent names are unique across the bridged team (choose another name)",
        agent=name,
        host=host,
    )
