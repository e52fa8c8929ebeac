"""Triggering notifications for inbox events, off the event loop, and retrying held ones.

Notification mechanisms run commands (tmux, zellij, cmd:...), so they go to a worker
thread with their own Store handle (a Store is used by one thread only, so one round
runs at a time). Agents whose mail arrives while a round is running are handled together
in the next round.

A trigger can be held back: the pane was in copy mode, its input line held someone's
unsent text (relayd.arrival.paneinput), or the command failed. Nothing
new may arrive for that agent, so every `retry_interval` a round also sweeps the store
for agents with unread mail and no pending flag (`agents_awaiting_trigger`) and tries
them again. The pending flag keeps a retried trigger to one.

Once an agent's triggers have reported, the runner says so in the loop (`reported`): a
request waiting for its recipients' announcements (relayd.daemon.server `announced`)
reads their tracks again then, not on a timer.
"""

from __future__ import annotations

from typing import Callable

import anyio
import structlog

from relayd.arrival.notify import agents_awaiting_trigger, notify_new_messages
from relayd.records import Event
from relayd.store import Store

log = structlog.get_logger()

# A burst of mail is gathered into one round: it has ended once no mail came for QUIET_SECONDS
# (a lone message waits only that long), and a longer one is cut into rounds of COALESCE_SECONDS.
# A client's sends in a row come well under a millisecond apart, a pipelined burst in group
# commit rounds about as close; each round of a door is a turn of the agent's model.
QUIET_SECONDS = 0.004
COALESCE_SECONDS = 0.02
RETRY_SECONDS = 5.0


class Notifier:
    def __init__(self, store_dir: str, retry_interval: float = RETRY_SECONDS, reported: Callable[[], None] = lambda: None) -> None:
        self.store = Store(store_dir)
        self.retry_interval = retry_interval
        self.reported = reported  # called in the loop thread after each agent's triggers reported
        self.waiting: set[str] = set()
        self.idle: set[str] = set()  # agents whose program just went idle: triggered if mail waits
        self._wakeup = anyio.Event()
        self._arrivals = 0  # inbox events seen: whether a burst still goes on
        self.rounds = 0
        # Agent -> why its trigger is held back, so a retry that keeps failing the same
        # way is logged once, not every interval.
        self.held: dict[str, str] = {}
        # The soonest a held announcement said it can go (`retry_in`, seconds: a door's own
        # pace), seen in the last round: the next sweep comes then, not a whole interval on.
        self._retry_in: float | None = None

    def on_event(self, event: Event) -> None:
        if event.topic == "inbox" and event.agent and event.action in (None, "message"):
            self.waiting.add(event.agent)
            self._arrivals += 1
            self._wakeup.set()
        elif event.topic == "agent" and event.agent and event.action == "resumed":
            # The person resumed an exchange the loop breaker paused (relayd.arrival.budget): its
            # held announcements go now.
            self.idle.add(event.agent)
            self._wakeup.set()
        elif event.topic == "agent" and event.agent and event.action == "idle":
            # Its program is back at its prompt (relayd.arrival.program_state): a trigger held back
            # while it worked or asked goes now, not at the next retry sweep.
            self.idle.add(event.agent)
            self._wakeup.set()

    async def run(self) -> None:
        try:
            next_sweep = anyio.current_time() + self.retry_interval
            while True:
                with anyio.move_on_after(max(0.0, next_sweep - anyio.current_time())):
                    await self._wakeup.wait()
                    await self._burst_gathered()
                sweep = anyio.current_time() >= next_sweep
                if sweep:
                    next_sweep = anyio.current_time() + self.retry_interval
                self._wakeup = anyio.Event()
                agents = sorted(self.waiting)
                idle = sorted(self.idle - self.waiting)
                self.waiting.clear()
                self.idle.clear()
                await anyio.to_thread.run_sync(self._round, agents, sweep, idle)
                self.rounds += 1
                if self._retry_in is not None:
                    next_sweep = min(next_sweep, anyio.current_time() + self._retry_in)
                    self._retry_in = None
        finally:
            self.store.close()

    async def _burst_gathered(self) -> None:
        """Let a burst of mail gather: one round per agent instead of one per message, and the
        work stays off the reply path of the sends."""
        end = anyio.current_time() + COALESCE_SECONDS
        while True:
            seen = self._arrivals
            await anyio.sleep(min(QUIET_SECONDS, max(0.0, end - anyio.current_time())))
            if self._arrivals == seen or anyio.current_time() >= end:
                return

    def _round(self, agents: list[str], sweep: bool, idle: list[str] = ()) -> None:
        try:
            if sweep:
                agents = sorted(set(agents).union(agents_awaiting_trigger(self.store)))
            elif idle:
                agents = sorted(set(agents).union(agents_awaiting_trigger(self.store, idle)))
        except Exception:  # e.g. the store being reset under us: try again next time
            log.exception("looking for triggers to retry failed")
        for agent in agents:
            try:
                outcomes = notify_new_messages(self.store, [agent])
            except Exception:  # one broken mechanism must not stop the others
                log.exception("notification failed", agent=agent)
                continue
            for outcome in outcomes:
                self._report(agent, outcome)
            if outcomes:  # (their outcomes are in the delivery log now; none changed no track)
                anyio.from_thread.run_sync(self.reported)

    def _report(self, agent: str, outcome: dict) -> None:
        retry_in = outcome.get("retry_in")
        if retry_in is not None and (self._retry_in is None or retry_in < self._retry_in):
            self._retry_in = retry_in
        if outcome.get("ok", True) and not outcome.get("retry"):
            if self.held.pop(agent, None) is not None and not outcome.get("skipped"):
                log.info("held trigger delivered", agent=agent, method=outcome.get("method"))
            return
        why = outcome.get("error") or outcome.get("skipped") or "unknown"
        if self.held.get(agent) == why:
            return
        self.held[agent] = why
        if outcome.get("ok", True):
            log.info("trigger held back; retrying", agent=agent, reason=why, every=self.retry_interval)
        else:
            log.warning("notification failed; retrying", agent=agent, outcome=outcome, every=self.retry_interval)
