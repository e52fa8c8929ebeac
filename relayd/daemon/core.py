"""relayd's request path, assembled in one place: group commit (for a durable store), the
event-log follower and its hub, the socket server wired to both, and the notification
runner, whose reports end a request's wait for its recipients' announcements.

`relayd` (main.py) builds its bridge and timers around it and feeds the notification
runner its events; tests/support/inproc.py runs it alone in a test's own event loop (the
runner only when a test asks). Either way a request meets the same objects, wired the same
way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from relayd.fsio import NoSync
from relayd.store import Store

from .commit import GroupCommit
from .events import EventLog, Hub
from .notifications import RETRY_SECONDS, Notifier
from .server import Server


@dataclass
class Core:
    store: Store
    committer: GroupCommit | None  # None: a store without fsync (nothing to group)
    hub: Hub
    events: EventLog
    server: Server
    notifier: Notifier

    @classmethod
    def assemble(cls, store: Store, hub: Hub | None = None, retry_interval: float = RETRY_SECONDS, **server_options: Any) -> "Core":
        """Wire the request path for `store`, built with a GroupCommit as its syncer when
        it is durable (`durable_store`); `hub`: the one the bridge publishes to, if any.
        The caller sets `events.on_event`, which sees every event the log delivers
        (relayd's notifications and bridge: it passes the notifier's `on_event` on), and
        starts it: the committer's `run`, then `events.run`, then `server.serve` on a
        listener, and `notifier.run`."""
        if not isinstance(store.sync, (GroupCommit, NoSync)):  # (a store that fsyncs each write at once would serve, slowly, without a word)
            raise TypeError("relayd serves a store built with its group commit (durable_store) or without fsync")
        committer = store.sync if isinstance(store.sync, GroupCommit) else None
        hub = hub if hub is not None else Hub()
        events = EventLog(store.root, hub, when_durable=committer.when_durable if committer else _at_once, on_event=lambda event: None)
        server = Server(store, committer, hub, events, **server_options)
        if committer is not None:
            committer.inline_when = server.quiet  # fsync at once when nobody else is writing
            committer.collect = server.run_deferred
            committer.hold = server.expecting
            committer.held = server.answered.clear
        notifier = Notifier(store.root, retry_interval, reported=server.tracks_changed)
        return cls(store, committer, hub, events, server, notifier)


def durable_store(root: str, clock: Callable[[], float] = time.time) -> Store:
    """A store for relayd to serve whose writes are made durable by group commit (in the
    event loop: the group commit needs one); `clock`: what its times are read from."""
    return Store(root, sync=GroupCommit(), clock=clock)


def _at_once(then: Callable[[], None]) -> None:
    then()
