"""The store handle: an open root directory, the durability policy and the event log.

Operations (in `relayd.agents`, `relayd.inbox`, ...) take a `Store` and do their work
through it; the daemon keeps one open for its lifetime, a client opens one per command.
A store is built whole: what an operation meets through it (how writes become durable,
relayd's recent message ids, the agents of other hosts) is given to its constructor and
never assigned afterwards, so it does not depend on which process set which field.
"""

from __future__ import annotations

import os
import stat
import time
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

import msgspec

from . import STORE_FORMAT, layout
from .errors import InvalidName, NotFound, StoreError, UnknownAgent, UnsafePath
from .fsio import DIR_MODE, Dir, NoSync, Syncer, append_file, open_appending
from .records import Event, Message, check_agent_name, json_encoder
from .timefmt import now_iso
from .ulid import new_ulid

TYPE_CHECKING = False  # (for the annotation only: direct commands that never dedup do not load relayd.dedup)
if TYPE_CHECKING:
    from .dedup import RecentIds


def fsyncs(fsync: bool | None = None) -> bool:
    """Whether a store makes its writes durable: `fsync` when given, else RELAY_FSYNC (on
    unless 0/off/false/no)."""
    if fsync is not None:
        return fsync
    return os.environ.get("RELAY_FSYNC", "1").lower() not in ("0", "off", "false", "no")


class Remote(Protocol):
    """What relayd's bridge offers the store operations (`relayd.bridge.service.Bridge`;
    the shared core asks through `relayd.remote`)."""

    host: str

    def host_of(self, name: str) -> str | None:
        """The host of a remote agent; None when `name` is not an agent of another host."""

    def remote_names(self) -> list[str]:
        """Every agent of another host, as the directory shows it now."""

    def enqueue(self, store: Store, recipient: str, messages: list[Message]) -> None:
        """Append messages for a remote agent to the outbox (durable with the send)."""

    def status(self, stale_seconds: float) -> dict[str, Any]:
        """The bridge's state for `status`: connection, backlog, remote agents."""


def _random() -> float:
    # deferred imports: random (2.5 ms of imports) only when it is drawn from; every direct
    # command loads this module
    import random

    return random.random()


class Remembered:
    """What a Store handle works out once and keeps for its life, each by the one function
    that knows it: the dedup window (relayd.config.dedup_window) and the reservation records
    last read with their directory's identity (relayd.reservations.reserve.load_all). Never
    something an operation is given: a handle without them works the same, only slower."""

    __slots__ = ("dedup_window", "reservations")

    def __init__(self) -> None:
        self.dedup_window: float | None = None
        self.reservations: tuple[list[int], tuple] | None = None


class Store:
    """One relay store directory. Not thread-safe; the daemon uses it from one thread."""

    def __init__(
        self,
        root: str,
        *,
        fsync: bool | None = None,
        sync: Syncer | None = None,
        recent_ids: RecentIds | None = None,
        remote: Callable[[Store], Remote] | None = None,
        rotate_bytes: int = layout.ROTATE_BYTES,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] | None = None,
    ) -> None:
        """`sync` makes writes durable (relayd's group commit; default: fsync at once, or
        nothing when `fsyncs(fsync)` says no); `recent_ids` are relayd's in-memory recent
        message ids (relayd.dedup; None in direct mode: the inbox tail is scanned);
        `remote` builds the agents of other hosts on this store (relayd --bridge only: the
        bridge runs operations on the very store it serves, so it is given the store)."""
        self.root = os.path.abspath(root)
        self.rotate_bytes = rotate_bytes
        # The times the store keeps (redelivery waits, reservation expiries, held mail) read
        # the clock, and jitter reads rand, so tests can drive them exactly.
        self.clock = clock
        self.rand = rand or _random  # (random is imported on first use: most commands never jitter)
        self.sync: Syncer = sync if sync is not None else Syncer() if fsyncs(fsync) else NoSync()
        self._root: Dir | None = None
        self._subdirs: dict[str, Dir] = {}
        self.recent_ids = recent_ids
        self.remembered = Remembered()
        self._appending: dict[str, tuple[int, int, int]] = {}  # name -> (fd, st_dev, st_ino): see append_fd
        # Last: the bridge may use the store while it is built (it records its state).
        self.remote: Remote | None = remote(self) if remote is not None else None

    # -- directories -----------------------------------------------------------------
    def root_dir(self, create: bool = True) -> Dir:
        """The root, created (0700, with the standard layout) on first use."""
        if self._root is None:
            existed = os.path.isdir(self.root)
            if not existed and os.path.lexists(self.root):
                raise StoreError(f"cannot use {self.root} as the store: it exists and is not a directory")
            if not existed and not create:
                raise FileNotFoundError(self.root)
            try:
                self._root = Dir.open_root(self.root, create=create)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise StoreError(f"cannot open store {self.root}: {exc.strerror or exc}") from exc
            if not existed:
                os.chmod(self.root, DIR_MODE)
                self._lay_out()
            self._refuse_planted_event_log()
        return self._root

    def _refuse_planted_event_log(self) -> None:
        """Every mutation ends by appending to the event log; finding a symlink there only
        then would leave the mutation done and reported as failed, so look first."""
        assert self._root is not None
        try:
            self._root.refuse_non_regular(layout.EVENTS, layout.EVENTS_LOCK)
        except UnsafePath:
            self._root.close()
            self._root = None
            raise

    def _lay_out(self) -> None:
        root = self.root_dir()
        for name in layout.TOP_DIRS:
            root.subdir(name, create=True, sync=self.sync).close()
        if not root.exists(layout.FORMAT_FILE):
            root.replace(layout.FORMAT_FILE, f"{STORE_FORMAT}\n".encode(), self.sync)

    def top(self, name: str) -> Dir:
        """A top-level directory (agents/, reservations/, ...), kept open and shared."""
        found = self._subdirs.get(name)
        if found is None:
            found = self.root_dir().subdir(name, create=True, sync=self.sync)
            self._subdirs[name] = found
        return found

    def top_if_exists(self, name: str) -> Dir | None:
        """A top-level directory for looking only: None when a store made before it existed
        lacks it (looking must not create, and must work on a read-only store)."""
        if name not in self._subdirs and not self.root_dir().exists(name):
            return None
        return self.top(name)

    def forget(self, name: str) -> None:
        """Close a cached top-level directory (after it was replaced, e.g. by reset)."""
        opened = self._subdirs.pop(name, None)
        if opened is not None:
            opened.close()

    def require_existing(self) -> None:
        """For operations that only look: a missing store is an error, not created."""
        if self._root is None and not os.path.isdir(self.root):
            raise NotFound(f"no relay store at {self.root}; create it with 'relayctl init' (or check --dir / RELAY_DIR)")

    def agent_dir(self, name: str) -> Dir:
        """The directory of a registered agent; the caller closes it."""
        check_agent_name(name)
        self.require_existing()  # no agent can exist there; do not create a store to say so
        try:
            return self.top(layout.AGENTS).subdir(name)
        except FileNotFoundError:
            raise self.unknown_agent(name) from None

    def is_agent(self, name: str) -> bool:
        """Registered: a real directory (never a symlink) under agents/ holding meta.json.

        One lookup, so a send does not pay for listing every agent."""
        agents = self.top(layout.AGENTS)
        try:
            if not stat.S_ISDIR(os.stat(name, dir_fd=agents.fd, follow_symlinks=False).st_mode):
                return False
            return stat.S_ISREG(os.stat(f"{name}/{layout.META}", dir_fd=agents.fd).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def is_known_agent(self, name: str) -> bool:
        """Registered here, or (relayd --bridge) on another host of the team."""
        return self.is_agent(name) or (self.remote is not None and self.remote.host_of(name) is not None)

    def records(self, top: str, decoder: msgspec.json.Decoder) -> list[tuple[str, Any]]:
        """Every readable `*.json` record in a top-level directory, by file name.

        Temp files (dot names) are skipped, and so are damaged files: one broken
        hand-edited file must not hide the others.
        """
        found = []
        for name, raw in self.top(top).read_listed(".json"):
            try:
                found.append((name, decoder.decode(raw)))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
        return found

    def known_agents(self) -> list[str]:
        names = []
        for entry in self.top(layout.AGENTS).listdir():
            try:
                check_agent_name(entry)
            except InvalidName:
                continue
            if self.is_agent(entry):
                names.append(entry)
        return sorted(names)

    def unknown_agent(self, name: str) -> UnknownAgent:
        known = self.known_agents()
        listed = ", ".join(known) if known else "none registered yet (use 'relayctl register NAME')"
        return UnknownAgent(f"unknown agent {name!r}; known agents: {listed}", agent=name, known=known)

    # -- the event log ---------------------------------------------------------------
    def emit(self, *events: Event, durable: bool = True) -> None:
        """Append events to `events.jsonl` in one write (the daemon publishes from it)."""
        if not events:
            return
        payload = b"".join(json_encoder.encode(event) + b"\n" for event in events)
        root = self.root_dir()
        with root.locked(layout.EVENTS_LOCK):
            append_file(root, layout.EVENTS, payload, self.sync, durable=durable, rotate_bytes=self.rotate_bytes, rotate=lambda _: root.rename(layout.EVENTS, layout.EVENTS_ROTATED))

    @staticmethod
    def event(topic: str, **fields: object) -> Event:
        return Event(id=new_ulid(), ts=now_iso(), topic=topic, **fields)  # type: ignore[arg-type]

    def append_fd(self, name: str) -> int:
        """An fd of the top-level log `name` opened for appending, kept open between calls
        (a busy writer saves an open and a close per line) and opened again when the name
        stands for another file now. Owned by the store: do not close it."""
        root = self.root_dir()
        try:
            info = os.stat(name, dir_fd=root.fd, follow_symlinks=False)
            key = (info.st_dev, info.st_ino)
        except FileNotFoundError:
            key = None
        cached = self._appending.get(name)
        if cached is not None and key == cached[1:]:
            return cached[0]
        if cached is not None:
            os.close(cached[0])
            del self._appending[name]
        fd, _ = open_appending(root, name, 0, self.sync)  # (a file it creates has its directory fsynced)
        opened = os.fstat(fd)
        self._appending[name] = (fd, opened.st_dev, opened.st_ino)
        return fd

    def now(self) -> datetime:
        """The store's clock as a UTC moment (see `clock`)."""
        return datetime.fromtimestamp(self.clock(), timezone.utc)

    def close(self) -> None:
        for fd, _, _ in self._appending.values():
            os.close(fd)
        self._appending.clear()
        for opened in self._subdirs.values():
            opened.close()
        self._subdirs.clear()
        if self._root is not None:
            self._root.close()
            self._root = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
