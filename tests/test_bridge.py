"""Two hosts bridged over a real nats-server: two stores, two relayd, one JetStream.

Each "host" is a store with its own socket and its own relayd started with
`--bridge nats://127.0.0.1:PORT --host-name NAME`, as on two machines.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nats_proc import NATS_SERVER, NatsServer
from relayd.inbox import read_all
from relayd.store import Store
from relayd_proc import Daemon, RawClient
from conftest import RelayCtl
from waiting import wait_for

pytestmark = pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed (.ci/run installs the Debian package)")
pytest.importorskip("nats", reason="nats-py is not installed (pip install -e '.[test]' brings it)")

REPO = "/srv/shared-repo"


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

    def start(self) -> "Host":
        self.daemon = Daemon(self.env, "--bridge", self.nats.url, "--host-name", self.name, log_path=str(self.dir / "relayd.log")).start()
        return self

    def status(self) -> dict:
        import json

        return json.loads(self.ctl("--json", "status").stdout)

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


@pytest.fixture
def nats(short_tmp):
    server = NatsServer(str(short_tmp)).start()
    yield server
    server.resume() if server.proc and server.proc.poll() is None else None
    server.kill()


@pytest.fixture
def hosts(short_tmp, nats, relay_env):
    made = [Host(short_tmp, "alpha", nats, relay_env), Host(short_tmp, "beta", nats, relay_env)]
    for host in made:
        host.ctl("init")
        host.start()
    for host in made:
        wait_for(f"{host.name}'s bridge to connect", lambda: connected(host))
    yield made
    for host in made:
        if host.daemon is not None:
            host.daemon.kill()


def connected(host: Host) -> bool:
    return host.bridge()["state"] == "connected"


def test_directory_and_messages_both_ways(hosts):
    alpha, beta = hosts
    alpha.ctl("register", "alice", "--task", "parser")
    beta.ctl("register", "bob", "--program", "codex")
    wait_for("alpha to list bob on beta", lambda: alpha.sees("bob", "beta"))
    wait_for("beta to list alice on alpha", lambda: beta.sees("alice", "alpha"))

    remote = {a["name"]: a for a in alpha.bridge()["agents"]}
    assert remote["bob"]["alive"] is True and remote["bob"]["program"] == "codex"
    shown = alpha.ctl("status").stdout
    assert "bridge: connected" in shown and "as host alpha" in shown
    assert "AGENTS ON OTHER HOSTS (1 alive, 0 stale)" in shown and "@beta" in shown

    sent = alpha.ctl("--json", "send", "bob", "parser done", "--thread", "t1", agent="alice").stdout
    msg_id = __import__("json").loads(sent)["id"]
    got = wait_for("bob's mail on beta", lambda: beta.inbox("bob"))
    assert [(m.id, m.from_, m.to, m.body, m.thread) for m in got] == [(msg_id, "alice", "bob", "parser done", "t1")]
    assert "parser done" in beta.ctl("read", "--unread", agent="bob").stdout

    beta.ctl("send", "alice", "thanks", agent="bob")
    back = wait_for("alice's mail on alpha", lambda: alpha.inbox("alice"))
    assert [(m.from_, m.body) for m in back] == [("bob", "thanks")]
    wait_for("an empty outbox on both", lambda: alpha.bridge()["backlog"] == 0 and beta.bridge()["backlog"] == 0)

    # Acknowledged delivery (send --ack) is tracked per host: refused across hosts, with the reason.
    for args in (["bob", "please ack"], ["--broadcast", "please ack"]):
        refused = alpha.ctl("send", *args, "--ack", agent="alice", check=False)
        assert refused.returncode == 2 and "--ack works within one host" in refused.stderr and "bob (on beta)" in refused.stderr
    assert [m.body for m in beta.inbox("bob")] == ["parser done"]


def test_a_name_is_unique_across_hosts(hosts):
    alpha, beta = hosts
    beta.ctl("register", "bob")
    wait_for("alpha to list bob", lambda: alpha.sees("bob", "beta"))
    refused = alpha.ctl("register", "bob", check=False)
    assert refused.returncode == 1
    assert "already registered on host beta" in refused.stderr and "Traceback" not in refused.stderr
    assert not (Path(alpha.env["RELAY_DIR"]) / "agents" / "bob").exists()


def test_a_name_registered_at_the_same_moment_on_two_hosts_goes_to_one(hosts):
    alpha, beta = hosts
    for round_ in range(5):
        name = f"racer-{round_}"
        clients = [alpha.raw(), beta.raw()]
        start = threading.Barrier(2)
        answers: list[dict] = [{}, {}]

        def go(index: int) -> None:
            start.wait()
            answers[index] = clients[index].request("register", {"name": name})

        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(a["ok"] for a in answers) == [False, True], answers
        loser = answers[0] if not answers[0]["ok"] else answers[1]
        assert loser["error"]["code"] == "conflict"


def test_broadcast_reaches_every_host(hosts):
    alpha, beta = hosts
    alpha.ctl("register", "alice")
    alpha.ctl("register", "al2")
    beta.ctl("register", "bob")
    beta.ctl("register", "bo2")
    wait_for("alpha to list both of beta's agents", lambda: alpha.sees("bob", "beta") and alpha.sees("bo2", "beta"))
    out = alpha.ctl("send", "--broadcast", "rebasing main", agent="alice").stdout
    assert "sent to 3 agents" in out
    for host, agent in ((alpha, "al2"), (beta, "bob"), (beta, "bo2")):
        got = wait_for(f"{agent}'s broadcast", lambda: host.inbox(agent))
        assert [(m.from_, m.body) for m in got] == [("alice", "rebasing main")]
    assert alpha.inbox("alice") == []


def test_racing_overlapping_exclusive_reservations_one_host_wins(hosts):
    alpha, beta = hosts
    alpha.ctl("register", "inferno")
    beta.ctl("register", "glacier")
    wait_for("both directories", lambda: alpha.sees("glacier", "beta") and beta.sees("inferno", "alpha"))
    clients = [alpha.raw(), beta.raw()]
    asks = [
        {"agent": "inferno", "pattern": "src/**", "repo": REPO},
        {"agent": "glacier", "pattern": "src/auth/login.py", "repo": REPO},
    ]
    winners = []
    for round_ in range(6):
        start = threading.Barrier(2)
        answers: list[dict] = [{}, {}]

        def go(index: int) -> None:
            start.wait()
            answers[index] = clients[index].request("reserve", asks[index])

        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(a["ok"] for a in answers) == [False, True], answers
        winner = 0 if answers[0]["ok"] else 1
        loser = answers[1 - winner]
        assert loser["error"]["code"] == "conflict" and "on host" in loser["error"]["message"]
        winners.append(winner)
        released = clients[winner].request("release", {"agent": asks[winner]["agent"], "pattern": asks[winner]["pattern"], "repo": REPO})
        assert released["ok"], released
    # --check and status see the other hosts' reservations too.
    assert alpha.raw().request("reserve", {**asks[0], "pattern": "docs/**"})["ok"]
    probe = {"agent": "glacier", "pattern": "docs/a.md", "repo": REPO, "check": True}
    seen = wait_for("beta's view of alpha's docs/** reservation", lambda: beta.raw().request("reserve", probe)["result"]["conflicts"])
    assert [(c["agent"], c["pattern"], c["host"]) for c in seen] == [("inferno", "docs/**", "alpha")]
    assert "RESERVATIONS ON OTHER HOSTS (1)" in beta.ctl("status").stdout


def test_team_events_reach_subscribers_that_ask_for_them(hosts):
    alpha, beta = hosts
    beta.ctl("register", "bob")
    team = alpha.raw()
    assert team.subscribe(["inbox"], scope="team")["scope"] == "team"
    local_only = alpha.raw()
    local_only.subscribe(["inbox"])
    local_only.sock.settimeout(1.0)
    beta.ctl("send", "bob", "note to self", agent="bob")
    event = team.line()
    assert event["type"] == "event" and event["host"] == "beta" and event["agent"] == "bob" and event["subject"] == "note to self"
    with pytest.raises(OSError):
        local_only.line()  # nothing from other hosts without scope team


def test_when_relayd_is_down_direct_mode_refuses_what_needs_the_bridge(hosts):
    alpha, beta = hosts
    alpha.ctl("register", "alice")
    beta.ctl("register", "bob")
    wait_for("alpha to list bob", lambda: alpha.sees("bob", "beta"))
    assert alpha.daemon.stop() == 0
    refused = alpha.ctl("send", "bob", "hello?", agent="alice", check=False)
    assert refused.returncode == 1
    assert "bob is an agent on host beta" in refused.stderr and "relayd is not running" in refused.stderr
    reserve = alpha.ctl("reserve", "src/**", "--repo", REPO, agent="alice", check=False)
    assert reserve.returncode == 1 and "through relayd's bridge" in reserve.stderr
    assert "bridge: relayd not running" in alpha.ctl("status").stdout
    new_name = alpha.ctl("register", "al2", check=False)
    assert new_name.returncode == 1 and "unique across the bridged team" in new_name.stderr
    # Local work goes on as before.
    alpha.ctl("register", "alice", "--task", "still here")
    alpha.ctl("send", "alice", "local still works", agent="alice")
    assert [m.body for m in alpha.inbox("alice")] == ["local still works"]


def test_sends_wait_in_the_outbox_while_nats_is_down_and_go_in_order(hosts, nats):
    alpha, beta = hosts
    alpha.ctl("register", "alice")
    beta.ctl("register", "bob")
    wait_for("alpha to list bob", lambda: alpha.sees("bob", "beta"))
    nats.kill()
    wait_for("alpha to notice", lambda: not connected(alpha))
    client = alpha.raw()
    ids = []
    for n in range(30):
        reply = client.request("send", {"agent": "alice", "to": ["bob"], "body": f"queued {n}"})
        assert reply["ok"], reply
        ids.append(reply["result"]["messages"][0]["id"])
    assert alpha.bridge()["backlog"] == 30
    assert "backlog 30" in alpha.ctl("status").stdout
    nats.start()
    got = wait_for("all 30 on beta", lambda: len(beta.inbox("bob")) >= 30 and beta.inbox("bob"), timeout=30)
    assert [m.id for m in got] == ids
    wait_for("the outbox to drain", lambda: alpha.bridge()["backlog"] == 0)


def test_the_receiver_refuses_ids_it_already_holds(hosts):
    """JetStream's de-duplication window is 2 minutes; a sender that re-publishes later
    (or a receiver killed between its inbox append and its id log) must still not show
    a message twice."""
    import asyncio

    import msgspec
    import nats as nats_py

    from relayd.inbox import append_messages
    from relayd.records import Message

    alpha, beta = hosts
    beta.ctl("register", "bob")
    assert beta.daemon.stop() == 0

    def message(n: int) -> Message:
        return Message(id=f"01M8ZZZZZZZZZZZZZZZZZZZZ{n:02d}", ts="2026-11-23T09:00:00.000Z", from_="alice", to="bob", subject=f"m{n}", body=f"m{n}")

    # Appended by a receiver that was killed before it logged the id (bridge/received.jsonl).
    with Store(beta.env["RELAY_DIR"]) as store:
        append_messages(store, "bob", [message(1)])
    beta.start()
    wait_for("beta to connect", lambda: connected(beta))

    async def publish() -> None:
        nc = await nats_py.connect(beta.nats.url)
        js = nc.jetstream()
        # Distinct Nats-Msg-Id values: JetStream keeps them all, only relayd can refuse them.
        for n, tag in ((1, "a"), (2, "a"), (2, "b"), (3, "a")):
            await js.publish("relay.mail.beta", msgspec.json.encode(message(n)), headers={"Nats-Msg-Id": f"{message(n).id}-{tag}"})
        await nc.close()

    asyncio.run(publish())
    wait_for("the last one on beta", lambda: message(3).id in {m.id for m in beta.inbox("bob")})
    time.sleep(0.5)
    assert [m.id for m in beta.inbox("bob")] == [message(1).id, message(2).id, message(3).id]
    assert beta.bridge()["duplicates_refused"] == 2


def test_relayd_without_bridge_never_imports_nats(short_tmp):
    probe = "import sys, relayd.ops, relayd.daemon.main, relayd.daemon.server; relayd.ops.table(); print('nats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_bridge_settings_can_live_in_config_json(short_tmp, nats, relay_env):
    import json

    host = Host(short_tmp, "gamma", nats, relay_env)
    host.ctl("init")
    config = Path(host.env["RELAY_DIR"]) / "config.json"
    config.write_text(json.dumps({"bridge": {"url": nats.url, "host": "from-config"}}))
    host.daemon = Daemon(host.env, log_path=str(host.dir / "relayd.log")).start()
    try:
        state = wait_for("the bridge to connect", lambda: connected(host) and host.bridge())
        assert state["host"] == "from-config" and state["url"] == nats.url
    finally:
        host.daemon.kill()


def test_bad_bridge_settings_are_one_line_errors(relay_env, relayctl):
    relayctl("init")
    for args, words in ((["--bridge", "http://x:1"], "nats://"), (["--bridge", "nats://127.0.0.1:1", "--host-name", "Bad Name"], "invalid host name")):
        proc = subprocess.run([sys.executable, "-m", "relayd.daemon", *args], env=relay_env, capture_output=True, text=True, timeout=30)
        assert proc.returncode != 0 and words in proc.stderr and "Traceback" not in proc.stderr


# -- faults -------------------------------------------------------------------------------------


class Sender(threading.Thread):
    """Sends alice -> bob through alpha's relayd as fast as acks come, recording every
    acknowledged id, until stopped."""

    def __init__(self, host: Host) -> None:
        super().__init__(daemon=True)
        self.host = host
        self.acked: list[str] = []
        self.stop = threading.Event()
        self.errors = 0

    def run(self) -> None:
        client = RawClient(self.host.daemon.socket_path, timeout=30)
        n = 0
        while not self.stop.is_set() and n < 20000:
            n += 1
            reply = client.request("send", {"agent": "alice", "to": ["bob"], "body": f"m{n}"})
            if reply["ok"]:
                self.acked.append(reply["result"]["messages"][0]["id"])
            else:
                self.errors += 1
            time.sleep(0.002)


def check_exactly_once(beta: Host, acked: list[str]) -> None:
    got = [m.id for m in beta.inbox("bob")]
    counts: dict[str, int] = {}
    for i in got:
        counts[i] = counts.get(i, 0) + 1
    missing = [i for i in acked if i not in counts]
    doubled = [i for i, c in counts.items() if c > 1]
    assert not missing, f"{len(missing)} acknowledged sends never arrived, e.g. {missing[:3]}"
    assert not doubled, f"{len(doubled)} messages arrived twice, e.g. {doubled[:3]}"
    # Per recipient, mail arrives in the order it was sent.
    order = [i for i in got if i in set(acked)]
    if order != acked:
        first = next(n for n, (a, b) in enumerate(zip(order, acked)) if a != b)
        position = {i: n for n, i in enumerate(acked)}
        shown = [position[i] for i in order[max(0, first - 3) : first + 12]]
        raise AssertionError(f"mail arrived out of send order from position {first}: send positions {shown}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_faults_every_acknowledged_send_arrives_exactly_once(hosts, nats):
    alpha, beta = hosts
    alpha.ctl("register", "alice")
    beta.ctl("register", "bob")
    wait_for("alpha to list bob", lambda: alpha.sees("bob", "beta"))
    sender = Sender(alpha)
    sender.start()
    try:
        for _ in range(2):  # kill -9 nats-server mid-stream, restart it
            wait_for("mail flowing", lambda: len(beta.inbox("bob")) > len(sender.acked) // 2 > 0, timeout=30)
            nats.kill()
            time.sleep(0.5)
            nats.start()
        for _ in range(2):  # kill -9 the receiving relayd, restart it
            time.sleep(1.0)
            beta.daemon.kill()
            time.sleep(0.5)
            beta.start()
        time.sleep(1.0)  # partition: the server stops answering for 10 s
        nats.pause()
        time.sleep(10)
        queued = alpha.bridge()["backlog"]
        nats.resume()
        assert queued > 0, "sends during the partition should wait in alpha's outbox"
        time.sleep(1.0)
    finally:
        sender.stop.set()
        sender.join(60)
    assert sender.errors == 0 and len(sender.acked) > 100
    wait_for("alpha's outbox to drain", lambda: alpha.bridge()["backlog"] == 0, timeout=60)
    wait_for("every acknowledged send on beta", lambda: len({m.id for m in beta.inbox("bob")} & set(sender.acked)) == len(sender.acked), timeout=60)
    time.sleep(2.0)  # let any redelivery that is still coming arrive, so a duplicate would show
    check_exactly_once(beta, sender.acked)
