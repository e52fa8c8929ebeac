"""relayd --ignite-queue DIR: the IGNITE queue monitor (relayd.ignite.queue) in a worker thread.

The monitor is a client of this very daemon (its sends go through the socket, so group
commit, events and notifications are the daemon's own); it stops before the daemon drains.
"""

from __future__ import annotations

import threading

import anyio
import structlog

from relayd.client.full import Client
from relayd.ignite.queue import monitor_for

log = structlog.get_logger()
RESTART_SECONDS = 2.0


async def serve_queue(store_dir: str, socket_path: str, root: str, timeout: float, stop: anyio.Event) -> None:
    halt = threading.Event()

    def work() -> None:
        while not halt.is_set():
            try:
                with Client(store_dir, socket_path, name="relayd-ignite") as client:
                    monitor_for(client, root, timeout=timeout, log=_log).serve(halt, socket_path, wait_for_lock=True)
            except Exception:  # a bug or a vanished queue: logged, and the monitor starts again
                log.exception("ignite queue monitor failed; restarting", queue=root, after=RESTART_SECONDS)
                halt.wait(RESTART_SECONDS)

    async def halt_on_stop() -> None:
        await stop.wait()
        halt.set()

    log.info("serving ignite queue", queue=root, timeout=timeout)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(halt_on_stop)
        try:
            await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        finally:
            halt.set()
            tasks.cancel_scope.cancel()


def _log(event: str, **fields: object) -> None:
    level = "warning" if event in ("queue_busy", "queue_malformed", "queue_dead_letter", "queue_delivery_failed", "queue_file_failed", "queue_agent_unknown", "queue_pass_failed") else "info"
    getattr(log, level)(event.replace("_", " "), **fields)
