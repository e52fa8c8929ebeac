"""The one client used by `relayctl` and `relay-mcp`.

`call(op, params)` sends the request to relayd when it runs. When the daemon is absent
(socket file missing, connection refused) the very same store function runs in this
process instead; any other failure is reported, never masked by a silent fallback.
"""

from __future__ import annotations

import os
from typing import Any

from . import layout, ops
from .store import Store


class Client:
    def __init__(self, store_dir: str, socket_path: str | None = None, *, fsync: bool | None = None) -> None:
        self.store_dir = os.path.abspath(store_dir)
        self.socket_path = socket_path or layout.default_socket_path(self.store_dir)
        self._fsync = fsync
        self._store: Store | None = None
        self.mode = "direct"

    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.store_dir, fsync=self._fsync)
        return self._store

    def call(self, op: str, params: dict[str, Any] | None = None) -> Any:
        """Run `op` with `params`; returns plain JSON-able data, or raises RelayError."""
        return ops.call(self.store(), op, params or {})

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
