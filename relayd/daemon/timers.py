"""Work on a clock: garbage collection, redelivery of owed messages, stale-agent detection,
the one notice about mail held back long (relayd.delivery.held).

GC runs store functions in the loop thread like any request. The redelivery sweep runs
in a worker thread on a store of its own with direct-mode fsyncs, exactly as a
`relayctl redeliver` beside relayd would (delivery.lock keeps them apart, its events reach
subscribers and notifications through the event log): absorbing many owed records
(relayd.delivery.owed) reads inboxes and writes records, which must not hold up every client's request. A stale agent is announced
once, as a `presence` event with action `stale` appended to events.jsonl (so it reaches
subscribers the same way as everything else); it is announced again only after it has
been alive in between.
"""

from __future__ import annotations

import anyio
import structlog

from relayd import ops
from relayd.agents.roster import agent_states
from relayd.errors import RelayError
from relayd.store import Store
from relayd.fsio import NoSync
from relayd.reservations import guard_index

log = structlog.get_logger()


async def collect_garbage(store: Store, every: float) -> None:
    while True:
        await anyio.sleep(every)
        try:
            result = ops.call(store, "gc", {})
        except RelayError as exc:  # (a bug in it too: ops.run reports it as Internal; the timer goes on)
            log.warning("gc failed", error=exc.message, exc_info=exc.__cause__)
        else:
            log.info("gc done", result=result)


async def redeliver_owed(store: Store, every: float) -> None:
    """The redelivery sweep (relayd.delivery.sweep) every `every` seconds; cheap when nothing is due.
    The first one also announces what writers killed while relayd was away left unannounced
    (relayd.delivery.announce); later, relayd's own sends write both, and clients fall back to direct
    mode only while relayd is away."""
    sweeper = Store(store.root, fsync=not isinstance(store.sync, NoSync), rotate_bytes=store.rotate_bytes, clock=store.clock, rand=store.rand)
    try:
        announce = True
        while True:
            await anyio.sleep(every)
            try:
                result = await anyio.to_thread.run_sync(ops.call, sweeper, "redeliver", {"announce": announce})
            except RelayError as exc:
                log.warning("redelivery sweep failed", error=exc.message, exc_info=exc.__cause__)
                continue
            announce = False
            for item in result["announced"]:
                log.warning("announced a message stored without its event", id=item["id"], to=item["to"])
            for item in result["redelivered"]:
                log.info("redelivered", id=item["id"], to=item["to"], attempt=item["attempt"], of=item["of"])
            for item in result["dead_lettered"]:
                log.warning("dead-lettered", id=item["id"], to=item["to"], attempts=item["attempts"], told=item["told"])
    finally:
        sweeper.close()


HELD_CHECK_SECONDS = 15.0  # how often relayd looks for mail held past delivery.held_notice_after


async def notice_held_mail(store: Store, every: float = HELD_CHECK_SECONDS) -> None:
    """Tell the senders of long-held mail why it waits, once (relayd.delivery.held.notice_held),
    in a worker thread on a store of its own, as the redelivery sweep runs: it reads every
    inbox with unread mail."""
    # deferred imports: relayd loads this module at start; the held-mail check only at its first tick
    from relayd.delivery.held import notice_held

    checker = Store(store.root, fsync=not isinstance(store.sync, NoSync), rotate_bytes=store.rotate_bytes, clock=store.clock, rand=store.rand)
    try:
        while True:
            await anyio.sleep(every)
            try:
                told = await anyio.to_thread.run_sync(notice_held, checker)
            except (RelayError, OSError) as exc:
                log.warning("held-mail check failed", error=str(exc))
                continue
            for notice in told:
                log.info("told a sender its mail is held", sender=notice["to"], recipient=notice["about"], ids=notice["ids"])
    finally:
        checker.close()


class StaleWatch:
    def __init__(self, store: Store, stale_after: float) -> None:
        self.store = store
        self.stale_after = stale_after
        self.stale: set[str] = set()

    def _stale_now(self) -> set[str]:
        states = agent_states(self.store, None, str(self.stale_after))
        return {s.name for s in states if not s.alive and not s.archived}

    def start(self) -> None:
        """Agents already stale when the daemon starts are not news."""
        try:
            self.stale = self._stale_now()
        except RelayError as exc:
            log.warning("stale-agent check failed", error=exc.message)

    def check(self) -> list[str]:
        now = self._stale_now()
        went_stale = sorted(now - self.stale)
        self.stale = now
        if went_stale:
            self.store.emit(*(self.store.event("presence", action="stale", agent=name) for name in went_stale))
            log.info("agents went stale", agents=went_stale)
        return went_stale

    async def run(self) -> None:
        every = min(30.0, max(0.2, self.stale_after / 4))
        while True:
            await anyio.sleep(every)
            try:
                self.check()
            except RelayError as exc:
                log.warning("stale-agent check failed", error=exc.message)


async def refresh_guard_indexes(store: Store, every: float = 1.0) -> None:
    """Keep the pre-commit guard's per-repository indexes current (relayd.reservations.guard_index), so a
    commit while relayd runs finds its index current instead of reading every reservation
    file. One stat a tick while nothing changes; after a change, once the directory has
    settled, the indexes commits have made are rebuilt in a worker thread."""
    done: list[int] | None = None
    while True:
        await anyio.sleep(every)
        stamp = guard_index.directory_stamp(store.root)
        if stamp is None or stamp == done or not guard_index.settled(stamp):
            continue
        try:
            await anyio.to_thread.run_sync(guard_index.refresh, store.root)
        except (OSError, RelayError) as exc:
            log.warning("guard index refresh failed", error=str(exc))
            continue
        done = stamp
