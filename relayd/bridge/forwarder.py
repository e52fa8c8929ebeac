"""Mail out: the local outbox into JetStream, in order, never past an unacknowledged one.

The outbox (`relayd.remote`) holds what sends accepted for other hosts. The forwarder
reads the lines past its cursor once they are durable here, publishes each to
`relay.mail.<host>.<this host>` with `Nats-Msg-Id` = `<recipient>/<relay id>`, and moves the cursor past a line
only after JetStream's publish ack. Publishes are pipelined (many in flight) but the
cursor moves only over a prefix of acked ones, so a failure mid-way resumes at the first
message JetStream did not confirm; repeats it already had are dropped by its
de-duplication window, and the receiving relayd refuses ids it holds. When a host has as
much waiting from this one as the stream allows (a host that is down for long), the
forwarder waits and tries again; nothing leaves the outbox meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import anyio
import nats.js.errors
import structlog

from relayd import remote
from relayd.records import json_encoder
from relayd.store import Store

from . import link

log = structlog.get_logger()

PUBLISH_TIMEOUT = 5.0
IDLE_CHECK = 1.0
QUEUE_FULL = 10077  # JetStream: maximum messages per subject exceeded
QUEUE_FULL_RETRY = 2.0


class Forwarder:
    def __init__(self, store: Store, host: str, durable: Callable[[], Awaitable[None]]) -> None:
        self.store = store
        self.host = host
        self.durable = durable
        self.forwarded = 0
        self.skipped = 0
        self.waiting = False  # a recipient host's queue on the stream is full
        self._wakeup = anyio.Event()

    def poke(self) -> None:
        self._wakeup.set()

    async def run(self, js) -> None:
        while True:
            entries, end, bad = remote.pending(self.store)
            if end is None:
                remote.compact(self.store)
                with anyio.move_on_after(IDLE_CHECK):
                    await self._wakeup.wait()
                self._wakeup = anyio.Event()
                continue
            if bad:
                self.skipped += bad
                log.error("skipped damaged lines in the bridge outbox", count=bad)
            await self.durable()  # never publish what a crash here could still take back
            try:
                if self.waiting:
                    await self._publish_one(js, entries[0])  # raises QUEUE_FULL while it still is
                    self.waiting = False
                    continue
                try:
                    await self._publish(js, entries)
                except asyncio.TimeoutError:
                    # nats-py loses JetStream's error answer to a pipelined publish (it times
                    # out instead): publish the first unconfirmed one plainly, which raises
                    # that error -- or times out too, when NATS is really gone.
                    first, _, _ = remote.pending(self.store)
                    if first:
                        await self._publish_one(js, first[0])
                    continue
            except nats.js.errors.APIError as exc:
                if exc.err_code != QUEUE_FULL:
                    raise
                # The recipient host has as much waiting from us as the stream allows
                # (streams.mail_config): the rest stays in the outbox, in order, until it
                # reads some. The session goes on (mail in, the directory, reservations).
                if not self.waiting:
                    log.warning("a host has the most mail waiting from this one that the stream allows; the rest waits in the outbox", error=exc.description)
                self.waiting = True
                await anyio.sleep(QUEUE_FULL_RETRY)
                continue
            remote.write_cursor(self.store, end)
            self.forwarded += len(entries)

    async def _publish_one(self, js, pending) -> None:
        cursor, entry = pending
        await js.publish(link.mail_subject(entry.host, self.host), json_encoder.encode(entry.message), timeout=PUBLISH_TIMEOUT, stream=link.MAIL_STREAM, headers=_headers(entry))
        remote.write_cursor(self.store, cursor)
        self.forwarded += 1

    async def _publish(self, js, entries) -> None:
        futures = []
        for _, entry in entries:
            futures.append(
                await js.publish_async(
                    link.mail_subject(entry.host, self.host),
                    json_encoder.encode(entry.message),
                    stream=link.MAIL_STREAM,
                    headers=_headers(entry),
                    wait_stall=PUBLISH_TIMEOUT,
                )
            )
        acked = None
        try:
            for (cursor, _), future in zip(entries, futures):
                await asyncio.wait_for(future, PUBLISH_TIMEOUT)
                acked = cursor
        finally:
            if acked is not None and acked is not entries[-1][0]:
                remote.write_cursor(self.store, acked)  # resume after the last confirmed one
            for future in futures:
                if not future.done():
                    future.cancel()


def _headers(entry) -> dict[str, str]:
    # A message id is unique per inbox (a broadcast's copies share it), so the
    # de-duplication id names the recipient too.
    return {"Nats-Msg-Id": f"{entry.message.to}/{entry.message.id}"}
