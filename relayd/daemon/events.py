"""Events from the log: tail `events.jsonl` with inotify and publish each line.

Every mutation, by the daemon or by a client in direct mode, is appended to
`events.jsonl`; following that file (not the daemon's own calls) is what makes direct-mode
writes visible to subscribers. Each subscriber has a bounded queue; one that falls behind
is dropped instead of slowing the others (DESIGN §3).
"""

from __future__ import annotations

import asyncio
import os
from functools import partial
import stat
from typing import Callable, Iterator

import anyio
import msgspec
import structlog
from anyio.streams.memory import MemoryObjectSendStream
from inotify_simple import INotify, flags

from relayd import layout, protocol
from relayd.fsio import complete_end, complete_lines
from relayd.records import Event, event_decoder

log = structlog.get_logger()

QUEUE_EVENTS = 4096  # per subscriber; a reader this far behind is dropped


class _IdOnly(msgspec.Struct):
    id: str = ""


_id_decoder = msgspec.json.Decoder(_IdOnly)


class Subscriber:
    __slots__ = ("topics", "agent", "queue", "drop", "dropped", "team", "direct")

    def __init__(
        self,
        topics: list[str],
        agent: str | None,
        queue: MemoryObjectSendStream[bytes],
        drop: Callable[[], None],
        team: bool = False,
        direct: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.topics = frozenset(topics)
        self.agent = agent
        self.queue = queue
        self.drop = drop
        self.dropped = False
        self.team = team  # also wants other hosts' events (scope "team", through the bridge)
        # Writes frames straight to the connection when nothing is queued ahead of them
        # (True), sparing the event pump a loop turn; False: queue them.
        self.direct = direct

    def wants(self, event: Event) -> bool:
        return event.topic in self.topics and (self.agent is None or event.agent == self.agent)


class Hub:
    """Who is subscribed to what; publishing never waits for a subscriber."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        self.dropped = 0

    def publish(self, event: Event, frame: bytes) -> None:
        self._publish(event, frame, team_only=False)

    def publish_team(self, event: Event, frame: bytes) -> None:
        """An event of another host (from the bridge): only for scope-team subscribers."""
        self._publish(event, frame, team_only=True)

    def _publish(self, event: Event, frame: bytes, team_only: bool) -> None:
        for sub in tuple(self.subscribers):
            if (team_only and not sub.team) or not sub.wants(event):
                continue
            self._deliver(sub, [frame])

    def publish_many(self, items: list[tuple[Event, bytes]]) -> None:
        """Events read together from the log: each subscriber gets its share in one write
        when it can take it straight away."""
        for sub in tuple(self.subscribers):
            frames = [frame for event, frame in items if sub.wants(event)]
            if frames:
                self._deliver(sub, frames)

    def _deliver(self, sub: Subscriber, frames: list[bytes]) -> None:
        if sub.direct is not None and sub.direct(frames[0] if len(frames) == 1 else b"".join(frames)):
            return
        for frame in frames:
            try:
                sub.queue.send_nowait(frame)
            except anyio.WouldBlock:
                self.remove(sub)
                sub.dropped = True
                self.dropped += 1
                log.warning("subscriber dropped: not reading its events", queued=QUEUE_EVENTS)
                sub.drop()
                return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.remove(sub)
                return

    def remove(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)


class EventLog:
    """Follows `events.jsonl` from its end, across rotation and reset."""

    def __init__(self, root: str, hub: Hub, when_durable: Callable[[Callable[[], None]], None], on_event: Callable[[Event], None]) -> None:
        self.root = root
        self.path = os.path.join(root, layout.EVENTS)
        self.hub = hub
        # Runs a function once everything written so far is durable (right away with no
        # group commit): an event goes out only then, and at once then.
        self.when_durable = when_durable
        self.on_event = on_event
        self.fd = -1
        self.ino = -1
        self.published = 0  # offset in `fd` up to which every line has been published
        self.read_to = 0  # ... up to which lines are read, to publish once durable
        self.events = 0

    def _open_current(self) -> bool:
        """Follow the log file now at `path`. A planted symlink, FIFO or directory there is
        not followed: its inode is remembered so `read_new` does not retry it in a loop
        (sends are refused by `Store.emit` until the log is a plain file again)."""
        fd = _open_log(self.path)
        if fd < 0:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            try:
                self.ino = os.stat(self.path, follow_symlinks=False).st_ino
            except OSError:
                self.ino = -1
            self.published = self.read_to = 0
            if fd == _REFUSED:
                log.error("events.jsonl is not a regular file; not following it", path=self.path)
            return False
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.ino, self.published, self.read_to = fd, os.fstat(fd).st_ino, 0, 0
        return True

    def start_at_end(self) -> None:
        if self._open_current():
            # After the last complete line: an unfinished one is published once its newline arrives.
            self.published = self.read_to = complete_end(self.fd)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        watcher = INotify(nonblocking=True)
        try:
            watcher.add_watch(self.root, flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.MOVED_FROM | flags.DELETE)
            self.start_at_end()
            # Read in a callback of the loop, the watch registered once: a task waking per
            # append would register and unregister it with epoll each time, and switch tasks.
            failed: list[BaseException] = []
            stopped = anyio.Event()
            loop = asyncio.get_running_loop()
            loop.add_reader(watcher.fd, self._on_change, watcher.fd, failed, stopped)
            task_status.started()
            try:
                await stopped.wait()
            finally:
                loop.remove_reader(watcher.fd)
            raise failed[0]
        finally:
            watcher.close()
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def _on_change(self, fd: int, failed: list[BaseException], stopped: anyio.Event) -> None:
        try:
            try:
                os.read(fd, 64 * 1024)  # only the wake-up matters; the file says what changed
            except BlockingIOError:
                return
            self.read_new()
        except Exception as exc:  # (a bug: `run` raises it, as it did reading in a task)
            asyncio.get_running_loop().remove_reader(fd)
            failed.append(exc)
            stopped.set()

    def read_new(self) -> None:
        """Read what was appended (across rotation and reset) and publish it once durable."""
        while True:
            if self.fd >= 0:
                self._read_lines()
            try:
                now = os.stat(self.path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                return  # reset removed it; the next append creates it
            if now == self.ino:
                return
            # Rotated or recreated: what was left in the old file has just been read.
            self._open_current()

    def _read_lines(self) -> None:
        size = os.fstat(self.fd).st_size
        if size < self.read_to:
            self.published = self.read_to = size  # truncated (a torn tail was cut back)
            return
        if size == self.read_to:
            return
        lines = list(complete_lines(self.fd, self.read_to))
        if not lines:
            return
        self.read_to = lines[-1][0]
        self.when_durable(partial(self._publish, lines, self.ino))

    def _publish(self, lines: list[tuple[int, bytes]], ino: int) -> None:
        items = []
        for end, line in lines:
            try:
                items.append((event_decoder.decode(line), protocol.encode_event_line(line)))
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.warning("skipped a corrupt line in events.jsonl", offset=end - len(line) - 1)
        self.events += len(items)
        self.hub.publish_many(items)
        for event, _ in items:
            self.on_event(event)
        if ino == self.ino:  # (not rotated meanwhile: replays start after these lines)
            self.published = max(self.published, lines[-1][0])

    def replay(self, after: str, wants: Callable[[Event], bool]) -> Iterator[bytes]:
        """Event frames after the event `after`, from the rotated file and the current one,
        up to what has been published live (later ones reach the subscriber's queue).
        When `after` is no longer in the log, everything with a later id is replayed.

        The files and the end offset are fixed now, before the caller awaits anything.
        """
        sources: list[tuple[int, int | None]] = []
        rotated = _open_log(os.path.join(self.root, layout.EVENTS_ROTATED))
        if rotated >= 0:
            if os.fstat(rotated).st_ino != self.ino:
                sources.append((rotated, None))
            else:
                os.close(rotated)
        if self.fd >= 0:
            sources.append((os.dup(self.fd), self.published))
        return self._replay(sources, after, wants)

    def _replay(self, sources: list[tuple[int, int | None]], after: str, wants: Callable[[Event], bool]) -> Iterator[bytes]:
        def frame(line: bytes) -> bytes | None:
            try:
                event = event_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None
            return protocol.encode_event_line(line) if wants(event) else None

        try:
            found = any(self._contains(fd, end, after) for fd, end in sources)
            passed = False
            for fd, end in sources:
                for _, line in complete_lines(fd, 0, end):
                    event_id = _event_id(line)
                    if found and not passed:
                        passed = event_id == after
                    elif (found or event_id > after) and (out := frame(line)) is not None:
                        yield out
        finally:
            for fd, _ in sources:
                os.close(fd)

    @staticmethod
    def _contains(fd: int, end: int | None, event_id: str) -> bool:
        needle = f'"id":"{event_id}"'.encode()
        return any(needle in line for _, line in complete_lines(fd, 0, end))


_REFUSED = -2


def _open_log(path: str) -> int:
    """A read fd on a plain event-log file; -1 when absent, `_REFUSED` when it is something
    else (non-blocking, so a FIFO cannot stall the loop)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return -1
    except OSError:
        return _REFUSED
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return _REFUSED
    return fd


def _event_id(line: bytes) -> str:
    try:
        return _id_decoder.decode(line).id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""
