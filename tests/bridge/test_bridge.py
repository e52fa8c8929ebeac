"""Two hosts bridged over a real nats-server: two stores, two relayd, one JetStream.

The server runs with the authorization `relayctl bridge setup` writes, and each "host" is
a store with its own socket and its own relayd started with
`--bridge nats://127.0.0.1:PORT --bridge-creds NAME.creds`, as on two machines.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.nats_proc import NATS_SERVER, NatsServer
from relayd.store import Store
from support.relayd_proc import Daemon, RawClient
from support.cli_processes import RelayCtl
from support.waiting import wait_for
from support.bridge_hosts import REPO, TEAM, Host, Intruder, connected, hosts, nats, registered_pair, run, team_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed (.ci/run installs the Debian package)")]
pytest.importorskip("nats", reason="nats-py is not installed (pip install -e '.[test]' brings it)")


async def connect_as(server: NatsServer, host: str):
    """A NATS client holding `host`'s credentials, as any program with that file could."""
    import json

    import nats as nats_py

    with open(server.creds(host)) as fh:
        seed = json.load(fh)["seed"]
    return await nats_py.connect(server.url, nkeys_seed_str=seed, inbox_prefix=f"_INBOX.{host}", allow_reconnect=False)


def test_directory_and_messages_both_ways(hosts):
    alpha, beta = hosts
    alpha.ctl("register", "alice", "--task", "parser")
    beta.ctl("register", "bob", "--program", "codex")
    wait_for("beta to list alice on alpha", lambda: beta.sees("alice", "alpha"))
    # bob's name claim and his presence are two entries; the listing has both once he shows alive.
    remote = wait_for("alpha to list bob on beta, alive", lambda: {a["name"]: a for a in alpha.bridge()["agents"] if a["alive"]})
    assert remote["bob"]["host"] == "beta" and remote["bob"]["program"] == "codex"
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
    alpha.ctl.setup("register", name="alice")
    alpha.ctl.setup("register", name="al2")
    beta.ctl.setup("register", name="bob")
    beta.ctl.setup("register", name="bo2")
    wait_for("alpha to list both of beta's agents", lambda: alpha.sees("bob", "beta") and alpha.sees("bo2", "beta"))
    out = alpha.ctl("send", "--broadcast", "rebasing main", agent="alice").stdout
    assert "sent to 3 agents" in out
    for host, agent in ((alpha, "al2"), (beta, "bob"), (beta, "bo2")):
        got = wait_for(f"{agent}'s broadcast", lambda: host.inbox(agent))
        assert [(m.from_, m.body) for m in got] == [("alice", "rebasing main")]
    assert alpha.inbox("alice") == []


def test_racing_overlapping_exclusive_reservations_one_host_wins(hosts):
    alpha, beta = hosts
    alpha.ctl.setup("register", name="inferno")
    beta.ctl.setup("register", name="glacier")
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
    beta.ctl.setup("register", name="bob")
    team = alpha.raw()
    assert team.subscribe(["inbox"], scope="team")["scope"] == "team"
    local_only = alpha.raw()
    local_only.subscribe(["inbox"])
    local_only.sock.settimeout(1.0)
    beta.ctl.setup("send", agent="bob", to=["bob"], body="note to self")
    event = team.line()
    assert event["type"] == "event" and event["host"] == "beta" and event["agent"] == "bob" and event["subject"] == "note to self"
    with pytest.raises(OSError):
        local_only.line()  # nothing from other hosts without scope team


def test_when_relayd_is_down_direct_mode_refuses_what_needs_the_bridge(hosts):
    alpha, beta = hosts
    alpha.ctl.setup("register", name="alice")
    beta.ctl.setup("register", name="bob")
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
    alpha.ctl.setup("register", name="alice")
    beta.ctl.setup("register", name="bob")
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

    from relayd.inbox.append import deliver
    from relayd.records import Message

    alpha, beta = hosts
    alpha.ctl.setup("register", name="alice")
    beta.ctl.setup("register", name="bob")
    wait_for("beta to list alice", lambda: beta.sees("alice", "alpha"))
    assert beta.daemon.stop() == 0

    def message(n: int) -> Message:
        return Message(id=f"01M8ZZZZZZZZZZZZZZZZZZZZ{n:02d}", ts="2026-11-23T09:00:00.000Z", from_="alice", to="bob", subject=f"m{n}", body=f"m{n}")

    # Appended by a receiver that was killed before it logged the id (bridge/received.jsonl).
    with Store(beta.env["RELAY_DIR"]) as store:
        deliver(store, {"bob": [message(1)]})
    beta.start()
    wait_for("beta to connect", lambda: connected(beta))

    async def publish() -> None:
        nc = await connect_as(beta.nats, "alpha")
        js = nc.jetstream()
        # Distinct Nats-Msg-Id values: JetStream keeps them all, only relayd can refuse them.
        for n, tag in ((1, "a"), (2, "a"), (2, "b"), (3, "a")):
            await js.publish("relay.mail.beta.alpha", msgspec.json.encode(message(n)), headers={"Nats-Msg-Id": f"{message(n).id}-{tag}"})
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
    host.ctl.setup("init")
    config = Path(host.env["RELAY_DIR"]) / "config.json"
    config.write_text(json.dumps({"bridge": {"url": nats.url, "creds": nats.creds("gamma")}}))
    host.daemon = Daemon(host.env, log_path=str(host.dir / "relayd.log")).start()
    try:
        state = wait_for("the bridge to connect", lambda: connected(host) and host.bridge())
        assert state["host"] == "gamma" and state["url"] == nats.url
    finally:
        host.daemon.kill()


def test_bad_bridge_settings_are_one_line_errors(relay_env, relayctl, short_tmp):
    relayctl("init")
    relayctl("bridge", "setup", "--hosts", "alpha", "--out", str(short_tmp / "auth"))
    readable = short_tmp / "auth" / "alpha.creds"
    readable.chmod(0o644)
    damaged = short_tmp / "damaged.creds"
    damaged.write_text('{"host": "alpha"}')
    damaged.chmod(0o600)
    for args, words in (
        (["--bridge", "http://x:1"], "nats://"),
        (["--bridge", "nats://127.0.0.1:1", "--host-name", "Bad Name"], "invalid host name"),
        (["--bridge", "nats://127.0.0.1:1", "--bridge-creds", str(readable)], "readable by other users; chmod 600"),
        (["--bridge", "nats://127.0.0.1:1", "--bridge-creds", str(damaged)], "not a relay credentials file"),
        (["--bridge", "nats://127.0.0.1:1", "--bridge-creds", str(short_tmp / "missing.creds")], "No such file"),
        (["--bridge-creds", str(damaged)], "--bridge-creds goes with --bridge URL"),
    ):
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
    alpha.ctl.setup("register", name="alice")
    beta.ctl.setup("register", name="bob")
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


# -- a hostile neighbour on the same NATS server ----------------------------------------------
#
# Each attack runs with real credentials from `relayctl bridge setup`: what a client with none
# can do, and what a host's credentials (gamma's, or ghost's, which runs no relayd) can do to
# alpha and beta.


def test_a_client_without_credentials_cannot_connect(hosts, nats):
    import nats as nats_py

    async def attempt():
        client = nats_py.NATS()
        try:
            with pytest.raises(Exception) as refused:
                await client.connect(nats.url, allow_reconnect=False, connect_timeout=2)
        finally:
            await client.close()  # nats-py leaves the refused connection's socket open otherwise
        return refused.value

    refused = run(attempt())
    assert "authorization violation" in str(refused).lower()
    assert "authentication error" in nats.log()


def test_a_host_cannot_read_another_hosts_mail(hosts, nats):
    alpha, beta = registered_pair(hosts)
    assert beta.daemon.stop() == 0  # mail for trainer waits in JetStream
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="the launch code is 0000")
    wait_for("the send to leave alpha's outbox", lambda: alpha.bridge()["backlog"] == 0)

    async def snoop() -> Intruder:
        async with Intruder(nats, "gamma") as gamma:
            got = []

            async def seen(msg) -> None:
                got.append(msg)

            sub = await gamma.nc.subscribe("relay.mail.>", cb=seen)
            await gamma.nc.flush()
            js = gamma.js()
            await gamma.fails(js.get_msg("RELAY_MAIL", seq=1))
            await gamma.fails(js.add_consumer("RELAY_MAIL", durable_name="peek", filter_subject="relay.mail.beta.*"))
            await gamma.fails(js.add_consumer("RELAY_MAIL", name="mail-gamma", durable_name="mail-gamma", filter_subject="relay.mail.beta.*"))
            await gamma.fails(js.consumer_info("RELAY_MAIL", "mail-beta"))
            await sub.unsubscribe()
            assert got == []
            return gamma

    gamma = run(snoop())
    assert gamma.refused("relay.mail.>")
    assert gamma.refused("$JS.API.STREAM.MSG.GET.RELAY_MAIL")
    assert gamma.refused("$JS.API.CONSUMER.DURABLE.CREATE.RELAY_MAIL.peek")
    assert gamma.refused("$JS.API.CONSUMER.CREATE.RELAY_MAIL.mail-gamma.relay.mail.beta.*")
    beta.start()
    got = wait_for("trainer's mail after beta is back", lambda: beta.inbox("trainer"))
    assert [m.body for m in got] == ["the launch code is 0000"]


def test_injected_mail_is_checked_like_a_local_send(hosts, nats):
    import json

    alpha, beta = registered_pair(hosts)
    good = {"id": "01M8ZZZZZZZZZZZZZZZZZZZZ01", "ts": "2026-11-23T09:00:00.000Z", "from": "athena", "to": "trainer", "subject": "s", "body": "b"}
    attacks = {
        "forged sender": {**good, "from": "athena"},  # athena lives on alpha, gamma sends it
        "not a ULID": {**good, "id": "not-a-ulid-at-all"},
        "invalid sender": {**good, "from": "\x1b]52;c;cm0gLXJmIH4K\x07athena"},
        "too large": {**good, "body": "x" * 900_000},
        "tags: at most": {**good, "tags": ["t" * 5000] * 200},
        "not an agent of this host": {**good, "from": "gbot", "to": "nobody"},
    }

    async def inject() -> Intruder:
        async with Intruder(nats, "gamma") as gamma:
            js = gamma.js()
            # gamma may name agents of its own: it claims gbot (no relayd needed for that).
            await (await js.key_value("relay-agents")).put("gamma.name.gbot", b"{}")
            for n, message in enumerate(attacks.values()):
                await js.publish("relay.mail.beta.gamma", json.dumps(message).encode(), headers={"Nats-Msg-Id": f"attack-{n}"})
            # In another host's name, NATS refuses it outright.
            await gamma.fails(js.publish("relay.mail.beta.alpha", json.dumps(good).encode()))
            return gamma

    gamma = run(inject())
    assert gamma.refused("relay.mail.beta.alpha")
    undeliverable = Path(beta.env["RELAY_DIR"]) / "bridge" / "undeliverable.jsonl"
    lines = wait_for("every attack refused", lambda: undeliverable.exists() and len(undeliverable.read_text().splitlines()) >= len(attacks) and undeliverable.read_text().splitlines())
    refused = [json.loads(line) for line in lines]
    assert len(refused) == len(attacks)
    for (words, _), line in zip(attacks.items(), refused):
        assert words in line["reason"] and line["host"] == "gamma", (words, line["reason"])
    assert "forged sender: host gamma sent mail from athena, which is an agent of host alpha" in refused[0]["reason"]
    assert all(len(line["data"]) <= 4096 for line in refused)
    # Genuine mail still arrives -- from alpha, and from gamma in its own agent's name --
    # and nothing else did.
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="genuine")
    wait_for("the genuine message", lambda: beta.inbox("trainer"))

    async def own_name() -> None:
        async with Intruder(nats, "gamma") as gamma:
            await gamma.js().publish("relay.mail.beta.gamma", json.dumps({**good, "id": "01M8ZZZZZZZZZZZZZZZZZZZZ02", "from": "gbot", "body": "from gamma"}).encode())

    run(own_name())
    got = wait_for("gbot's message", lambda: len(beta.inbox("trainer")) == 2 and beta.inbox("trainer"))
    assert [(m.from_, m.body) for m in got] == [("athena", "genuine"), ("gbot", "from gamma")]
    assert len(undeliverable.read_text().splitlines()) == len(attacks)


def test_a_host_cannot_take_over_another_hosts_agent_name(hosts, nats):
    import json

    alpha, beta = registered_pair(hosts)
    evil = json.dumps({"name": "trainer", "host": "gamma"}).encode()

    async def poison() -> Intruder:
        async with Intruder(nats, "gamma") as gamma:
            kv = await gamma.js().key_value("relay-agents")
            for key in ("trainer", "beta.name.trainer", "beta.agent.trainer"):
                await gamma.fails(kv.put(key, evil))
                await gamma.fails(kv.delete(key))
            # Its own claim on the name is newer than beta's: it loses.
            await kv.put("gamma.name.trainer", b"{}")
            await kv.put("gamma.agent.trainer", evil)
            return gamma

    gamma = run(poison())
    assert gamma.refused("$KV.relay-agents.trainer") and gamma.refused("$KV.relay-agents.beta.name.trainer")
    time.sleep(1.0)  # the watchers have seen gamma's claim
    assert alpha.sees("trainer", "beta") and not alpha.sees("trainer", "gamma")
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="still yours")
    wait_for("trainer's mail on beta", lambda: [m.body for m in beta.inbox("trainer")] == ["still yours"])
    # It stays so past the owner's refresh and its restart.
    beta.daemon.kill()
    beta.start()
    wait_for("beta back", lambda: connected(beta))
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="after the restart")
    wait_for("the second one on beta", lambda: [m.body for m in beta.inbox("trainer")] == ["still yours", "after the restart"])
    assert alpha.sees("trainer", "beta")


def test_a_host_cannot_delete_another_hosts_reservation(hosts, nats):
    alpha, beta = registered_pair(hosts)
    assert alpha.raw().request("reserve", {"agent": "athena", "pattern": "src/**", "repo": REPO})["ok"]
    wait_for("beta to see it", lambda: beta.bridge()["reservations"])

    async def delete_all() -> tuple[Intruder, list[str]]:
        async with Intruder(nats, "gamma") as gamma:
            kv = await gamma.js().key_value("relay-reservations")
            keys = await kv.keys()
            for key in keys:
                await gamma.fails(kv.delete(key))
                await gamma.fails(kv.purge(key))
            return gamma, keys

    gamma, keys = run(delete_all())
    assert keys and all(key.startswith("alpha.") for key in keys)
    assert gamma.refused(f"$KV.relay-reservations.{keys[0]}")
    taken = beta.raw().request("reserve", {"agent": "trainer", "pattern": "src/auth/login.py", "repo": REPO})
    assert not taken["ok"] and taken["error"]["code"] == "conflict" and "on host alpha" in taken["error"]["message"]


def test_forged_and_orphaned_reservations_hold_nothing_for_long(short_tmp, relay_env):
    """A reservation entry naming a host other than its key's holds nothing; one of a host
    that runs no relayd (ghost) leaves with the bucket's max age, while live hosts' stay."""
    import asyncio
    import json

    from relayd.bridge.streams import provision_server

    server = team_server(short_tmp, relay_env)
    try:
        forever = {"id": "x", "agent": "phantom", "pattern": "**", "repo": REPO, "exclusive": True, "created_at": "2026-11-23T09:00:00.000Z", "expires_at": "2099-01-01T00:00:00.000Z"}

        async def bucket() -> None:
            # The operator gave the bucket a short max age (relayd keeps what it finds).
            await provision_server(server.url, server.setup_dir, ttls={"relay-reservations": 5})

        async def plant() -> None:
            async with Intruder(server, "ghost") as ghost:
                kv = await ghost.js().key_value("relay-reservations")
                await kv.put("ghost.aaaa", json.dumps({**forever, "host": "ghost"}).encode())
                await kv.put("ghost.bbbb", json.dumps({**forever, "agent": "nobody", "host": "nowhere"}).encode())

        asyncio.run(bucket())
        made = [Host(short_tmp, "alpha", server, relay_env), Host(short_tmp, "beta", server, relay_env)]
        for host in made:
            host.ctl.setup("init")
            host.start()
        try:
            alpha, beta = registered_pair(made)
            asyncio.run(plant())
            blocked = alpha.raw().request("reserve", {"agent": "athena", "pattern": "src/**", "repo": REPO})
            assert not blocked["ok"] and "phantom holds **" in blocked["error"]["message"] and "on host ghost" in blocked["error"]["message"]
            assert "nobody" not in blocked["error"]["message"]  # the entry naming another host holds nothing
            granted = wait_for("ghost's entry to expire", lambda: alpha.raw().request("reserve", {"agent": "athena", "pattern": "src/**", "repo": REPO})["ok"], timeout=30, every=0.5)
            assert granted
            time.sleep(6)  # longer than the max age: alpha rewrites its own entry meanwhile
            refused = beta.raw().request("reserve", {"agent": "trainer", "pattern": "src/a.py", "repo": REPO})
            assert not refused["ok"] and "athena holds src/**" in refused["error"]["message"]
        finally:
            for host in made:
                host.daemon.kill()
    finally:
        server.kill()


def test_a_host_cannot_delete_or_steal_another_hosts_mail_consumer(hosts, nats):
    alpha, beta = registered_pair(hosts)

    async def sabotage() -> Intruder:
        from nats.js import api

        async with Intruder(nats, "gamma") as gamma:
            js = gamma.js()
            await gamma.fails(js.delete_consumer("RELAY_MAIL", "mail-beta"))
            for config in (
                api.ConsumerConfig(name="thief", durable_name="thief", filter_subject="relay.mail.beta.*", ack_policy=api.AckPolicy.EXPLICIT),
                api.ConsumerConfig(name="mail-beta", durable_name="mail-beta", filter_subject="relay.mail.beta.*", ack_policy=api.AckPolicy.EXPLICIT),
                api.ConsumerConfig(filter_subject="relay.mail.beta.*", ack_policy=api.AckPolicy.EXPLICIT),
            ):
                await gamma.fails(js.add_consumer("RELAY_MAIL", config))
            await gamma.fails(gamma.nc.request("$JS.ACK.RELAY_MAIL.mail-beta.1.1.1.1.1.0", b"+ACK", timeout=1))
            return gamma

    gamma = run(sabotage())
    assert gamma.refused("$JS.API.CONSUMER.DELETE.RELAY_MAIL.mail-beta")
    assert gamma.refused("$JS.API.CONSUMER.CREATE.RELAY_MAIL.thief.relay.mail.beta.*")
    assert gamma.refused("$JS.API.CONSUMER.CREATE.RELAY_MAIL")
    for n in range(20):
        alpha.ctl.setup("send", agent="athena", to=["trainer"], body=f"m{n}")
    wait_for("all 20 on beta", lambda: [m.body for m in beta.inbox("trainer")] == [f"m{n}" for n in range(20)])
    assert beta.bridge()["state"] == "connected"


def test_a_second_relayd_with_a_taken_host_name_refuses_to_start(hosts, nats, relay_env, short_tmp):
    alpha, beta = registered_pair(hosts)
    twin = Host(short_tmp, "twin", nats, relay_env)
    twin.ctl.setup("init")
    twin.ctl.setup("register", name="trainer")
    started = subprocess.run(
        [sys.executable, "-m", "relayd.daemon", "--bridge", nats.url, "--bridge-creds", beta.creds],
        env=twin.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 1, started.stderr[-2000:]
    last = started.stderr.strip().splitlines()[-1]
    assert last.startswith("error: host name 'beta' is in use by relayd pid") and "Traceback" not in started.stderr
    # beta has all of trainer's mail; the twin took none.
    for n in range(30):
        alpha.ctl.setup("send", agent="athena", to=["trainer"], body=f"m{n}")
    wait_for("all 30 on beta", lambda: len(beta.inbox("trainer")) == 30)
    assert twin.inbox("trainer") == []
    assert not (Path(twin.env["RELAY_DIR"]) / "bridge" / "undeliverable.jsonl").exists()
    # Credentials and --host-name must agree.
    mismatch = subprocess.run([sys.executable, "-m", "relayd.daemon", "--bridge", nats.url, "--bridge-creds", beta.creds, "--host-name", "alpha"], env=twin.env, capture_output=True, text=True, timeout=60)
    assert mismatch.returncode == 2 and "does not match the credentials" in mismatch.stderr


def test_forged_events_do_not_reach_team_subscribers(hosts, nats):
    import json

    alpha, beta = registered_pair(hosts)
    team = alpha.raw()
    team.subscribe(["inbox"], scope="team")
    forged = {"id": "01M8ZZZZZZZZZZZZZZZZZZZZ99", "ts": "2026-11-23T09:00:00.000Z", "topic": "inbox", "action": "message", "agent": "trainer", "from": "athena", "subject": "FORGED"}

    async def forge() -> Intruder:
        async with Intruder(nats, "gamma") as gamma:
            await gamma.nc.publish("relay.events.beta", json.dumps(forged).encode())
            # A reply aimed at the events subject carries no host's authority either.
            await gamma.nc.publish("$JS.API.INFO", b"", reply="relay.events.beta")
            await gamma.nc.flush()
            await gamma.await_refusal("relay.events.beta")
            return gamma

    gamma = run(forge())
    assert gamma.refused("relay.events.beta")
    beta.ctl.setup("send", agent="trainer", to=["trainer"], body="genuine")
    event = team.line()
    assert event["host"] == "beta" and event["subject"] == "genuine"
    team.sock.settimeout(1.0)
    with pytest.raises(OSError):
        team.line()  # nothing else arrived: no forged event, no API reply


def test_bridge_setup_writes_a_config_nats_server_starts(short_tmp, relay_env):
    import json
    import stat

    from support.nats_proc import free_port

    port = free_port()
    out = short_tmp / "team"
    shown = RelayCtl(relay_env)("bridge", "setup", "--hosts", "laptop,gpu-box", "--out", str(out), "--listen", f"127.0.0.1:{port}").stdout
    assert "laptop" in shown and "gpu-box" in shown and "--bridge-creds" in shown
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    for name in ("laptop.creds", "gpu-box.creds", "admin.creds", "auth.conf", "nats-server.conf"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    seed = json.loads((out / "laptop.creds").read_text())["seed"]
    assert seed.startswith("SU") and seed not in (out / "auth.conf").read_text()
    # Again with one more host: the keys already made stay.
    again = json.loads(RelayCtl(relay_env)("--json", "bridge", "setup", "--hosts", "laptop,gpu-box,ci", "--out", str(out)).stdout)
    assert again["created"] == ["ci"] and again["kept"] == ["laptop", "gpu-box"]
    assert json.loads((out / "laptop.creds").read_text())["seed"] == seed
    proc = subprocess.Popen([NATS_SERVER, "-c", str(out / "nats-server.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("nats-server ready", lambda: b"INFO" in _probe(port))

        async def as_laptop():
            import nats as nats_py

            nc = await nats_py.connect(f"nats://127.0.0.1:{port}", nkeys_seed_str=seed, inbox_prefix="_INBOX.laptop")
            info = await nc.jetstream().account_info()
            await nc.close()
            return info

        assert run(as_laptop()) is not None
    finally:
        proc.kill()
        proc.wait()
    bad = RelayCtl(relay_env)("bridge", "setup", "--hosts", "ok,Not Ok", "--out", str(short_tmp / "x"), check=False)
    assert bad.returncode == 1 and "invalid host name 'Not Ok'" in bad.stderr and "Traceback" not in bad.stderr


def _probe(port: int) -> bytes:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            return conn.recv(4)
    except OSError:
        return b""


def test_tls_with_a_private_ca_given_by_ssl_cert_file(short_tmp, relay_env):
    """tls:// with the server's certificate signed by the team's own CA: relayd trusts it
    only when SSL_CERT_FILE points at that CA."""
    pki = short_tmp / "pki"
    pki.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", "/CN=team CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (pki / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    auth = short_tmp / "nats-auth"
    RelayCtl(relay_env)("bridge", "setup", "--hosts", ",".join(TEAM), "--out", str(auth))
    conf = short_tmp / "tls.conf"
    conf.write_text(f'tls {{ cert_file: "{pki / "server.pem"}", key_file: "{pki / "server-key.pem"}" }}\ninclude nats-auth/auth.conf\n')
    server = NatsServer(str(short_tmp), config=str(conf))
    server.creds = lambda host: str(auth / f"{host}.creds")  # type: ignore[attr-defined]
    server.start()
    url = f"tls://127.0.0.1:{server.port}"
    RelayCtl({**relay_env, "SSL_CERT_FILE": str(pki / "ca.pem")})("bridge", "provision", "--server", url, "--dir", str(auth))
    trusting = Host(short_tmp, "alpha", server, {**relay_env, "SSL_CERT_FILE": str(pki / "ca.pem")})
    wary = Host(short_tmp, "beta", server, relay_env)
    try:
        for host in (trusting, wary):
            host.ctl.setup("init")
            host.start(url)
        state = wait_for("alpha connected over TLS", lambda: connected(trusting) and trusting.bridge())
        assert state["url"] == url
        refused = wait_for("beta's refusal of an unknown CA", lambda: beta_error(wary))
        assert "CERTIFICATE_VERIFY_FAILED" in refused and wary.bridge()["state"] != "connected"
    finally:
        for host in (trusting, wary):
            if host.daemon is not None:
                host.daemon.kill()
        server.kill()


def beta_error(host: Host) -> str | None:
    return host.bridge().get("last_error")
