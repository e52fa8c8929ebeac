"""relayd's socket server inside the test's own event loop, on a real Unix socket.

For tests of request/response semantics, where a subprocess proves nothing: the `Server`
with group commit, the event log follower and the hub -- what a request meets on its way
through relayd -- on a temporary store, started with `tg.start()` in the loop of an
`@pytest.mark.anyio` test. The test reaches it with a real client on the socket; a blocking
client (relay's own `Client`, `support.rawclient`) runs in a worker thread (`blocking`), so the
loop keeps serving meanwhile. A test that is not async (relayctl's own entry point run in
the test's thread, support.cli_inprocess) has the same server in a thread of its own
(`in_a_thread`). With `clock`, every time the store keeps (when owed mail is due, when it
was acknowledged) is read from it: a test moves it on instead of waiting. Process behaviour
(signals, crashes, start-up, locks) is tested on real relayd processes
(tests/support/relayd_proc.py).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, TypeVar

import anyio
import structlog
from anyio.abc import SocketListener
from anyio.from_thread import start_blocking_portal

from relayd.daemon.core import Core, durable_store
from relayd.daemon.lifecycle import bind_listener
from relayd.daemon.notifications import Notifier
from relayd.daemon.server import Server
from relayd.store import Store

from .waiting import wait_for

T = TypeVar("T")


@dataclass
class InProcess:
    server: Server
    store: Store
    socket_path: str
    store_dir: str
    notifier: Notifier  # (running only with `notify`)

    def sweeps(self, count: int, timeout: float = 20.0) -> None:
        """Until the notifier has run `count` more rounds (with no new mail, its retry sweeps,
        every `retry_interval`): what a test waits for instead of sleeping through them."""
        until = self.notifier.rounds + count
        wait_for(f"{count} more rounds of relayd's notifier", lambda: self.notifier.rounds >= until, timeout)


@asynccontextmanager
async def serving(store_dir: str, socket_path: str, notify: bool = False, clock: Callable[[], float] = time.time, **server_options: Any) -> AsyncIterator[InProcess]:
    """relayd's server for `store_dir` on `socket_path`, until the block ends; with `notify`,
    also its notification runner, which triggers the agents' panes or commands as mail
    arrives (register --notify) and retries held triggers every `retry_interval` seconds
    (a server option)."""
    store = durable_store(store_dir, clock)
    store.root_dir(create=True)
    core = Core.assemble(store, **server_options)
    committer, events, server = core.committer, core.events, core.server
    if notify:
        events.on_event = core.notifier.on_event
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(committer.run)
            await tasks.start(events.run)
            if notify:
                tasks.start_soon(core.notifier.run)
            await tasks.start(server.serve, await SocketListener.from_socket(bind_listener(socket_path)))
            try:
                yield InProcess(server, store, socket_path, store.root, core.notifier)
            finally:
                server.stop_accepting()
                with anyio.move_on_after(5):
                    await server.all_closed.wait()
                tasks.cancel_scope.cancel()
    finally:
        store.close()
        if os.path.exists(socket_path):
            os.unlink(socket_path)


@contextmanager
def in_a_thread(store_dir: str, socket_path: str, **options: Any) -> Iterator[InProcess]:
    """`serving`, in a thread with its own event loop, for a test that is not async. relayd's
    log goes to the test process's own stderr, never into the stdout of a relayctl run in
    this process meanwhile; the test's failure is raised as it is, not inside the server's
    task group."""
    kept = structlog.get_config()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.__stderr__))
    failure: BaseException | None = None
    try:
        with start_blocking_portal("asyncio") as portal, portal.wrap_async_context_manager(serving(store_dir, socket_path, **options)) as served:
            try:
                yield served
            except BaseException as exc:
                failure = exc
    finally:
        structlog.configure(**kept)
    if failure is not None:
        raise failure


def snapshot(root: str, leave_out: Callable[[str], bool] = lambda relative: False) -> dict[str, bytes]:
    """Every file of a store by relative path (what 'nothing written' compares), but those
    `leave_out` names: never read, since relayd may replace or remove them meanwhile."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            relative = os.path.relpath(path, root)
            if not leave_out(relative) and not os.path.islink(path) and os.path.isfile(path):
                files[relative] = Path(path).read_bytes()
    return files


async def blocking(func: Callable[..., T], *args: Any) -> T:
    """Run a blocking client call in a worker thread while the loop serves it."""
    return await anyio.to_thread.run_sync(func, *args)
