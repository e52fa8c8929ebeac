"""Reservations across hosts: one team-wide decision for overlapping patterns.

Keys per exact pattern (create-only) would stop two hosts taking the *same* pattern, but
not `src/**` on one host and `src/auth/login.go` on another. So a reserve runs under a
team lock: the key `reservations` in the bucket `relay-locks`, taken with a create-only
write (or, once the entry there has held for LEASE_SECONDS from its write -- whatever it
says of itself, as any host may write it -- with compare-and-set on the revision seen)
and given back with a delete conditioned on our own revision. Under the
lock the host reads every reservation of the other hosts from `relay-reservations`,
checks overlap exactly as one host does (`relayd.reservations.reserve.find_conflicts`), runs
the local reserve (which checks this host's own under its flock), and publishes the
result, then lets go. Each host writes only its own entries, under keys that begin with
its name (`<host>.<sha256(repo:pattern)>`; its NATS permissions allow no other); an entry
whose value names another host than its key is ignored. Release deletes them; a
reconcile on every (re)connection, and every quarter of the bucket's max age, rewrites
the live ones and removes those whose local file is gone (released or collected while
NATS was down). The bucket has a max age (`streams.RESERVATION_TTL`): the entries of a host
that stopped rewriting them -- gone, or never run, as a forged one -- leave with it.

While NATS is unreachable a reserve is refused (a local-only "exclusive" reservation
would be a promise nobody else can see); `--check` and release keep working.
"""

from __future__ import annotations

import time
from typing import Callable

import anyio
import msgspec
import structlog
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

from relayd import protocol
from relayd.errors import Conflict, RelayError, TimedOut, Unavailable
from relayd.ops import decode_params, lookup
from relayd.protocol import Request, Response
from relayd.records import Reservation, json_encoder
from relayd.reservations.reserve import check_repo, describe, find_conflicts, is_expired, load_all, pattern_in_repo, reservation_key
from relayd.store import Store
from relayd.timefmt import now, to_iso

from .link import finish, read_bucket
from .skipped import Skipped
from .subjects import LOCK_KEY, LOCKS_BUCKET, RESERVATIONS_BUCKET, kv_stream
from .subjects import reservation_key as team_key

log = structlog.get_logger()

LEASE_SECONDS = 10.0  # the longest a lock entry holds, from when it was written
LOCK_WAIT = LEASE_SECONDS + 2.0  # longer than any one entry holds: a reserve outlasts it
# What one host can make the others hold and show: its first this many reservations (in
# the bucket's order, the same on every host), each entry at most this large. A host
# refuses to reserve beyond it, so an honest one never meets it.
MAX_RESERVATIONS_PER_HOST = 256
MAX_ENTRY_BYTES = 16 * 1024  # an honest one: a pattern and a reason of at most 1024 characters, a path
RECONCILE_SECONDS = 60.0  # at most this long between reconciles (and a quarter of the bucket's max age)


class TeamEntry(Reservation, kw_only=True):
    host: str


class _Lock(msgspec.Struct):
    host: str
    until: float


_entry_decoder = msgspec.json.Decoder(TeamEntry)
_lock_decoder = msgspec.json.Decoder(_Lock)


def lock_over(written: float, first_seen: float, now_wall: float, now_mono: float) -> bool:
    """Whether a lock entry no longer holds: LEASE_SECONDS after the server stored it (its
    `written` time, wall clock), or after we first saw it (monotonic, for a host whose clock
    runs behind the server's) -- whichever comes first. What the entry itself says (its
    `until`, its host) is not trusted: any host can write this key."""
    return now_wall - written > LEASE_SECONDS or now_mono - first_seen > LEASE_SECONDS


def digest(file_name: str) -> str:
    return file_name.removesuffix(".json")


def owner_of(key: str) -> str:
    return key.split(".", 1)[0]


class TeamReservations:
    def __init__(self, store: Store, host: str, connected: Callable[[], object]) -> None:
        self.store = store
        self.host = host
        self.connected = connected  # the buckets (reservations, locks), or None while NATS is away
        self.remote: dict[str, TeamEntry] = {}  # other hosts' entries by key, as last read
        self.reconcile_every = RECONCILE_SECONDS
        self.js = None  # the session's JetStream context (fresh reads of the bucket)
        self.clock = time.time  # injectable, as is the monotonic clock: the lock's hold is timed
        self.monotonic = time.monotonic
        self.skipped = Skipped("reservation entry")

    def _key(self, r: Reservation) -> str:
        return team_key(self.host, digest(reservation_key(r.repo, r.pattern, None if r.exclusive else r.agent)))

    # -- the operations ------------------------------------------------------------------
    async def reserve(self, request: Request, execute):
        try:
            return await self._reserve(request, execute)
        except RelayError as exc:
            return None, _error(request, exc)
        except Exception as exc:  # NATS failed before anything was decided
            return None, _error(request, Unavailable(f"cannot reserve: the team's reservations did not answer ({type(exc).__name__}: {exc}); try again"))

    async def _reserve(self, request: Request, execute):
        params = decode_params(lookup("reserve"), request.params)
        request = msgspec.structs.replace(request, params=params)  # decoded once: ops.run takes the Struct as it is
        if params.check:
            return self._with_remote_conflicts(request, execute(request))
        buckets = self.connected()
        if buckets is None:
            return None, _error(request, Unavailable("cannot reserve: the team's reservations are decided through NATS, which is unreachable now (try again when relayctl status shows the bridge connected; --check still works)"))
        kv, locks = buckets
        moment = self.store.now()
        held = {digest(name) for name, r in load_all(self.store) if not is_expired(r, moment)}
        wanted = _candidate(params)
        if len(held) >= MAX_RESERVATIONS_PER_HOST and digest(reservation_key(wanted.repo, wanted.pattern, None if wanted.exclusive else wanted.agent)) not in held:
            return None, _error(request, Conflict(f"cannot reserve: this host holds {MAX_RESERVATIONS_PER_HOST} reservations, the most the other hosts keep of one host; release some first"))
        try:
            revision = await self._lock(locks)
        except RelayError as exc:
            return None, _error(request, exc)
        try:
            try:
                candidate = wanted
                others = await self._read_others(kv)
            except RelayError as exc:
                return None, _error(request, exc)
            conflicts = find_conflicts(candidate, others, moment)
            if conflicts and not params.force:
                return None, _error(
                    request,
                    Conflict(
                        f"cannot reserve {candidate.pattern} in {candidate.repo}: "
                        + "; ".join(f"{describe(c, moment)} on host {c.host}" for c in conflicts),  # each front end says what to do next
                        conflicts=[msgspec.to_builtins(c) for c in conflicts],
                    ),
                )
            batch, payload = execute(request)
            reply = protocol.decode(payload.rstrip(b"\n"))
            if isinstance(reply, Response) and reply.ok and reply.result and reply.result.get("reservation"):
                if batch is not None:
                    await batch.wait()  # published only once it is durable here
                held = msgspec.convert(reply.result["reservation"], Reservation)
                try:
                    await kv.put(self._key(held), _encode(held, self.host))
                except Exception as exc:
                    # Not published means not held team-wide: take the local one back.
                    if not reply.result.get("renewed"):
                        execute(Request(id=0, op="release", params={"agent": held.agent, "pattern": held.pattern, "repo": held.repo}))
                    raise Unavailable(f"cannot reserve {held.pattern}: publishing it to the team failed ({type(exc).__name__}: {exc}); nothing was reserved, try again") from None
            return batch, payload
        finally:
            await finish(lambda: self._unlock(locks, revision))

    async def release(self, request: Request, execute):
        batch, payload = execute(request)
        buckets = self.connected()
        reply = protocol.decode(payload.rstrip(b"\n"))
        if buckets is not None and isinstance(reply, Response) and reply.ok:
            kv, _ = buckets
            for r in reply.result.get("released", []):
                held = msgspec.convert(r, Reservation)
                try:
                    await kv.delete(self._key(held))
                except Exception as exc:  # the reconcile removes it later
                    log.warning("could not remove a released reservation from the team bucket", pattern=held.pattern, error=str(exc))
        return batch, payload

    def _with_remote_conflicts(self, request: Request, outcome):
        """`reserve --check`: the local answer plus what other hosts hold, as last seen."""
        batch, payload = outcome
        reply = protocol.decode(payload.rstrip(b"\n"))
        if not (isinstance(reply, Response) and reply.ok):
            return outcome
        params = decode_params(lookup("reserve"), request.params)
        candidate = _candidate(params)
        found = find_conflicts(candidate, list(self.remote.values()), self.store.now())
        if found:
            reply.result["conflicts"] = list(reply.result.get("conflicts", [])) + [msgspec.to_builtins(c) for c in found]
            payload = protocol.encode(reply)
        return batch, payload

    # -- the lock --------------------------------------------------------------------------
    async def _lock(self, locks) -> int:
        value = json_encoder.encode(_Lock(host=self.host, until=self.clock() + LEASE_SECONDS))
        deadline = self.monotonic() + LOCK_WAIT
        seen: dict[int, float] = {}  # revision of a lock entry -> when we first saw it
        holder = "?"
        pause = 0.005
        while True:
            try:
                return await locks.create(LOCK_KEY, value)
            except KeyWrongLastSequenceError:
                pass
            held = await self._held()
            if held is None:
                continue  # released meanwhile
            revision, holder, written = held
            first_seen = seen.setdefault(revision, self.monotonic())
            if lock_over(written, first_seen, self.clock(), self.monotonic()):
                try:
                    return await locks.update(LOCK_KEY, value, last=revision)
                except KeyWrongLastSequenceError:
                    pass  # someone else took it over first
            if self.monotonic() > deadline:
                raise TimedOut(f"the team reservation lock stayed held ({holder}) for {LOCK_WAIT:.0f}s; try again")
            await anyio.sleep(pause)
            pause = min(0.1, pause * 1.5)

    async def _held(self) -> tuple[int, str, float] | None:
        """(revision, who the entry says holds it, when the server stored it) of the lock
        entry, or None when nobody holds it."""
        try:
            msg = await self.js.get_msg(kv_stream(LOCKS_BUCKET), subject=f"$KV.{LOCKS_BUCKET}.{LOCK_KEY}")
        except NotFoundError:
            return None
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            return None
        try:
            holder = f"by host {_lock_decoder.decode(msg.data or b'').host}, as its entry says"
        except (msgspec.DecodeError, msgspec.ValidationError):
            holder = "by an entry that is not a relay lock"
        written = msg.time.timestamp() if msg.time is not None else 0.0
        return msg.seq or 0, holder, written

    async def _unlock(self, locks, revision: int) -> None:
        try:
            await locks.delete(LOCK_KEY, last=revision)
        except Exception as exc:  # taken over after our lease, or NATS went away: the lease ends it
            log.warning("could not release the team reservation lock", error=str(exc))

    # -- what the other hosts hold -----------------------------------------------------------
    async def _read_others(self, kv) -> list[TeamEntry]:
        """Fresh from the bucket (not the watched copy, which may lag behind a write that
        another host finished just before it gave us the lock)."""
        self.remote = {key: value for key, _, value in await _bucket(self.js, self.skipped, self.host) if value.host != self.host}
        return list(self.remote.values())

    async def watch(self, kv) -> None:
        """Keep `remote` (used by --check and status) current between reserves."""
        watcher = await kv.watchall()
        try:
            async for update in watcher:
                if update is None:
                    continue
                if update.operation in ("DEL", "PURGE") or not update.value:
                    self.remote.pop(update.key, None)
                    continue
                # Skipped ones are counted by the whole reads (_bucket), not here as well.
                value = _genuine(update.key, update.value, self.skipped, {})
                if value is None or value.host == self.host:
                    continue
                held = sum(1 for other in self.remote.values() if other.host == value.host)
                if update.key in self.remote or held < MAX_RESERVATIONS_PER_HOST:
                    self.remote[update.key] = value
        finally:
            await finish(watcher.stop)

    async def reconcile_forever(self, kv) -> None:
        max_age = (await kv.status()).ttl
        if max_age:
            self.reconcile_every = min(RECONCILE_SECONDS, max_age / 4)
        while True:
            await anyio.sleep(self.reconcile_every)
            await self.reconcile(kv)

    async def reconcile(self, kv) -> None:
        """Make the bucket show exactly this host's live reservations, each freshly written
        (the bucket's max age removes entries nobody rewrites)."""
        moment = self.store.now()
        local = {team_key(self.host, digest(name)): r for name, r in load_all(self.store) if not is_expired(r, moment)}
        for key, revision, value in await _bucket(self.js, self.skipped, self.host):
            if value.host == self.host and key not in local:
                await kv.delete(key, last=revision)
        for key, r in local.items():
            await kv.put(key, _encode(r, self.host))


async def _bucket(js, skipped: Skipped, host: str) -> list[tuple[str, int, TeamEntry]]:
    """(key, revision, entry) of every genuine entry, fresh from the bucket; damaged values,
    entries naming another host than their key, and another host's entries beyond the
    first MAX_RESERVATIONS_PER_HOST are left out (and counted: `skipped.counts` becomes
    this read's tally)."""
    found = []
    counts: dict[str, int] = {}
    held: dict[str, int] = {}
    for key, revision, raw in await read_bucket(js, RESERVATIONS_BUCKET):
        value = _genuine(key, raw, skipped, counts)
        if value is None:
            continue
        if value.host != host:
            if held.get(value.host, 0) >= MAX_RESERVATIONS_PER_HOST:
                skipped.note(value.host, "more reservations than a host may hold", key, counts)
                continue
            held[value.host] = held.get(value.host, 0) + 1
        found.append((key, revision, value))
    skipped.counts = counts
    return found


def _genuine(key: str, raw: bytes | None, skipped: Skipped, counts: dict[str, int]) -> TeamEntry | None:
    """The entry under `key`, unless it is damaged or names another host than the key
    (which NATS let only that host write): such an entry holds nothing."""
    if raw is not None and len(raw) > MAX_ENTRY_BYTES:
        skipped.note(owner_of(key), "larger than an entry may be", key, counts)
        return None
    try:
        value = _entry_decoder.decode(raw or b"")
    except (msgspec.DecodeError, msgspec.ValidationError):
        skipped.note(owner_of(key), "damaged", key, counts)
        return None
    if value.host != owner_of(key):
        skipped.note(owner_of(key), "names another host than its key", key, counts)
        return None
    return value


def _candidate(params) -> Reservation:
    repo = check_repo(params.repo)
    stamp = to_iso(now())
    return Reservation(id="", agent=params.agent, pattern=pattern_in_repo(params.pattern, repo), repo=repo, exclusive=not params.shared, created_at=stamp, expires_at="9999-12-31T23:59:59.999Z")


def _encode(r: Reservation, host: str) -> bytes:
    return json_encoder.encode(TeamEntry(**msgspec.structs.asdict(r), host=host))


def _error(request: Request, exc: RelayError) -> bytes:
    return protocol.encode(Response(id=request.id, ok=False, error=protocol.error_body(exc)))
