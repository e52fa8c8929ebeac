"""Hosts bridged over a real nats-server, for the bridge's tests: each host a store and its
relayd, a nats-server that trusts only the team's hosts (set up and provisioned by relayctl
itself), an intruder holding one host's credentials, and the fixtures `nats` and `hosts`
(import them by name into a test module)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from relayd.inbox.read import read_all
from relayd.store import Store

from .cli_processes import RelayCtl
from .nats_proc import NatsServer
from .relayd_proc import Daemon, RawClient
from .waiting import wait_for

REPO = tempfile.gettempdir()  # relayctl reserve refuses a --repo that is not a directory here
TEAM = ("alpha", "beta", "gamma", "ghost")  # ghost has credentials and never runs a relayd


class Host:
    """One store + its relayd, bridged under `name`."""

    def __init__(self, root: Path, name: str, nats: NatsServer, base_env: dict[str, str]) -> None:
        self.name = name
        self.dir = root / name
        self.env = {k: v for k, v in base_env.items() if not k.startswith(("RELAY_", "OVLD_"))}
        self.env.pop("XDG_RUNTIME_DIR", None)
        self.env["RELAY_DIR"] = str(self.dir / "store")
        self.env["RELAY_SOCKET"] = str(self.dir / "relayd.sock")
        self.dir.mkdir(parents=True)
        self.ctl = RelayCtl(self.env)
        self.nats = nats
        self.daemon: Daemon | None = None

    @property
    def creds(self) -> str:
        return self.nats.creds(self.name)

    def start(self, url: str | None = None) -> "Host":
        self.daemon = Daemon(self.env, "--bridge", url or self.nats.url, "--bridge-creds", self.creds, log_path=str(self.dir / "relayd.log")).start()
        return self

    def status(self) -> dict:
        """What `relayctl --json status` shows of the bridge, asked in this process: tests poll
        it, and a relayctl process each time cost a tenth of a CPU-second a poll. The
        command's own output is tested where it is the point."""
        return self.ctl.setup("status")

    def bridge(self) -> dict:
        return self.status()["bridge"]

    def sees(self, agent: str, host: str) -> bool:
        return any(a["name"] == agent and a["host"] == host for a in self.bridge()["agents"])

    def inbox(self, agent: str) -> list:
        with Store(self.env["RELAY_DIR"]) as store:
            return read_all(store, agent).messages

    def raw(self) -> RawClient:
        assert self.daemon is not None
        return RawClient(self.daemon.socket_path)


def team_server(workdir: Path, env: dict[str, str], extra_conf: str = "", *provision: str) -> NatsServer:
    """A nats-server that trusts only the hosts of TEAM, configured by relayctl bridge setup
    (with `extra_conf` lines first), its stream and buckets made by relayctl bridge
    provision (with the options `provision`)."""
    auth = workdir / "nats-auth"
    RelayCtl(env)("bridge", "setup", "--hosts", ",".join(TEAM), "--out", str(auth))
    config = auth / "auth.conf"
    if extra_conf:
        config = workdir / "team.conf"
        config.write_text(f"{extra_conf}\ninclude nats-auth/auth.conf\n")
    server = NatsServer(str(workdir), config=str(config))
    server.creds = lambda host: str(auth / f"{host}.creds")  # type: ignore[attr-defined]
    server.setup_dir = str(auth)  # type: ignore[attr-defined]
    server.start()
    RelayCtl(env)("bridge", "provision", "--server", server.url, "--dir", str(auth), *provision)
    return server


@pytest.fixture
def nats(short_tmp, relay_env):
    server = team_server(short_tmp, relay_env)
    yield server
    server.resume() if server.proc and server.proc.poll() is None else None
    server.kill()


@pytest.fixture
def hosts(short_tmp, nats, relay_env):
    made = [Host(short_tmp, "alpha", nats, relay_env), Host(short_tmp, "beta", nats, relay_env)]
    for host in made:
        host.ctl.setup("init")
        host.start()
    for host in made:
        wait_for(f"{host.name}'s bridge to connect", lambda: connected(host))
    yield made
    for host in made:
        if host.daemon is not None:
            host.daemon.kill()


def connected(host: Host) -> bool:
    return host.bridge()["state"] == "connected"


class Intruder:
    """A NATS client with one host's credentials (or none), and the refusals NATS sent it."""

    def __init__(self, server: NatsServer, host: str | None) -> None:
        self.server = server
        self.host = host
        self.violations: list[str] = []
        self.nc = None

    async def __aenter__(self) -> "Intruder":
        import json

        import nats as nats_py

        async def noted(exc: Exception) -> None:
            self.violations.append(str(exc))

        options: dict = {"error_cb": noted, "allow_reconnect": False, "connect_timeout": 2}
        if self.host is not None:
            with open(self.server.creds(self.host)) as fh:
                options["nkeys_seed_str"] = json.load(fh)["seed"]
            options["inbox_prefix"] = f"_INBOX.{self.host}"
        self.nc = await nats_py.connect(self.server.url, **options)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    def js(self):
        return self.nc.jetstream(timeout=2.0)

    def refused(self, subject: str) -> bool:
        return any("permissions violation" in v.lower() and subject.lower() in v.lower() for v in self.violations)

    async def await_refusal(self, subject: str) -> None:
        """The server's -ERR for a plain publish arrives after the flush that sent it."""
        import asyncio

        for _ in range(100):
            if self.refused(subject):
                return
            await asyncio.sleep(0.02)

    async def fails(self, call) -> Exception | str:
        """`call` must not succeed. NATS answers a refused request with nothing, so the call
        would only end at its timeout; the server's permissions violation, which comes at
        once, ends it sooner (and the refusal stays recorded for `refused`)."""
        import asyncio

        before = len(self.violations)
        task = asyncio.ensure_future(call)
        while not task.done():
            if len(self.violations) > before:
                task.cancel()
                return self.violations[-1]
            await asyncio.wait({task}, timeout=0.01)
        if task.exception() is not None:
            return task.exception()
        raise AssertionError("the server allowed it")


def run(coro):
    import asyncio

    return asyncio.run(coro)


def registered_pair(hosts) -> tuple[Host, Host]:
    alpha, beta = hosts
    for host in hosts:  # a name is claimed team-wide, so a register waits for the bridge
        wait_for(f"{host.name}'s bridge to connect", lambda: connected(host))
    alpha.ctl.setup("register", name="athena")
    beta.ctl.setup("register", name="trainer")
    wait_for("both directories", lambda: alpha.sees("trainer", "beta") and beta.sees("athena", "alpha"))
    return alpha, beta
