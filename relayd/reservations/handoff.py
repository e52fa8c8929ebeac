"""Handing work over: the caller's reservations move to another agent in one step.

Delivering a message does not move the right to edit: after "coder, take over auth", the
old owner still holds `src/auth/**` and the new one would be refused at commit. `handoff`
moves the named reservations (or all the caller holds in a repository) to the new owner
under the store-wide reservations lock, the same lock every reserve and release holds, so
there is no moment at which a third agent could take them, and no moment at which both
old and new owner hold them. Each keeps its pattern, kind and expiry (or gets `ttl` from
now); its reason says who handed it over, when, and in which thread, so the pre-commit
guard's refusal of the old owner's commit names the handoff. The brief that goes with it
is an ordinary message, sent by the client once the move is done (`relayctl handoff`,
relay-mcp): this wing stands below the inbox and never writes mail.

Refused, with nothing moved: an unknown or archived new owner, the caller itself, a
pattern the caller does not hold, nothing to hand over.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec

from .. import layout, remote
from ..agents.presence import archived
from ..errors import NotFound, NotOwner, UsageError
from ..records import Reservation, check_agent_name, json_encoder
from ..registry import operation
from ..store import Store
from ..timefmt import parse_duration, to_iso
from .guard_index import directory_stamp, written_through
from .reserve import MAX_REASON, MAX_TTL, check_repo, is_expired, load_all, pattern_in_repo, reservation_key

HANDED = "handed over by"  # how a handed reservation's reason begins (the guard's refusal shows it)


class HandoffParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # who hands over (the holder)
    to: str  # the new owner
    patterns: list[str] = msgspec.field(default_factory=list)
    all: bool = False  # every reservation the caller holds in `repo`
    repo: str | None = None
    ttl: str | None = None  # a new expiry from now; None keeps each one's own
    thread: str | None = None


class HandoffResult(msgspec.Struct, kw_only=True):
    handed: list[Reservation]  # as the new owner now holds them
    to: str
    repo: str


@operation("handoff", HandoffParams)
def handoff(store: Store, p: HandoffParams) -> HandoffResult:
    """Move the caller's reservations to another agent, atomically."""
    check_agent_name(p.agent)
    check_agent_name(p.to)
    remote.refuse_unbridged(store, "handing reservations over")
    if p.to == p.agent:
        raise UsageError(f"{p.agent} cannot hand work over to itself")
    if p.all == bool(p.patterns):
        raise UsageError("name the patterns to hand over, or all (not both)")
    if not store.is_agent(p.to):
        raise store.unknown_agent(p.to)
    with store.agent_dir(p.to) as new_owner:
        if archived(new_owner):
            raise UsageError(f"{p.to} is archived (its program was stopped): start it again, or hand the work to an agent that is alive")
    repo = check_repo(p.repo)
    ttl = parse_duration(p.ttl) if p.ttl is not None else None
    if ttl is not None and not timedelta(0) < ttl <= MAX_TTL:
        raise UsageError(f"--ttl must be positive and at most {MAX_TTL.days} days, not {p.ttl!r}")
    wanted = {pattern_in_repo(pattern, repo) for pattern in p.patterns}
    stamp = store.now()
    note = f"{HANDED} {p.agent} at {to_iso(stamp)[11:16]} UTC" + (f", thread {p.thread}" if p.thread else "")
    folder = store.top(layout.RESERVATIONS)
    with store.root_dir().locked(layout.RESERVATIONS_LOCK):
        before = directory_stamp(store.root)
        mine = [(key, r) for key, r in load_all(store) if r.agent == p.agent and r.repo == repo and not is_expired(r, stamp)]
        chosen = [(key, r) for key, r in mine if p.all or r.pattern in wanted]
        missing = sorted(wanted - {r.pattern for _, r in chosen})
        if missing:
            held = ", ".join(sorted(r.pattern for _, r in mine)) or "nothing"
            raise NotOwner(f"{p.agent} does not hold {missing[0]} in {repo} (it holds {held}); nothing was handed over", missing=missing)
        if not chosen:
            raise NotFound(f"{p.agent} holds no reservation in {repo}; nothing to hand over")
        handed = []
        for key, r in chosen:
            reason = note if not r.reason else f"{note} — {r.reason}"
            moved = msgspec.structs.replace(
                r,
                id=r.id,
                agent=p.to,
                reason=reason[:MAX_REASON],
                created_at=to_iso(stamp),
                expires_at=to_iso(stamp + ttl) if ttl is not None else r.expires_at,
            )
            data = json_encoder.encode(moved) + b"\n"
            if r.exclusive:
                folder.replace(key, data, store.sync)  # one file, one rename: held by one of them at every moment
            else:
                folder.replace(reservation_key(repo, r.pattern, p.to), data, store.sync)
                folder.unlink(key, missing_ok=True)
            handed.append(moved)
        store.sync.dir(folder.fd)
        written_through(store.root, before, [r for r in handed if r.exclusive], [(r.repo, r.pattern) for _, r in chosen if r.exclusive])
    store.emit(*(store.event("reservation", action="handed", pattern=r.pattern, repo=repo, agent=p.to, from_=p.agent) for r in handed))
    handed.sort(key=lambda r: r.pattern)
    return HandoffResult(handed=handed, to=p.to, repo=repo)


def handed_note(reason: str | None) -> str | None:
    """Who handed a reservation over, when and in which thread, as its reason says (None: it
    was never handed over); the record keeps no other trace, so the web view reads it here."""
    if not reason or not reason.startswith(HANDED):
        return None
    return reason.split(" — ", 1)[0]


def brief(sender: str, body: str, handed: list[dict], repo: str) -> str:
    """The message that goes with a handoff, written once for `relayctl handoff` and relay-mcp:
    the caller's words, then what the new owner now holds (dicts as the operation answers)."""
    held = "\n".join(f"  {r['pattern']} ({'exclusive' if r.get('exclusive', True) else 'shared'}, until {r['expires_at']})" for r in handed)
    return f"{body.rstrip()}\n\nHanded over to you by {sender}, with these reservations in {repo} (yours now; the guard refuses {sender}'s commits there):\n{held}"
