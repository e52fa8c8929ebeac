"""The team directory: which agent lives on which host, and how it is doing.

The bucket `relay-agents` holds two kinds of keys, both under the writing host's name
(NATS lets a host write only its own, `subjects`):

* `<host>.name.<agent>` -- the host's claim on a name, written once when the name is
  registered and never rewritten while the host keeps the agent. JetStream numbers
  every write, so claims are ordered: **a name belongs to the host with the oldest
  claim**. A host that claims a name another already holds gets a later number and loses;
  it cannot rewrite or delete the older claim. Of two hosts registering the same new name
  at the same moment, each reads every claim after writing its own, both see the same
  order, and the later one withdraws.
* `<host>.agent.<agent>` -- the agent's presence (program, task, status, heartbeat),
  rewritten as it changes and every 30 s. An entry whose value names another host or
  agent than its key is ignored, and logged once (`skipped`).

Each relayd keeps the bucket in memory, fed by a watcher: a send asks `host_of` without a
network round trip. What one host can make the others keep is bounded: its first
`MAX_AGENTS_PER_HOST` claims (by revision, so every host keeps the same ones), entries of
at most `MAX_ENTRY_BYTES`; what is skipped is counted and logged once (`skipped`).
"""

from __future__ import annotations

from typing import Callable

import anyio
import msgspec
import structlog
from nats.js.errors import KeyWrongLastSequenceError

from relayd.agents.roster import agent_states
from relayd.errors import Conflict, RelayError
from relayd.names import AGENT_NAME_RE
from relayd.store import Store
from relayd.timefmt import now, parse_iso

from .link import finish, read_bucket
from .skipped import Skipped
from .subjects import AGENTS_BUCKET, name_key, presence_key

log = structlog.get_logger()

# What one host can make every other host keep and show: at most this many of its agents
# (its oldest claims; later ones are skipped and counted), each entry at most this large.
MAX_AGENTS_PER_HOST = 128
MAX_ENTRY_BYTES = 32 * 1024
SHOWN_CHARS = 200  # of a remote agent's task, status and the like (a reservation's reason), in status
REFRESH_SECONDS = 30.0  # every entry is rewritten this often, so heartbeat ages stay fresh
COALESCE_SECONDS = 0.05
CLAIM = b"{}"


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


def parse_key(key: str) -> tuple[str, str, str] | None:
    """(host, kind, agent) of a directory key, or None for anything else."""
    parts = key.split(".")
    if len(parts) != 3 or parts[1] not in ("name", "agent"):
        return None
    host, kind, agent = parts
    if not AGENT_NAME_RE.fullmatch(host) or not AGENT_NAME_RE.fullmatch(agent):
        return None
    return host, kind, agent


def oldest(claims: dict[str, int]) -> str | None:
    return min(claims, key=lambda host: claims[host]) if claims else None


class Watched:
    """The bucket as one watch has read it (and this host's own writes since)."""

    __slots__ = ("claims", "counts", "presence")

    def __init__(self) -> None:
        self.claims: dict[str, dict[str, int]] = {}  # agent -> {host: revision of its claim}
        self.counts: dict[str, int] = {}  # host -> claims of it kept in `claims`
        self.presence: dict[tuple[str, str], DirectoryEntry] = {}  # (host, agent) -> entry


class Directory:
    def __init__(self, store: Store, host: str) -> None:
        self.store = store
        self.host = host
        self.watched = Watched()
        self.published: dict[str, bytes] = {}  # what this host last wrote per name
        self.conflicts: dict[str, str] = {}  # local agent -> the other host that owns the name
        self.claiming: set[str] = set()  # claimed, the local register not yet run: not stale
        self.ready = anyio.Event()  # the watcher has delivered the bucket's contents
        self.on_change: Callable[[], None] = lambda: None
        self.js = None  # the session's JetStream context (fresh reads of the claims)
        self._dirty = anyio.Event()
        self.skipped = Skipped("directory entry")

    @property
    def claims(self) -> dict[str, dict[str, int]]:
        return self.watched.claims

    @property
    def counts(self) -> dict[str, int]:
        return self.watched.counts

    @property
    def presence(self) -> dict[tuple[str, str], DirectoryEntry]:
        return self.watched.presence

    # -- asked by the store operations (no I/O) ----------------------------------------
    def owner(self, name: str) -> str | None:
        return oldest(self.claims.get(name, {}))

    def host_of(self, name: str) -> str | None:
        owner = self.owner(name)
        return owner if owner != self.host else None

    def remote_names(self) -> list[str]:
        return sorted(name for name in self.claims if self.host_of(name) is not None)

    def remote_states(self, stale_seconds: float = 300.0) -> list[dict]:
        reference = now()
        out = []
        for name in self.remote_names():
            host = self.owner(name) or ""
            entry = self.presence.get((host, name)) or DirectoryEntry(name=name, host=host)
            age = None
            if entry.last_heartbeat:
                try:
                    age = max(0.0, (reference - parse_iso(entry.last_heartbeat)).total_seconds())
                except RelayError:
                    age = None
            out.append(
                {
                    "name": name,
                    "host": host,
                    "alive": age is not None and age <= stale_seconds and not entry.archived,
                    "last_heartbeat": entry.last_heartbeat,
                    "age_seconds": round(age, 3) if age is not None else None,
                    "status": shown(entry.status),
                    "task": shown(entry.task),
                    "program": shown(entry.program),
                    "model": shown(entry.model),
                    "bead": shown(entry.bead),
                    "archived": entry.archived,
                }
            )
        return out

    def changed(self) -> None:
        """A local agent changed (register, presence): publish soon."""
        self._dirty.set()

    # -- the watcher -------------------------------------------------------------------
    async def watch(self, kv) -> None:
        """Each session watches the bucket afresh: the contents it starts with are read into a
        new copy, which replaces the one an earlier session left once they have all arrived.
        So what went from the bucket while this host was away (a name withdrawn, an entry
        deleted) goes from here too, and a skipped entry is counted once, not once a session;
        until then, sends meanwhile still find the agents the earlier session knew."""
        watcher = await kv.watchall()
        watched, tally = Watched(), {}  # this watch's copy, and what it skipped
        try:
            async for update in watcher:
                if update is None:  # the bucket's contents so far have all arrived
                    self.watched, self.skipped.counts = watched, tally  # (the live ones from now on)
                    self.ready.set()
                    self.on_change()
                    continue
                self._apply(update, watched, tally)
                if self.ready.is_set():
                    self.on_change()
        finally:
            await finish(watcher.stop)

    def _apply(self, update, into: Watched, tally: dict[str, int]) -> None:
        """One update of the bucket, into the copy `into`; what is skipped is counted into `tally`."""
        parsed = parse_key(update.key)
        if parsed is None:
            return
        host, kind, name = parsed
        gone = update.operation in ("DEL", "PURGE") or not update.value
        if kind == "name":
            if gone:
                self._drop_claim(host, name, into)
            else:
                self._add_claim(host, name, update.revision, into, tally)
            if oldest(into.claims.get(name, {})) == self.host:
                self.conflicts.pop(name, None)
            return
        if gone:
            into.presence.pop((host, name), None)
            return
        if len(update.value) > MAX_ENTRY_BYTES:
            self.skipped.note(host, "larger than an entry may be", update.key, tally)
            return
        try:
            entry = _decode(update.value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.skipped.note(host, "damaged", update.key, tally)
            return
        if entry.host != host or entry.name != name:
            self.skipped.note(host, "names another host or agent than its key", update.key, tally)
            return
        if host not in into.claims.get(name, {}):
            return  # its claim is not kept here (withdrawn, or skipped and counted above)
        into.presence[(host, name)] = entry

    def _add_claim(self, host: str, name: str, revision: int, into: Watched | None = None, tally: dict[str, int] | None = None) -> bool:
        """Keep `host`'s claim on `name` (in `into`, the live copy when None), unless the host
        has as many as it may list."""
        into = into if into is not None else self.watched
        held = into.claims.setdefault(name, {})
        if host not in held:
            if host != self.host and into.counts.get(host, 0) >= MAX_AGENTS_PER_HOST:
                if not held:
                    into.claims.pop(name, None)
                self.skipped.note(host, "more agents than a host may list", name_key(host, name), tally)
                return False
            into.counts[host] = into.counts.get(host, 0) + 1
        held[host] = revision
        return True

    def _drop_claim(self, host: str, name: str, into: Watched | None = None) -> None:
        into = into if into is not None else self.watched
        held = into.claims.get(name, {})
        if held.pop(host, None) is not None:
            into.counts[host] -= 1
        if not held:
            into.claims.pop(name, None)

    async def fresh_claims(self, name: str) -> dict[str, int]:
        """Every host's claim on `name`, read from the bucket now (the watched copy may lag);
        a host's claim beyond what it may list counts no more here than in the watched copy."""
        found: dict[str, int] = {}
        held = self.claims.get(name, {})
        for key, revision, _ in await read_bucket(self.js, AGENTS_BUCKET, name_key("*", name)):
            parsed = parse_key(key)
            if parsed is None:
                continue
            host = parsed[0]
            if host in held or host == self.host or self.counts.get(host, 0) < MAX_AGENTS_PER_HOST:
                found[host] = revision
        return found

    async def fresh_owner(self, name: str) -> str | None:
        claims = await self.fresh_claims(name)
        for host, revision in claims.items():
            self._add_claim(host, name, revision)
        return oldest(claims)

    # -- claiming a name (register) ------------------------------------------------------
    async def claim(self, kv, name: str) -> None:
        """Make `name` this host's, or raise Conflict naming the host that has it."""
        owner = self.owner(name)
        if owner is not None and owner != self.host:
            raise taken(name, owner)
        if owner == self.host:
            return
        if self.counts.get(self.host, 0) >= MAX_AGENTS_PER_HOST:
            # The other hosts would not keep another claim of this host's (see the cap).
            raise Conflict(f"cannot register {name}: this host has {MAX_AGENTS_PER_HOST} agents in the team directory, the most one host may list", agent=name)
        self.claiming.add(name)  # the caller discards it once the local register has run
        winner = await self._claim(kv, name)
        if winner != self.host:
            try:
                await kv.delete(name_key(self.host, name))  # withdrawn: the older claim stands
            except Exception as exc:  # the next publish round deletes it (no local agent)
                log.warning("could not withdraw a losing name claim", agent=name, error=str(exc))
            self._drop_claim(self.host, name)
            raise taken(name, winner)

    async def _claim(self, kv, name: str) -> str:
        """Write this host's claim (once) and return the owner: the host of the oldest claim."""
        key = name_key(self.host, name)
        try:
            revision = await kv.create(key, CLAIM)
        except KeyWrongLastSequenceError:
            revision = (await kv.get(key)).revision  # claimed before (an earlier run): keep its place
        claims = await self.fresh_claims(name)
        claims[self.host] = revision
        for host, rev in claims.items():
            self._add_claim(host, name, rev)
        return oldest(claims) or self.host

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
            if self.host not in self.claims.get(name, {}):
                await self._claim(kv, name)  # an agent the store had before it joined the team
            owner = self.owner(name)
            if owner != self.host:
                if self.conflicts.get(name) != owner:
                    log.error("agent name owned by another host; not published", agent=name, owner=owner)
                self.conflicts[name] = owner or ""
                continue
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
            # Only this host can write its keys (and its lease keeps a second relayd of
            # the same name away), so a plain put cannot overwrite anyone.
            await kv.put(presence_key(self.host, name), value)
            self.presence[(self.host, name)] = entry
            self.published[name] = value
        # Agents this host no longer has leave the directory.
        for name, held in list(self.claims.items()):
            if self.host in held and name not in local and name not in self.claiming:
                await kv.delete(presence_key(self.host, name))
                await kv.delete(name_key(self.host, name))
                self._drop_claim(self.host, name)
                self.presence.pop((self.host, name), None)
                self.published.pop(name, None)


def shown(text: str | None) -> str | None:
    """Another host's text as status shows it: a long one cut, so no host swells it."""
    if text is None or len(text) <= SHOWN_CHARS:
        return text
    return text[: SHOWN_CHARS - 1] + "…"


def taken(name: str, host: str) -> Conflict:
    return Conflict(
        f"agent name {name!r} is already registered on host {host}; agent names are unique across the bridged team (choose another name)",
        agent=name,
        host=host,
    )
