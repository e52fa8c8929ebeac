"""The full client used by `relayctl` and `relay-mcp`: the requests of
`relayd.wire.connection` (to relayd when it runs; see there when it counts as absent or
hung), and, where relayd is absent, the very same store function run in this process; plus
subscriptions.

Blocking sockets only: no event loop, so a command starts in milliseconds.
"""

from __future__ import annotations

from typing import Any, Iterator

import msgspec

from ..errors import Unavailable, UsageError
from ..store import Store
from ..wire.connection import Caller, Lost, wire_error
from .. import ops


class Client(Caller):
    def __init__(
        self,
        store_dir: str,
        socket_path: str | None = None,
        *,
        fsync: bool | None = None,
        name: str = "relayctl",
        timeout: float | None = 30.0,
        daemon: bool = True,
    ) -> None:
        """`daemon=False`: the caller has just found no relayd for this store (relayctl's
        fast path), so every call runs on the store directly without trying the socket."""
        super().__init__(store_dir, socket_path, name=name, timeout=timeout, daemon=daemon, loads=msgspec.json.decode, dumps=msgspec.json.encode)
        self._fsync = fsync
        self._store: Store | None = None

    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.store_dir, fsync=self._fsync)
        return self._store

    def _mutates(self, op: str) -> bool:
        try:
            return ops.lookup(op).mutates  # (loads every domain module only for an op not yet loaded)
        except UsageError:
            return True

    def direct(self, op: str, params: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
        self.mode = "direct"
        unread = None
        if session.get("touch") or session.get("unread"):
            # deferred imports: session bookkeeping and the pane triggers only in direct mode, and
            # only for the calls that use them (relayctl read with relayd down loads neither)
            from .. import session as bookkeeping

            result, unread = bookkeeping.run(self.store(), ops.lookup(op), params, session.get("agent"), bool(session.get("touch")), bool(session.get("unread")))
            result = msgspec.to_builtins(result)
        else:
            result = ops.call(self.store(), op, params)
        if op in APPENDING_OPS and isinstance(result, dict) and (result.get("messages") or op == "redeliver"):
            # With no daemon to react to the inbox events, whoever appended notifies; and
            # `redeliver` (run from cron without relayd) also retries triggers held back.
            from ..arrival.notify import agents_awaiting_trigger, notify_new_messages

            recipients = list(dict.fromkeys(m["to"] for m in result.get("messages", [])))
            if op == "redeliver":
                recipients = list(dict.fromkeys(recipients + agents_awaiting_trigger(self.store())))
            if recipients:
                result["notifications"] = notify_new_messages(self.store(), recipients)
        announced = None
        if session.get("announce"):
            # No relayd to announce later: this send announced (its notifications), or what
            # its recipients' tracks say now is all there is to know.
            from .. import session as bookkeeping

            announced = bookkeeping.notified(result["notifications"]) if isinstance(result, dict) and result.get("notifications") else bookkeeping.announcements(self.store(), bookkeeping.message_ids(result))[0]
        return {"result": result, "unread": unread, "announced": announced}

    # -- events ----------------------------------------------------------------------
    def subscribe(self, topics: list[str], agent: str | None = None, after: str | None = None, scope: str = "host") -> Iterator[dict[str, Any]]:
        """The `{"type":"subscribed",...}` acknowledgement, then events as dicts
        (`{"type":"event","topic":...}`), replayed ones first with `after`.

        Needs the daemon: raises Unavailable when none serves this store, and when the
        daemon goes away (the caller may fall back to watching files itself).
        """
        line = self._open()
        if line is None and self.silent:
            raise Unavailable(f"relayd at {self.socket_path} is not answering (stopped or stuck?)")
        if line is None:
            raise Unavailable(f"relayd is not running for {self.store_dir}; start it with 'relayctl daemon' (or 'relayd')")
        try:
            answer = line.subscribe(topics, agent, after, scope)
            line.sock.settimeout(None)
            yield answer
            while True:
                frame = line.receive()
                if frame.get("type") == "error":
                    raise wire_error(frame.get("error"))
                if frame.get("type") == "event":
                    yield frame
        except Lost:
            raise Unavailable("relayd closed the event stream (stopped or restarted)") from None
        finally:
            line.close()

    def close(self) -> None:
        super().close()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Operations whose answer lists the inbox lines they appended under "messages".
APPENDING_OPS = frozenset({"send", "redeliver", "dlq_retry", "gc"})

