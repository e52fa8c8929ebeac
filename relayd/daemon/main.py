"""relayd's entry point: start up safely, serve until a signal, drain, exit.

Startup order matters: the store lock first (so of many daemons started at once exactly
one goes on), then the socket, then the event follower positioned at the log's end, and
only then READY=1 for systemd.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import anyio
import structlog
from anyio.abc import SocketListener

from relayd import __version__, layout
from relayd.arrival import claude_inbox, claude_peer, claude_peer_agents
from relayd.config import dedup_window
from relayd.dedup import RecentIds, ms_to_iso
from relayd.errors import RelayError
from relayd.records import Event
from relayd.store import Store, fsyncs

from .commit import GroupCommit
from .core import Core
from .events import Hub
from .lifecycle import Systemd, acquire_store_lock, bind_listener, configure_logging, inherited_listener, remove_socket, socket_file_id
from .timers import StaleWatch, collect_garbage, notice_held_mail, redeliver_owed, refresh_guard_indexes

log = structlog.get_logger()


@dataclass(frozen=True)
class Config:
    store_dir: str
    socket_path: str
    gc_interval: float = 300.0
    stale_after: float = 300.0
    retry_interval: float = 5.0
    redeliver_interval: float = 1.0
    drain_timeout: float = 5.0
    log_level: str = "info"
    ignite_queue: str | None = None  # an IGNITE queue directory to serve (relayd.ignite.queue)
    ignite_timeout: float = 300.0
    bridge_url: str | None = None  # nats://HOST:PORT: join other hosts' relayd (relayd.bridge)
    host_name: str | None = None
    bridge_seed: str | None = None  # the host's nkey seed, from --bridge-creds
    bridge_creds: str | None = None  # that file's path (shown in hints)
    max_connections: int | None = None  # None: from the descriptor limit
    idle_timeout: float = 600.0


def run(config: Config) -> int:
    _hold_signals()  # before the socket listens: a stop request from then on is a clean stop
    configure_logging(config.log_level)
    store = Store(config.store_dir)
    try:
        root = store.root_dir(create=True)
        for name in layout.TOP_DIRS:  # recover a partly created layout before serving
            store.top(name)
        lock = acquire_store_lock(root)
        try:
            sock = inherited_listener()
            activated = sock is not None
            if sock is None:
                sock = bind_listener(config.socket_path)
            file_id = None if activated else socket_file_id(config.socket_path)
            claude_inbox.listen(store.root)  # Claude Code's receipts (relayd.arrival.claude_peer)
            claude_peer_agents.start(store.root)  # every relay agent a peer in Claude Code's registry
            try:
                # asyncio, and only asyncio: connections are read through its loop.add_reader
                return anyio.run(_serve, config, store, sock, activated, backend="asyncio")
            except RelayError:
                raise  # a refusal with a sentence (the host name is taken): `error: ...`, exit 1
            except Exception:  # a bug: one structured log record, not a bare traceback
                log.exception("relayd crashed")
                return 70
            finally:
                claude_peer_agents.stop()
                claude_peer.stop()
                if not activated:
                    remove_socket(config.socket_path, file_id)
        finally:
            os.close(lock)  # releases the flock; the file stays (deleting it would race)
    finally:
        store.close()


async def _serve(config: Config, opened: Store, sock, activated: bool) -> int:
    """Serve the store `opened` (locked, its layout complete) holds, through a handle built
    whole for relayd, in the loop (its group commit needs one): the group commit makes its
    writes durable, it remembers recent message ids, and with --bridge it knows other hosts."""
    hub = Hub()
    committer = GroupCommit() if fsyncs() else None
    recent = RecentIds(dedup_window(opened))
    store = Store(opened.root, sync=committer, recent_ids=recent, remote=_bridge(config, opened, committer, hub))
    try:
        return await _serve_store(config, store, hub, recent, sock, activated)
    finally:
        store.close()


async def _serve_store(config: Config, store: Store, hub: Hub, recent: RecentIds, sock, activated: bool) -> int:
    systemd = Systemd()
    core = Core.assemble(store, hub=hub, retry_interval=config.retry_interval, max_connections=config.max_connections, idle_timeout=config.idle_timeout)
    committer, events, server, notifier = core.committer, core.events, core.server, core.notifier
    bridge = store.remote  # (the Bridge `_bridge` built, or None)
    then = notifier.on_event if bridge is None else _with_bridge(notifier.on_event, bridge)

    def on_event(event: Event) -> None:
        if event.topic == "inbox" and event.action == "message" and event.agent and event.message_id:
            recent.observed(event.id, event.agent, event.message_id, time.time_ns() // 1_000_000)
        then(event)

    events.on_event = on_event  # (nothing is delivered before events.run starts, below)
    if bridge is not None:
        server.team_ops.update(bridge.team_ops)
    stale = StaleWatch(store, config.stale_after)
    stale.start()
    stop = anyio.Event()
    refused: list[RelayError] = []  # why relayd must not go on (the bridge's host name is taken)
    async with anyio.create_task_group() as tasks:
        if committer is not None:
            tasks.start_soon(committer.run)
        await tasks.start(events.run)
        _seed_recent_ids(store, recent)  # after the log is followed: later writes arrive as events
        tasks.start_soon(notifier.run)
        tasks.start_soon(collect_garbage, store, config.gc_interval)
        tasks.start_soon(redeliver_owed, store, config.redeliver_interval)
        tasks.start_soon(notice_held_mail, store)
        tasks.start_soon(stale.run)
        tasks.start_soon(refresh_guard_indexes, store)
        tasks.start_soon(_signals, stop)
        if bridge is not None:
            tasks.start_soon(_run_bridge, bridge, stop, refused)
        if systemd.watchdog_seconds:
            tasks.start_soon(_watchdog, systemd)
        await tasks.start(server.serve, await SocketListener.from_socket(sock))
        if config.ignite_queue:
            # deferred imports: the IGNITE queue and the bridge (nats) load only when relayd is
            # started with them
            from .ignite import serve_queue

            tasks.start_soon(serve_queue, store.root, config.socket_path, config.ignite_queue, config.ignite_timeout, stop)
        systemd.notify(f"READY=1\nSTATUS=serving {store.root}\nMAINPID={os.getpid()}")
        log.info("ready", version=__version__, store=store.root, socket=config.socket_path, activated=activated, pid=os.getpid(), durable=committer is not None)
        await stop.wait()
        systemd.notify("STOPPING=1")
        log.info("draining", connections=len(server.peers), deadline=config.drain_timeout)
        server.stop_accepting()
        with anyio.move_on_after(config.drain_timeout) as waited:
            await server.all_closed.wait()
        if waited.cancelled_caught:
            log.warning("drain deadline passed, closing remaining connections", connections=len(server.peers))
        if committer is not None:
            with anyio.move_on_after(config.drain_timeout):
                await committer.flushed()
        tasks.cancel_scope.cancel()
    rounds = {"fsync_rounds": committer.batches, "fsynced_files": committer.fsynced_fds} if committer is not None else {}
    log.info("stopped", requests=server.requests, events=events.events, subscribers_dropped=hub.dropped, **rounds)
    if refused:
        raise refused[0]
    return 0


async def _run_bridge(bridge, stop: anyio.Event, refused: list[RelayError]) -> None:
    try:
        await bridge.run()
    except RelayError as exc:  # not a crash: this relayd must not run under that name
        log.error("bridge refused; stopping", error=exc.message)
        refused.append(exc)
        stop.set()


def _seed_recent_ids(store: Store, recent: RecentIds) -> None:
    """Remember the ids the inboxes received within the dedup window, so a send retried
    across a restart of relayd still finds its first copy."""
    now_ms = time.time_ns() // 1_000_000
    opened = []
    try:
        for name in store.known_agents():
            try:
                opened.append((name, store.agent_dir(name)))
            except RelayError:
                continue
        recent.seed(opened, now_ms, ms_to_iso(now_ms - recent.window_ms))
    finally:
        for _, agent in opened:
            agent.close()
    log.debug("dedup window seeded", ids=len(recent), window_s=recent.window_ms / 1000)


def _bridge(config: Config, store: Store, committer: GroupCommit | None, hub: Hub):
    """What builds the NATS bridge on the served store when --bridge was given (only then
    is nats-py imported), or None."""
    from relayd import remote

    if not config.bridge_url:
        remote.forget_state(store)  # served host-local now: direct mode stops refusing
        backlog = remote.backlog(store) if store.root_dir().exists(layout.BRIDGE) else 0
        if backlog:
            log.warning("the bridge outbox holds messages for other hosts; start relayd with --bridge to forward them", backlog=backlog)
        return None
    from relayd.bridge.service import Bridge

    def bridge(served: Store) -> Bridge:
        return Bridge(served, config.bridge_url, config.host_name or "", committer, hub, seed=config.bridge_seed, creds_path=config.bridge_creds)

    return bridge


def _with_bridge(notify, bridge):
    def call(event):
        # Mail accepted here for another host is notified there, when it arrives.
        if event.topic != "inbox" or not event.agent or bridge.host_of(event.agent) is None:
            notify(event)
        bridge.on_event(event)

    return call


_held: list[int] = []  # SIGTERM/SIGINT that came before the event loop listened for them


def _hold_signals() -> None:
    """Until `_signals` runs, a stop signal is only written down (the default action would
    kill relayd with a socket already accepting connections, and no drain)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: _held.append(number))


async def _signals(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        if _held:  # received now by the loop; what came before is handled as if it came now
            log.info("stopping", signal=signal.Signals(_held[0]).name, before_ready=True)
            stop.set()
        async for signum in received:
            if not stop.is_set():
                log.info("stopping", signal=signal.Signals(signum).name)
                stop.set()
            else:
                log.warning("second signal, exiting at once", signal=signal.Signals(signum).name)
                os._exit(128 + signum)


async def _watchdog(systemd: Systemd) -> None:
    assert systemd.watchdog_seconds is not None
    while True:
        systemd.notify("WATCHDOG=1")
        await anyio.sleep(systemd.watchdog_seconds / 2)

