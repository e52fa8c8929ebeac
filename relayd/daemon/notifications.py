"""Triggering notifications for inbox events, off the event loop.

Notification mechanisms run commands (tmux, zellij, cmd:...), so they go to a worker
thread with their own Store handle (a Store is used by one thread only). Agents whose
mail arrives while a round is running are handled together in the next round.
"""

from __future__ import annotations

import anyio
import structlog

from relayd.notify import notify_new_messages
from relayd.records import Event
from relayd.store import Store

log = structlog.get_logger()

COALESCE_SECONDS = 0.02


class Notifier:
    def __init__(self, store_dir: str) -> None:
        self.store = Store(store_dir)
        self.waiting: set[str] = set()
        self._wakeup = anyio.Event()
        self.rounds = 0

    def on_event(self, event: Event) -> None:
        if event.topic == "inbox" and event.agent and event.action in (None, "message"):
            self.waiting.add(event.agent)
            self._wakeup.set()

    async def run(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                # Let a burst of mail gather: one round per agent instead of one per message,
                # and the work stays off the reply path of the sends that caused it.
                await anyio.sleep(COALESCE_SECONDS)
                self._wakeup = anyio.Event()
                agents = sorted(self.waiting)
                self.waiting.clear()
                await anyio.to_thread.run_sync(self._notify, agents)
                self.rounds += 1
        finally:
            self.store.close()

    def _notify(self, agents: list[str]) -> None:
        for agent in agents:
            try:
                outcomes = notify_new_messages(self.store, [agent])
            except Exception:  # one broken mechanism must not stop the others
                log.exception("notification failed", agent=agent)
                continue
            for outcome in outcomes:
                if not outcome.get("ok", True):
                    log.warning("notification failed", agent=agent, outcome=outcome)
