"""`gc` (seed 004 US-017): expired reservations, stale agents, finished commands.

* expired reservations are removed (re-checked under the reservation lock, so a fresh
  reservation that replaced an expired one in the meantime is never removed);
* agents whose heartbeat is older than `stale` are archived: `heartbeat` becomes
  `heartbeat.stale` (the next heartbeat brings them back);
* consumed and done commands older than an hour are removed with their claim markers; a
  claim left on a still-pending command for over a minute (its consumer died mid-claim)
  is removed, so the command can be claimed again;
* the redelivery sweep runs (relayd.delivery.sweep), and acknowledgements older than
  `delivery.keep_acked` are forgotten;
* with `keep` (or config.json's `gc.keep`), read messages older than that are dropped from
  rotated inboxes (`relayd.delivery.retention`);
* rotated-out unread mail in dead_letter/ older than `gc.dead_letter_keep` (30 days) goes,
  and the oldest of it while it passes `gc.dead_letter_mib` (256 MiB) (`relayd.inbox.dead_letters`).
The daemon runs it on a timer; `dry_run` only reports.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

import msgspec

from .. import layout
from ..agents.presence import archive, last_heartbeat
from ..config import load_config
from ..delivery.ack import forget_old_acks
from ..delivery.retention import Trimmed, trim_all
from ..delivery.sweep import RedeliverParams, redeliver
from ..errors import UnknownAgent, UsageError
from ..inbox.dead_letters import DeletedDeadLetter
from ..inbox.dead_letters import limits as dead_letter_limits
from ..inbox.dead_letters import trim as trim_dead_letters
from ..records import Message, Reservation, reservation_decoder
from ..registry import operation
from ..reservations.guard_index import directory_stamp, written_through
from ..reservations.reserve import expiry_test, load_all
from ..store import Store
from ..team.commands import SUFFIX as COMMAND_SUFFIX
from ..team.commands import all_commands
from ..timefmt import now, parse_duration, parse_iso

FINISHED_COMMANDS_KEPT = timedelta(hours=1)
ABANDONED_CLAIM_SECONDS = 60.0


class GcParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    dry_run: bool = False
    expired_only: bool = False  # only reservations; leave agents, commands and messages alone
    stale: str = "30m"
    keep: str | None = None  # retention for read mail in rotated inboxes; None: config.json gc.keep
    dead_letter_keep: str | None = None  # age of rotated-out unread mail kept; None: config.json (30d); "never"
    dead_letter_mib: int | None = None  # MiB of it kept; None: config.json (256)


class GcResult(msgspec.Struct, kw_only=True):
    dry_run: bool
    reservations: list[Reservation]
    agents: list[str]
    commands: list[str]
    redelivered: int = 0  # owed messages presented again (the redelivery sweep runs too)
    dead_lettered: int = 0
    messages: list[Message] = msgspec.field(default_factory=list)  # lines the sweep appended
    acks_forgotten: int = 0  # acknowledgements older than delivery.keep_acked
    trimmed: list[Trimmed] = msgspec.field(default_factory=list)  # rotated inboxes cut by the retention limit
    dead_letters: list[DeletedDeadLetter] = msgspec.field(default_factory=list)  # rotated-out unread mail deleted from dead_letter/


@operation("gc", GcParams)
def gc(store: Store, p: GcParams) -> GcResult:
    """Remove expired reservations, archive stale agents, drop finished commands older than 1h.

    With a retention limit (`keep`, else config.json gc.keep), read messages older than it
    also leave rotated inboxes (relayd.delivery.retention)."""
    stale = parse_duration(p.stale)
    reference = store.now()  # one moment for the whole collection, by the store's clock
    keep = p.keep if p.keep is not None else load_config(store).gc.keep
    cutoff = reference - parse_duration(keep) if keep else None  # checked before anything is removed
    configured = dead_letter_limits(store)
    dead_keep = p.dead_letter_keep if p.dead_letter_keep is not None else configured.dead_letter_keep
    dead_keep = None if dead_keep == "never" else dead_keep
    if dead_keep:
        parse_duration(dead_keep)  # a bad duration is refused before anything is removed
    dead_mib = p.dead_letter_mib if p.dead_letter_mib is not None else configured.dead_letter_mib
    if dead_mib < 1:
        raise UsageError("dead_letter_mib: give at least 1 (MiB)")
    removed = _expired_reservations(store, reference, p.dry_run)
    archived = [] if p.expired_only else _stale_agents(store, stale, p.dry_run)
    finished = [] if p.expired_only else _finished_commands(store, reference, p.dry_run)
    trimmed = trim_all(store, cutoff, p.dry_run) if cutoff is not None and not p.expired_only else []
    dead = [] if p.expired_only else trim_dead_letters(store, reference.timestamp(), dead_keep, dead_mib, p.dry_run)
    result = GcResult(dry_run=p.dry_run, reservations=removed, agents=archived, commands=finished, trimmed=trimmed, dead_letters=dead)
    if not p.dry_run:
        store.emit(
            *(store.event("reservation", action="expired", pattern=r.pattern, repo=r.repo, agent=r.agent) for r in removed),
            *(store.event("presence", action="stale", agent=name) for name in archived),
        )
        if not p.expired_only:
            sweep = redeliver(store, RedeliverParams())
            result.redelivered, result.dead_lettered, result.messages = len(sweep.redelivered), len(sweep.dead_lettered), sweep.messages
            result.acks_forgotten = forget_old_acks(store)
    return result


def _expired_reservations(store: Store, reference: datetime, dry_run: bool) -> list[Reservation]:
    folder = store.top(layout.RESERVATIONS)
    removed = []
    with store.root_dir().locked(layout.RESERVATIONS_LOCK):
        before = directory_stamp(store.root)
        expired = expiry_test(reference)
        for name, r in load_all(store):
            if not expired(r):
                continue
            if not dry_run:
                folder.unlink(name, missing_ok=True)
            removed.append(r)
        if removed and not dry_run:
            store.sync.dir(folder.fd)
            written_through(store.root, before, [], [(r.repo, r.pattern) for r in removed if r.exclusive])
    # A damaged reservation file holds nothing; it goes too.
    for name in folder.listdir():
        if name.endswith(".json") and not name.startswith("."):
            raw = folder.read_bytes(name)
            try:
                reservation_decoder.decode(raw or b"")
            except (msgspec.DecodeError, msgspec.ValidationError):
                if not dry_run:
                    folder.unlink(name, missing_ok=True)
    removed.sort(key=lambda r: (r.repo, r.pattern))
    return removed


def _stale_agents(store: Store, stale: timedelta, dry_run: bool) -> list[str]:
    archived = []
    for name in store.known_agents():
        try:
            agent = store.agent_dir(name)
        except UnknownAgent:
            continue
        with agent:
            if not agent.exists(layout.HEARTBEAT):
                continue  # already archived
            beat = last_heartbeat(agent)
            try:
                age = now() - parse_iso(beat) if beat else None
            except UsageError:
                age = None
            if age is not None and age <= stale:
                continue
            if not dry_run:
                if not archive(agent):
                    continue  # a heartbeat raced us and archived nothing
            archived.append(name)
    return archived


def _finished_commands(store: Store, reference, dry_run: bool) -> list[str]:
    folder = store.top(layout.COMMANDS)
    dropped = []
    for command in all_commands(store):
        if command.status == "pending":
            _reoffer_if_abandoned(folder, command.id, dry_run)
            continue
        finished_at = command.done_at or command.consumed_at or command.ts
        try:
            age = reference - parse_iso(finished_at)
        except UsageError:
            age = FINISHED_COMMANDS_KEPT
        if age < FINISHED_COMMANDS_KEPT:
            continue
        if not dry_run:
            folder.unlink(command.id + COMMAND_SUFFIX, missing_ok=True)
            folder.unlink(command.id + layout.COMMAND_CLAIM_SUFFIX, missing_ok=True)
        dropped.append(command.id)
    if not dry_run:
        # Claim markers whose command is gone.
        names = set(folder.listdir())
        for name in names:
            if name.endswith(layout.COMMAND_CLAIM_SUFFIX) and name[: -len(layout.COMMAND_CLAIM_SUFFIX)] + COMMAND_SUFFIX not in names:
                folder.unlink(name, missing_ok=True)
    return dropped


def _reoffer_if_abandoned(folder, command_id: str, dry_run: bool) -> None:
    """A claim marker on a command that is still pending long after the claim means the
    consumer died between the two steps (they are microseconds apart): offer it again."""
    marker = command_id + layout.COMMAND_CLAIM_SUFFIX
    try:
        claimed_at = os.stat(marker, dir_fd=folder.fd, follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return
    if time.time() - claimed_at > ABANDONED_CLAIM_SECONDS and not dry_run:
        folder.unlink(marker, missing_ok=True)
