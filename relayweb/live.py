"""The state the page shows, kept fresh by one thread that waits on `relayd.client.watch`.

The thread owns a Watch on the store's event log (relayd's event stream, or inotify when
relayd is down), a Client and a Store. After each wake-up it rebuilds the whole state and
hands the encoded JSON to the event loop, where every open event stream picks it up. A
burst of writes costs one rebuild per `MIN_GAP`, not one per write; with nothing happening
the state is rebuilt every `REFRESH` seconds anyway, so heartbeat ages stay true.
"""

from __future__ import annotations

import asyncio
import threading
import time

import msgspec

from relayd.client import watch
from relayd.client.full import Client
from relayd.errors import RelayError
from relayd.store import Store

from .snapshot import build

MIN_GAP = 0.1
REFRESH = 5.0
TOUCH_EVERY = 60.0  # keeps the human identity's last-seen fresh while the page runs


class Live:
    def __init__(self, store_dir: str, socket_path: str | None, human: str) -> None:
        self.store_dir = store_dir
        self.socket_path = socket_path
        self.human = human
        self.version = 0
        self.payload = b"{}"
        self.changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="relay-web-live", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _publish(self, payload: bytes) -> None:
        """In the loop: the new state, and a fresh Event for the next one."""
        self.payload = payload
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def _run(self) -> None:
        with Client(self.store_dir, self.socket_path, name="relay-web") as client, Store(self.store_dir) as store, watch.Watch(
            self.store_dir, watch.event_log(self.store_dir), self.socket_path, client="relay-web"
        ) as follower:
            last_touch = 0.0
            next_refresh = 0.0
            while not self._stop.is_set():
                woke = follower.wait(timeout=0.5)
                now = time.monotonic()
                if not woke and now < next_refresh:
                    continue
                if now - last_touch >= TOUCH_EVERY:
                    last_touch = now
                    try:
                        client.call("touch", {"agent": self.human})
                    except RelayError:
                        pass  # the human identity was removed: the page still shows the team
                try:
                    state = build(client, store, self.human)
                except RelayError as exc:
                    state = {"error": exc.message}
                state["source"] = follower.mode
                payload = msgspec.json.encode(state)
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(self._publish, payload)
                except RuntimeError:
                    return  # the loop has closed: the server is gone
                next_refresh = now + REFRESH
                self._stop.wait(MIN_GAP)
