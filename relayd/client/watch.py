"""The one way to wait for something to change in a store.

Anything that reacts to the store (`read --tail`, relay-mcp's channel push, the web view,
bridges) asks a `Watch` for wake-ups and then looks at the files itself: a wake-up says
"something may have changed", never what. That keeps one rule for correctness: after every
wake-up, re-read from where you were; a spurious wake-up costs a read, a lost one costs a
message.

Where wake-ups come from:
* relayd's event stream, while a daemon serves this store (one subscription for the
  target's topics), so writes made through the daemon or directly both arrive;
* inotify on the target's directory while no daemon serves it (the directory, not the file:
  a rotation renames the file and must still be seen);
* nothing for a moment when neither is possible (the directory does not exist yet): both
  are tried again every `retry_seconds`.

The daemon is looked for again every `retry_seconds` while inotify serves. Every switch of
source (and the first call) is itself a wake-up, because changes made while nothing was
watching must be caught up on: so no wake-up is lost across a daemon restart, a rotation or
a directory that appears late.

inotify does not always say that a watched directory is gone: one removed while a file in
it is still open (relayd's IGNITE monitor holds its lock file in the queue directory) stays
alive, silent, until that file is closed, and a directory made again at its path is not
the one watched. So every `retry_seconds` the watched paths are also checked to still name
the directories watched; when one does not, they are watched afresh (a switch, so a wake-up).

Shared core: imports neither anyio nor click, so relay-mcp and relayctl start fast.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from .. import layout
from ..errors import RelayError
from ..protocol import ALL_TOPICS
from ..wire.connection import Line, Lost, connect

RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class Target:
    """What to watch: the relayd subscription that reports it and the directory holding it."""

    directory: str  # absolute
    names: frozenset[str] | None  # files in `directory` whose changes count; None: any
    topics: tuple[str, ...] = ()  # relayd topics reporting it; empty: inotify only
    agent: str | None = None  # narrows the subscription to one agent
    also: tuple[str, ...] = ()  # more directories (absolute) watched the same way, inotify only


def inbox(store_dir: str, agent: str) -> Target:
    """One agent's inbox (current and rotated file)."""
    return Target(
        os.path.join(store_dir, layout.AGENTS, agent),
        frozenset({layout.INBOX, layout.INBOX_ROTATED}),
        ("inbox",),
        agent,
    )


def event_log(store_dir: str) -> Target:
    """Every mutation of the store (`events.jsonl`)."""
    return Target(store_dir, frozenset({layout.EVENTS, layout.EVENTS_ROTATED}), (ALL_TOPICS,))


def directory(path: str) -> Target:
    """Any change to the files of a directory, inside the store or not (inotify only)."""
    return Target(os.path.abspath(path), None)


def directories(paths: list[str]) -> Target:
    """Any change to the files of several directories (inotify only); a watcher whose set of
    directories changes opens a new Watch for the new set (its first wait is the catch-up)."""
    absolute = [os.path.abspath(path) for path in paths]
    return Target(absolute[0], None, also=tuple(absolute[1:]))


class _DaemonLink:
    """A subscription on relayd's socket (a relayd.wire.connection.Line), read without blocking once
    established."""

    def __init__(self, line: Line) -> None:
        self.line = line

    @classmethod
    def open(cls, socket_path: str, store_dir: str, target: Target, client: str) -> "_DaemonLink | None":
        """A link when relayd serves `store_dir` at `socket_path`; None when it does not."""
        if not target.topics or not os.path.exists(socket_path):
            return None
        try:
            line = connect(socket_path, store_dir, client, 2.0)
        except (OSError, RelayError):
            return None  # (a relayd of another protocol version: the requests made alongside say so)
        if not isinstance(line, Line):
            return None
        try:
            line.subscribe(list(target.topics), target.agent)
        except (OSError, Lost, RelayError):
            line.close()
            return None
        line.sock.setblocking(False)
        return cls(line)

    def consume(self) -> bool:
        """True when events arrived; ConnectionError when relayd went away."""
        try:
            data = self.line.sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise ConnectionError(str(exc)) from None
        if not data:
            raise ConnectionError("relayd closed the connection")
        try:
            frames = self.line.take(data)
        except RelayError:
            raise ConnectionError("relayd sent something that is not relay's protocol") from None
        return any(frame.get("type") == "event" for frame in frames)

    def fileno(self) -> int:
        return self.line.sock.fileno()

    def close(self) -> None:
        self.line.close()


class _DirectoryWatch:
    """inotify on one directory."""

    def __init__(self, target: Target) -> None:
        # deferred imports: inotify (ctypes) only when a store directory is watched, not when
        # relayd's socket answers
        from inotify_simple import INotify, flags

        self.names = target.names
        self.inotify = INotify()
        self.identities: list[tuple[str, tuple[int, int]]] = []  # each path and the directory it named
        mask = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.MOVED_FROM | flags.DELETE | flags.CLOSE_WRITE | flags.DELETE_SELF | flags.MOVE_SELF
        try:
            for path in (target.directory, *target.also):
                # Looked at before the watch is added: when the path is replaced in between,
                # the older directory is recorded and `replaced` finds the change (the other
                # order could record the new one while the old one is watched).
                st = os.stat(path)
                self.inotify.add_watch(path, mask)
                self.identities.append((path, (st.st_dev, st.st_ino)))
        except OSError:
            self.inotify.close()
            raise

    def replaced(self) -> bool:
        """True when a watched path no longer names the directory watched (removed, or made
        again) without inotify having said so (see the module doc)."""
        for path, identity in self.identities:
            try:
                st = os.stat(path)
            except OSError:
                return True
            if (st.st_dev, st.st_ino) != identity:
                return True
        return False

    def consume(self) -> bool:
        """True when a file that counts changed; ConnectionError when the directory went away."""
        from inotify_simple import flags

        changed = False
        for event in self.inotify.read(timeout=0):
            if event.mask & (flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF):
                raise ConnectionError("the watched directory is gone")
            if self.names is None or event.name in self.names:
                changed = True
        return changed

    def fileno(self) -> int:
        return self.inotify.fileno()

    def close(self) -> None:
        self.inotify.close()


class Watch:
    """Wake-ups for one target of one store, from relayd or inotify (see the module doc).

    `wait(timeout)` blocks until something may have changed (True) or the timeout passed
    (False); iterating yields once per wake-up, forever. Not thread-safe: one owner.
    """

    def __init__(
        self,
        store_dir: str,
        target: Target,
        socket_path: str | None = None,
        *,
        client: str = "relay",
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.target = target
        self.socket_path = socket_path or layout.default_socket_path(self.store_dir)
        self.client = client
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.mode = "none"  # "daemon", "inotify" or "none": where wake-ups come from now
        self._source: _DaemonLink | _DirectoryWatch | None = None
        self._next_try = 0.0  # when to look for relayd (and, with no source, the directory) again

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else self.clock() + timeout
        while True:
            if self._switch():
                return True
            now = self.clock()
            if deadline is not None and now >= deadline:
                return False
            limits = [] if deadline is None else [deadline - now]
            if self.mode != "daemon":
                limits.append(max(0.0, self._next_try - now))
            poll_for = min(limits) if limits else None
            if self._source is None:
                time.sleep(poll_for if poll_for is not None else self.retry_seconds)
                continue
            poller = select.poll()
            poller.register(self._source.fileno(), select.POLLIN)
            if not poller.poll(None if poll_for is None else poll_for * 1000):
                continue
            try:
                if self._source.consume():
                    return True
            except ConnectionError:
                self._drop()
                return True  # caught up on once the next source is watching

    def __iter__(self) -> Iterator[None]:
        while True:
            if self.wait():
                yield

    def _switch(self) -> bool:
        """Move to the best source available; True when the source changed (a catch-up)."""
        now = self.clock()
        if self.mode == "daemon" or now < self._next_try and self._source is not None:
            return False
        if now >= self._next_try:
            self._next_try = now + self.retry_seconds
            link = _DaemonLink.open(self.socket_path, self.store_dir, self.target, self.client)
            if link is not None:
                self._drop()
                self._source, self.mode = link, "daemon"
                return True
            if isinstance(self._source, _DirectoryWatch) and self._source.replaced():
                self._drop()  # watched afresh just below, or once the directory is back
        if self._source is None:
            try:
                self._source = _DirectoryWatch(self.target)
            except OSError:
                return False  # the directory does not exist (yet): looked for again later
            self.mode = "inotify"
            return True
        return False

    def _drop(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
        if self.mode == "daemon":
            self._next_try = self.clock()  # relayd may be back at once (a restart)
        self.mode = "none"

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
