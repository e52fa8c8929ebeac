"""The bridge as relayd runs it: one NATS connection, kept up, and the parts on top of it.

`Bridge` is what the store sees as `store.remote` (`relayd.remote.Remote`), what the
socket server asks to decide register / reserve / release team-wide (`team_ops`), and
what the event follower tells about every event (`on_event`). `run()` connects, and
keeps reconnecting while NATS is away; each time it is connected it starts a session —
streams and buckets set up, directory watched and published, outbox forwarded, mail
received, events exchanged — and when the connection drops, the session ends and local
work goes on: sends to remote agents wait in the outbox.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import msgspec
import nats
import structlog

from relayd import protocol, remote
from relayd.config import BudgetConfig, load_config
from relayd.errors import RelayError, Unavailable
from relayd.ops import decode_params, lookup
from relayd.protocol import Request, Response
from relayd.records import Event, Message, check_agent_name
from relayd.store import Store

from . import link, subjects
from .budget import Budget
from .directory import Directory, shown, taken
from .events import TeamEvents
from .forwarder import Forwarder
from .lease import Lease, NameTaken
from .receiver import Receiver
from .reservations import TeamReservations
from .streams import UnsafeStream

log = structlog.get_logger()


def shown_url(url: str) -> str:
    """The URL without a password or token, for logs and status."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


class Bridge:
    def __init__(self, store: Store, url: str, host: str, committer, hub, seed: str | None = None, creds_path: str | None = None) -> None:
        self.store = store
        self.url = url
        self.host = check_agent_name(host, "host name")
        self.seed = seed  # the host's nkey seed (relayd --bridge-creds), or None: the URL's own auth
        self.creds_path = creds_path
        self.committer = committer
        self.directory = Directory(store, self.host)
        self.directory.on_change = self._directory_changed
        self.lease = Lease(store, self.host)
        self.forwarder = Forwarder(store, self.host, self._all_durable)
        self.receiver = Receiver(store, self.host, self._durable, self._sender_host, Budget(_budget(store)))
        self.events = TeamEvents(self.host, hub)
        self.reservations = TeamReservations(store, self.host, lambda: self._buckets)
        self.state = "connecting"
        self.last_error: str | None = None
        self.connected_since: float | None = None
        self._agents_kv = None
        self._buckets = None
        self._lost: anyio.Event | None = None
        self._written_agents: dict[str, str] | None = None
        self.team_ops = {"register": self.register, "reserve": self.reservations.reserve, "release": self.reservations.release}
        remote.write_state(store, remote.BridgeState(host=self.host, url=shown_url(url), creds=creds_path))

    # -- relayd.remote.Remote ------------------------------------------------------------
    def host_of(self, name: str) -> str | None:
        return self.directory.host_of(name)

    def remote_names(self) -> list[str]:
        return self.directory.remote_names()

    def enqueue(self, store: Store, recipient: str, messages: list[Message]) -> None:
        host = self.directory.host_of(recipient)
        assert host is not None
        remote.append_outbox(store, host, messages)
        self.forwarder.poke()

    def status(self, stale_seconds: float = 300.0) -> dict[str, Any]:
        return {
            "host": self.host,
            "url": shown_url(self.url),
            "state": self.state,
            "last_error": self.last_error,
            "backlog": remote.backlog(self.store),
            "forwarded": self.forwarder.forwarded,
            "received": self.receiver.delivered,
            "duplicates_refused": self.receiver.duplicates,
            "refused": self.receiver.refused,
            # What each other host's mail made this host store, hold back or refuse (bridge/budget.py).
            "budget": msgspec.to_builtins(self.receiver.budget.limits),
            "from_hosts": self.receiver.budget.status(),
            "agents": self.directory.remote_states(stale_seconds),
            "reservations": sorted(({**msgspec.to_builtins(r), "reason": shown(r.reason)} for r in self.reservations.remote.values()), key=lambda r: (r["repo"], r["pattern"], r["agent"])),
            "name_conflicts": dict(self.directory.conflicts),
            # Entries of other hosts ignored here, by "<host>: <reason>" (bridge/skipped.py).
            "skipped": {"directory": dict(self.directory.skipped.counts), "reservations": dict(self.reservations.skipped.counts)},
        }

    # -- hooks ---------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        if event.topic in ("agent", "presence"):
            self.directory.changed()
        self.events.on_event(event)

    def _directory_changed(self) -> None:
        agents = {name: self.directory.host_of(name) or "" for name in self.directory.remote_names()}
        if agents == self._written_agents:
            return  # presence changed, not who is where: the state file stays as it is
        try:
            remote.write_state(self.store, remote.BridgeState(host=self.host, url=shown_url(self.url), agents=agents, creds=self.creds_path))
            self._written_agents = agents
        except RelayError as exc:
            log.warning("could not write the bridge state file", error=exc.message)

    async def register(self, request: Request, execute):
        """A name is claimed in the team directory before the local register runs."""
        name = ""
        try:
            params = decode_params(lookup("register"), request.params)
            request = msgspec.structs.replace(request, params=params)  # decoded once: ops.run takes the Struct as it is
            name = check_agent_name(params.name)
            owner = self.directory.host_of(name)
            if owner is not None:
                raise taken(name, owner)
            if self._agents_kv is None:
                if not self.store.is_agent(name):
                    raise Unavailable(
                        f"cannot register {name}: names are unique across the bridged team and the team directory (NATS at {shown_url(self.url)}) is unreachable now; try again when relayctl status shows the bridge connected"
                    )
            else:
                try:
                    await self.directory.claim(self._agents_kv, name)
                except RelayError:
                    raise
                except Exception as exc:  # NATS went away mid-claim
                    raise Unavailable(f"cannot register {name}: the team directory did not answer ({_describe(exc)}); try again") from None
        except RelayError as exc:
            self.directory.claiming.discard(name)
            return None, protocol.encode(Response(id=request.id, ok=False, error=protocol.error_body(exc)))
        try:
            return execute(request)
        finally:
            self.directory.claiming.discard(name)
            self.directory.changed()

    async def _sender_host(self, name: str) -> str | None:
        """The host that owns agent `name`: from the watched directory, or fresh from the
        bucket when the watcher has not shown the name yet (mail can outrun it)."""
        owner = self.directory.owner(name)
        if owner is None and self.directory.js is not None:
            owner = await self.directory.fresh_owner(name)
        return owner

    # -- durability, as the group commit provides it ---------------------------------------
    async def _durable(self) -> None:
        if self.committer is None:
            return  # direct fsyncs (or fsync off): already done
        batch = self.committer.pending()
        if batch is not None:
            await batch.wait()

    async def _all_durable(self) -> None:
        if self.committer is not None:
            await self.committer.flushed()

    # -- the connection ------------------------------------------------------------------
    async def run(self) -> None:
        attempt = 0
        while True:
            try:
                nc = await nats.connect(
                    self.url,
                    name=f"relayd {self.host}",
                    connect_timeout=2,
                    # Replies to this host's requests (JetStream acks, its fetched mail) come
                    # under a prefix only its credentials may subscribe to.
                    inbox_prefix=subjects.inbox_prefix(self.host),
                    nkeys_seed_str=self.seed,
                    # Reconnecting is this loop's job, with a new client each time: the
                    # client's own reconnect would send what it had buffered for the lost
                    # connection on the new one, after a message the old one lost, and
                    # the forwarder's resend of that message would land behind them.
                    allow_reconnect=False,
                    # A server that stops answering (partition) is noticed in ~10 s, not minutes.
                    ping_interval=5,
                    max_outstanding_pings=2,
                    disconnected_cb=self._disconnected,
                    closed_cb=self._disconnected,
                    error_cb=self._error,
                )
            except Exception as exc:  # refused, timed out, bad credentials: keep trying
                self._note("unreachable", exc, attempt == 0)
                await anyio.sleep(link.backoff(attempt))
                attempt = min(attempt + 1, 8)
                continue
            attempt = 0
            try:
                await self._sessions(nc)
            finally:
                await link.finish(nc.close)

    async def _sessions(self, nc) -> None:
        js = nc.jetstream(timeout=5.0)
        attempt = 0
        while True:
            if not nc.is_connected:
                self.state = "reconnecting"
                return  # run() connects again, with a new client
            lost = self._lost = anyio.Event()
            try:
                await self._session(nc, js, lost)
            except Exception as exc:  # anything a part raised ends this session; the next one starts clean
                fatal = _fatal(exc)
                if fatal is not None:
                    self.state = "stopped"
                    self.last_error = fatal.message
                    raise fatal from None
                self._note("error", exc, True)
                await anyio.sleep(link.backoff(attempt))
                attempt = min(attempt + 1, 8)
            else:
                attempt = 0
            finally:
                self._agents_kv = None
                self._buckets = None
                self.connected_since = None
                if self.state == "connected":
                    self.state = "reconnecting"

    async def _session(self, nc, js, lost: anyio.Event) -> None:
        hosts = await link.bucket(js, link.HOSTS_BUCKET)
        await self.lease.take(hosts)  # before anything that acts as this host
        try:
            await self._serve_session(nc, js, lost, hosts)
        finally:
            await self.lease.release(hosts)

    async def _serve_session(self, nc, js, lost: anyio.Event, hosts) -> None:
        await link.ensure_stream(js)
        agents = await link.bucket(js, link.AGENTS_BUCKET)
        reservations = await link.bucket(js, link.RESERVATIONS_BUCKET)
        locks = await link.bucket(js, link.LOCKS_BUCKET)
        self.directory.js = self.reservations.js = js
        async with anyio.create_task_group() as session:
            session.start_soon(self.lease.keep, hosts)
            self.directory.ready = anyio.Event()
            session.start_soon(self.directory.watch, agents)
            session.start_soon(self.reservations.watch, reservations)
            with anyio.fail_after(10):
                await self.directory.ready.wait()
            self._agents_kv = agents
            await self.reservations.reconcile(reservations)
            self._buckets = (reservations, locks)
            session.start_soon(self.directory.publish_forever, agents)
            session.start_soon(self.reservations.reconcile_forever, reservations)
            session.start_soon(self.forwarder.run, js)
            session.start_soon(self.receiver.run, js)
            await session.start(self.events.run, nc)
            self.state = "connected"
            self.last_error = None
            self.connected_since = time.time()
            log.info("bridge connected", url=shown_url(self.url), host=self.host, remote_agents=len(self.directory.remote_names()), backlog=remote.backlog(self.store))
            await lost.wait()
            session.cancel_scope.cancel()
        log.warning("bridge disconnected; sends to other hosts wait in the outbox", backlog=remote.backlog(self.store))

    async def _disconnected(self) -> None:
        if self._lost is not None:
            self._lost.set()

    async def _error(self, exc: Exception) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def _note(self, state: str, exc: BaseException, loud: bool) -> None:
        self.state = state
        text = _describe(exc)
        if loud or text != self.last_error:
            log.warning("bridge not connected; retrying", url=shown_url(self.url), state=state, error=text)
        self.last_error = text


def _budget(store: Store) -> BudgetConfig:
    """config.json's `bridge.budget`; the defaults when the file cannot be read (said once)."""
    try:
        configured = load_config(store).bridge
    except RelayError as exc:
        log.warning("config.json could not be read; the bridge's budget per host is the default", error=exc.message)
        return BudgetConfig()
    return configured.budget if configured is not None else BudgetConfig()


def _fatal(exc: BaseException) -> RelayError | None:
    """Why this relayd must stop rather than try again: its host name is taken, or a stream
    could lose mail."""
    if isinstance(exc, (NameTaken, UnsafeStream)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _fatal(inner)
            if found is not None:
                return found
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
