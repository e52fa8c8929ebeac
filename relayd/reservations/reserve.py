"""File reservations (seed 004 §3.3): reserve, release, list.

One file per reservation, `reservations/<sha256(repo + ":" + pattern)>.json`, created with
O_CREAT|O_EXCL semantics. A shared reservation is keyed by `repo:pattern:agent` instead,
so several agents can hold the same pattern shared at once.

Conflicts: two reservations in the same repo conflict when some path matches both
patterns (decided exactly, `relayd.reservations.globs`), unless both are shared or one has expired.
An agent never conflicts with itself. The check and the create happen under one
store-wide flock, so two processes reserving overlapping (not only identical) patterns
at the same moment cannot both win.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import msgspec

from .. import layout, remote
from ..errors import Conflict, NotFound, NotOwner, StoreError, UsageError
from ..records import Reservation, check_agent_name, json_encoder, reservation_decoder
from ..registry import operation
from ..store import Store
from ..timefmt import now, parse_duration, parse_iso, passed_test, short_span, to_iso
from ..ulid import new_ulid
from .globs import PatternError, covers_everything, normalize, normalized_overlap
from .guard_index import directory_stamp, settled, written_through

SUFFIX = ".json"
MAX_REASON = 1024
MAX_TTL = timedelta(days=366)


def reservation_key(repo: str, pattern: str, shared_by: str | None = None) -> str:
    text = f"{repo}:{pattern}" if shared_by is None else f"{repo}:{pattern}:{shared_by}"
    return layout.sha256_hex(text.encode()) + SUFFIX


def check_repo(repo: str | None) -> str:
    """Repos are compared as text, so only canonical absolute paths are accepted."""
    if not repo:
        raise UsageError("repo is required: the repository's absolute path (relayctl uses the current directory)")
    if not os.path.isabs(repo) or "\x00" in repo or "\n" in repo:
        raise UsageError(f"repo must be an absolute path, not {repo!r}")
    return os.path.normpath(repo)


def pattern_in_repo(pattern: str, repo: str) -> str:
    """The canonical pattern, relative to `repo`.

    Editors and agents name files by absolute path; such a pattern is made relative to
    the repo's root (`/src/x.go`), so it meets the same reservations as that spelling.
    Any other pattern with a leading `/` is rooted at the repo, as in .gitignore
    (`/Makefile`), unless its first name is one of the file system's top directories and
    not one of the repo's (`/etc/passwd`, `/home/...`): that is a path outside the repo,
    which cannot be reserved in it.
    """
    if isinstance(pattern, str) and pattern.strip().startswith("/"):
        text = pattern.strip()
        top = repo.rstrip("/")
        if text in (repo, top + "/"):
            return normalize("**")
        if text.startswith(top + "/"):
            return normalize(text[len(top) :])
        first = text.lstrip("/").split("/")[0]
        if first and os.path.lexists("/" + first) and not os.path.lexists(os.path.join(repo, first)):
            raise UsageError(f"{text} is outside the repository {repo}; give a path inside it, or set --repo")
    return normalize(pattern)


def is_expired(r: Reservation, reference=None) -> bool:
    return passed_test(reference)(r.expires_at)


def expiry_test(reference=None):
    """`is_expired` for many reservations against one moment."""
    passed = passed_test(reference)
    return lambda r: passed(r.expires_at)


def load_all(store: Store) -> list[tuple[str, Reservation]]:
    """Every readable reservation file with its name; damaged files are skipped.

    Reading 1,000 files is most of what a reserve or check costs, and relayd checks against
    the same directory again and again: a Store keeps the records it read from a directory
    that had not changed for guard_index.SETTLED_NS, and hands them out again while the
    directory's identity (device, inode, mtime, ctime) is the same. Every change to a
    reservation links, renames or unlinks a file there, which moves its ctime, and a
    settled directory's next change falls in a later clock tick: the same reasoning (and
    the same one exception, a file rewritten in place by hand) as the guard's index."""
    stamp = directory_stamp(store.root)
    seen = store.remembered.reservations
    if stamp is not None and seen is not None and seen[0] == stamp:
        return list(seen[1])
    records = store.records(layout.RESERVATIONS, reservation_decoder)
    if stamp is not None and settled(stamp, lambda: int(store.clock() * 1e9)):
        store.remembered.reservations = (stamp, tuple(records))
    return records


def _read(folder, name: str) -> Reservation | None:
    raw = folder.read_bytes(name)
    try:
        return reservation_decoder.decode(raw) if raw else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # a damaged file holds nothing


def find_conflicts(candidate: Reservation, existing: list[Reservation], reference: datetime | None = None) -> list[Reservation]:
    """The reservations that keep `candidate` from being taken at `reference` (default now;
    cheapest tests first)."""
    expired = expiry_test(reference)
    found = []
    for other in existing:
        if other.repo != candidate.repo or other.agent == candidate.agent or not (candidate.exclusive or other.exclusive):
            continue
        if expired(other):
            continue
        try:
            if normalized_overlap(candidate.pattern, other.pattern):
                found.append(other)
        except PatternError:
            continue  # a hand-edited file with a broken pattern holds nothing
    return found


def _stored_otherwise(store: Store, repo: str, pattern: str, agent: str) -> tuple[str, Reservation] | None:
    """A reservation of `pattern` filed under another spelling: one stored before patterns
    were read as .gitignore reads them (`*.go`, filed by that text, reads `**/*.go`).
    The caller's own first, as release looks for it."""
    same = [(name, r) for name, r in load_all(store) if r.repo == repo and _reads_as(r.pattern, pattern)]
    same.sort(key=lambda found: found[1].agent != agent)
    return same[0] if same else None


def _reads_as(stored: str, pattern: str) -> bool:
    try:
        return normalize(stored) == pattern
    except PatternError:
        return False


def describe(r: Reservation, reference: datetime | None = None) -> str:
    left = (parse_iso(r.expires_at) - (reference or now())).total_seconds()
    kind = "exclusive" if r.exclusive else "shared"
    return f"{r.agent} holds {r.pattern} ({kind}, expires {r.expires_at}, in {short_span(left)})"


# -- reserve ----------------------------------------------------------------------------


UNFORCED_TTL = timedelta(days=1)  # longer needs force


def _refuse_sweeping(pattern: str, repo: str, ttl: timedelta, spelled: str) -> None:
    """A reservation of everything, or for longer than a day, blocks every other agent's
    commits (the pre-commit guard) for that long: taken only with force, on purpose."""
    if covers_everything(pattern):
        raise UsageError(f"{pattern} covers every file in {repo}: every other agent's commit there would be refused while it "
                         "holds; reserve the files you will edit, or pass force (relayctl reserve --force) to take it all")
    if ttl > UNFORCED_TTL:
        raise UsageError(f"a reservation for {spelled} holds {pattern} in {repo} longer than a day (every other agent's commit "
                         "touching it is refused until then); renew a shorter one as you go, or pass force (relayctl reserve --force)")


class ReserveParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    pattern: str
    repo: str | None = None
    shared: bool = False
    ttl: str = "1h"
    reason: str | None = None
    force: bool = False
    check: bool = False


class ReserveResult(msgspec.Struct, kw_only=True):
    reserved: bool
    reservation: Reservation | None
    conflicts: list[Reservation]
    renewed: bool = False  # the agent already held this pattern; its expiry moved
    overridden: bool = False  # --force took it despite the conflicts
    agent_registered: bool = True  # False: the holder names no agent of the team (a typo in --agent?); reserved all the same


@operation("reserve", ReserveParams)
def reserve(store: Store, p: ReserveParams) -> ReserveResult:
    """Reserve a path pattern in a repo; refused (Conflict) when someone else holds an overlapping one."""
    check_agent_name(p.agent)
    if not p.check:
        remote.refuse_unbridged(store, "reserving files")
    repo = check_repo(p.repo)
    pattern = pattern_in_repo(p.pattern, repo)
    ttl = parse_duration(p.ttl)
    if not timedelta(0) < ttl <= MAX_TTL:
        raise UsageError(f"--ttl must be positive and at most {MAX_TTL.days} days, not {p.ttl!r}")
    if p.reason is not None and len(p.reason) > MAX_REASON:
        raise UsageError(f"reason is too long ({len(p.reason)} characters, at most {MAX_REASON})")
    if not p.check and not p.force:
        _refuse_sweeping(pattern, repo, ttl, p.ttl)
    stamp = store.now()
    candidate = Reservation(
        id=new_ulid(),
        agent=p.agent,
        pattern=pattern,
        repo=repo,
        exclusive=not p.shared,
        reason=p.reason,
        created_at=to_iso(stamp),
        expires_at=to_iso(stamp + ttl),
    )
    folder = store.top(layout.RESERVATIONS)
    with store.root_dir().locked(layout.RESERVATIONS_LOCK, shared=p.check):
        before = None if p.check else directory_stamp(store.root)
        held = load_all(store)
        conflicts = find_conflicts(candidate, [r for _, r in held], stamp)
        if p.check:
            return ReserveResult(reserved=False, reservation=None, conflicts=conflicts)
        if conflicts and not p.force:
            raise Conflict(
                f"cannot reserve {pattern} in {repo}: "
                + "; ".join(describe(c, stamp) for c in conflicts),  # each front end says what to do next
                conflicts=[msgspec.to_builtins(c) for c in conflicts],
            )
        key = reservation_key(repo, pattern, None if candidate.exclusive else p.agent)
        data = json_encoder.encode(candidate) + b"\n"
        events = []
        renewed = False
        if not folder.create_exclusive(key, data, store.sync):
            previous = _read(folder, key)
            if previous is not None and previous.agent == p.agent:
                renewed = True
                candidate = msgspec.structs.replace(candidate, id=previous.id, created_at=previous.created_at)
                data = json_encoder.encode(candidate) + b"\n"
            elif previous is not None and not is_expired(previous, stamp) and not p.force:
                # Unreachable while every writer holds the lock; kept so a stray file never gets overwritten silently.
                raise Conflict(f"cannot reserve {pattern} in {repo}: {describe(previous, stamp)}")
            elif previous is not None and is_expired(previous, stamp):
                events.append(store.event("reservation", action="expired", pattern=previous.pattern, repo=repo, agent=previous.agent))
            folder.replace(key, data, store.sync)
        # Switching between shared and exclusive leaves one reservation, not two.
        other_mode = reservation_key(repo, pattern, p.agent if candidate.exclusive else None)
        other = dict(held).get(other_mode)
        unlinked = []
        if other is not None and other.agent == p.agent:
            folder.unlink(other_mode, missing_ok=True)
            unlinked = [(other.repo, other.pattern)] if other.exclusive else []
        events.append(
            store.event("reservation", action="renewed" if renewed else "created", pattern=pattern, repo=repo, agent=p.agent)
        )
        written_through(store.root, before, [candidate], unlinked)
    store.emit(*events)
    return ReserveResult(reserved=True, reservation=candidate, conflicts=conflicts, renewed=renewed, overridden=bool(conflicts), agent_registered=store.is_known_agent(p.agent))


# -- release ----------------------------------------------------------------------------


class ReleaseParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    pattern: str | None = None
    repo: str | None = None  # with all: only this repo (None = every repo)
    all: bool = False


class ReleaseResult(msgspec.Struct, kw_only=True):
    released: list[Reservation]


@operation("release", ReleaseParams)
def release(store: Store, p: ReleaseParams) -> ReleaseResult:
    """Release a reservation you hold (or all of yours); someone else's is refused (NotOwner)."""
    check_agent_name(p.agent)
    if p.all == (p.pattern is not None):
        raise UsageError("give a pattern to release, or all (not both)")
    folder = store.top(layout.RESERVATIONS)
    released: list[Reservation] = []
    with store.root_dir().locked(layout.RESERVATIONS_LOCK):
        before = directory_stamp(store.root)
        if p.all:
            repo = check_repo(p.repo) if p.repo else None
            for name, r in load_all(store):
                if r.agent == p.agent and (repo is None or r.repo == repo):
                    folder.unlink(name, missing_ok=True)
                    released.append(r)
        else:
            repo = check_repo(p.repo)
            pattern = pattern_in_repo(p.pattern, repo)  # type: ignore[arg-type]
            found = None
            for key in (reservation_key(repo, pattern, p.agent), reservation_key(repo, pattern)):
                raw = folder.read_bytes(key)
                if raw:
                    try:
                        found = (key, reservation_decoder.decode(raw))
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        raise StoreError(f"reservation file {key} is damaged; remove it or run relayctl gc") from None
                    break
            if found is None:
                found = _stored_otherwise(store, repo, pattern, p.agent)
            if found is None:
                raise NotFound(f"no reservation of {pattern} in {repo}")
            key, r = found
            if r.agent != p.agent:
                raise NotOwner(
                    f"{pattern} in {repo} is held by {r.agent}; only {r.agent} can release it",
                    holder=r.agent,
                )
            folder.unlink(key)
            released.append(r)
        if released:
            store.sync.dir(folder.fd)
            written_through(store.root, before, [], [(r.repo, r.pattern) for r in released if r.exclusive])
    store.emit(*(store.event("reservation", action="released", pattern=r.pattern, repo=r.repo, agent=r.agent) for r in released))
    released.sort(key=lambda r: (r.repo, r.pattern))
    return ReleaseResult(released=released)


# -- list ---------------------------------------------------------------------------------


class ReservationsParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    repo: str | None = None
    agent: str | None = None
    expired: bool = False  # include expired ones


class ReservationView(Reservation, kw_only=True, omit_defaults=False):
    expired: bool = False


def listing(store: Store, repo: str | None = None, agent: str | None = None, expired: bool = False) -> list[ReservationView]:
    repo = check_repo(repo) if repo else None
    reference = store.now()
    shown = []
    for _, r in load_all(store):
        if repo is not None and r.repo != repo:
            continue
        if agent is not None and r.agent != agent:
            continue
        gone = is_expired(r, reference)
        if gone and not expired:
            continue
        shown.append(ReservationView(**msgspec.structs.asdict(r), expired=gone))
    shown.sort(key=lambda r: (r.repo, r.pattern, r.agent))
    return shown


@operation("reservations", ReservationsParams, mutates=False)
def reservations(store: Store, p: ReservationsParams) -> list[ReservationView]:
    """List active reservations (optionally by repo or agent, or with the expired ones)."""
    if p.agent is not None:
        check_agent_name(p.agent)
    return listing(store, p.repo, p.agent, p.expired)
