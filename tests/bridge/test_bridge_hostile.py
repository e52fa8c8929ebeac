"""A host with valid credentials that misbehaves (issue 34), against a real nats-server
configured by `relayctl bridge setup`.

Each attack is made with the credentials of ghost, the team's fourth host, which runs no
relayd: everything it does is what a compromised laptop or a buggy fork holding a
`.creds` file can do. alpha and beta are real relayd processes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from support.cli_processes import RelayCtl
from support.bridge_hosts import Intruder, connected, hosts, nats, registered_pair, run  # noqa: F401  (fixtures)
from support.cuttable_link import CuttableLink
from support.nats_proc import NATS_SERVER
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed (.ci/run installs the Debian package)")]


ATTACKER = "ghost"
GOOD = {"id": "01M8ZZZZZZZZZZZZZZZZZZZZ01", "ts": "2026-11-23T09:00:00.000Z", "from": "athena", "to": "trainer", "subject": "s", "body": "b"}


def undeliverable(host) -> list[dict]:
    path = Path(host.env["RELAY_DIR"]) / "bridge" / "undeliverable.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def session_errors(host) -> int:
    """Times the bridge's session ended on an error (each one stops mail until it is back)."""
    return Path(host.daemon.log_path).read_text(errors="replace").count("bridge not connected; retrying")


async def outcome(call) -> str:
    """What the server answered an attack: its error, or "allowed"."""
    try:
        await call
    except Exception as exc:
        return str(exc)
    return "allowed"


def hostile_shapes() -> list[bytes]:
    def shape(**fields) -> bytes:
        return json.dumps({**GOOD, **fields}).encode()

    deep = b"[" * 100_000 + b"]" * 100_000
    return [
        b"",
        b"\xff\xfe\x00garbage",
        b"null",
        b"[]",
        b'"a string"',
        b"12345",
        b"{",
        deep,
        b"{}",
        shape(**{"from": "nobody"}),  # a sender no host knows (the directory is asked afresh)
        shape(**{"from": "athena"}),  # another host's agent
        shape(**{"from": ">"}),
        shape(**{"from": "a.b.c"}),
        shape(**{"from": "ghost.name.x"}),
        shape(to="nobody-here"),
        shape(to="*"),
        shape(to="../../etc"),
        shape(id="not-a-ulid"),
        shape(id=12345),
        shape(ts="yesterday"),
        shape(ts=None),
        shape(body="x" * 300_000),
        shape(body="", subject=""),
        shape(tags=["a" * 10_000] * 50),
        shape(ack=True),
        shape(priority="whenever"),
        shape(thread={"nested": [1, 2, 3]}),
        json.dumps({**GOOD, "extra": {"deep": list(range(1000))}}).encode()[:-1],
        json.dumps([GOOD, GOOD]).encode(),
    ]


def test_hostile_messages_go_to_undeliverable_and_mail_keeps_flowing(hosts, nats):
    alpha, beta = registered_pair(hosts)
    shapes = hostile_shapes()

    async def flood() -> None:
        async with Intruder(nats, ATTACKER) as ghost:
            js = ghost.js()
            for n, data in enumerate(shapes):
                await js.publish("relay.mail.beta.ghost", data, headers={"Nats-Msg-Id": f"hostile-{n}"})

    run(flood())
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="genuine after the flood")
    got = wait_for("the genuine message behind the hostile ones", lambda: beta.inbox("trainer"), timeout=10)
    assert [(m.from_, m.body) for m in got] == [("athena", "genuine after the flood")]
    refused = wait_for("every hostile message in undeliverable.jsonl", lambda: len(undeliverable(beta)) == len(shapes) and undeliverable(beta))
    assert all(line["host"] == ATTACKER and line["reason"] for line in refused)
    assert any("no agent in the team directory" in line["reason"] for line in refused)
    # The stream never stopped: no session of beta's bridge ended on an error.
    assert session_errors(beta) == 0 and connected(beta)
    # Once more, now that the receiver has met them all: the next good one is not held up.
    run(flood())
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="and again")
    wait_for("the second genuine message", lambda: len(beta.inbox("trainer")) == 2)
    assert session_errors(beta) == 0


def test_a_forged_team_lock_holds_reservations_only_briefly(hosts, nats):
    """ghost writes the shared reservation lock once, naming alpha, held until 2100."""
    from support.bridge_hosts import REPO

    alpha, beta = registered_pair(hosts)
    forged = json.dumps({"host": "alpha", "until": 4102444800.0}).encode()

    async def forge() -> None:
        async with Intruder(nats, ATTACKER) as ghost:
            kv = await ghost.js().key_value("relay-locks")
            await kv.put("reservations", forged)

    run(forge())
    client = beta.raw()
    client.sock.settimeout(30)
    granted = client.request("reserve", {"agent": "trainer", "pattern": "src/**", "repo": REPO})
    assert granted["ok"], granted
    # The lock works as a lock again: alpha's overlapping ask is refused for the right reason.
    refused = alpha.raw().request("reserve", {"agent": "athena", "pattern": "src/a.py", "repo": REPO})
    assert not refused["ok"] and refused["error"]["code"] == "conflict" and "on host beta" in refused["error"]["message"]


def test_a_lock_entry_holds_for_the_maximum_from_its_write_whatever_it_says():
    from relayd.bridge.reservations import LEASE_SECONDS, lock_over

    now, mono = 1_000_000.0, 500.0
    assert not lock_over(written=now - 1, first_seen=mono, now_wall=now, now_mono=mono)
    assert lock_over(written=now - LEASE_SECONDS - 0.1, first_seen=mono, now_wall=now, now_mono=mono)
    # A server clock ahead of this host's: the entry still ends the maximum after we saw it.
    assert lock_over(written=now + 3600, first_seen=mono - LEASE_SECONDS - 0.1, now_wall=now, now_mono=mono)


def log_lines(host, words: str) -> int:
    return sum(words in line for line in Path(host.daemon.log_path).read_text(errors="replace").splitlines())


def test_a_roll_up_cannot_erase_the_directory_and_steal_a_name(hosts, nats):
    alpha, beta = registered_pair(hosts)
    impostor = json.dumps({"name": "trainer", "host": "beta", "program": "evil"}).encode()

    async def attack() -> str:
        async with Intruder(nats, ATTACKER) as ghost:
            js = ghost.js()
            # One publish on its own key, asking the server to drop every other entry.
            refused = await outcome(js.publish("$KV.relay-agents.ghost.name.decoy", b"{}", headers={"Nats-Rollup": "all"}))
            kv = await js.key_value("relay-agents")
            await kv.put("ghost.name.trainer", b"{}")  # a later claim: it loses
            for _ in range(3):  # an entry about beta's agent, under ghost's key
                await kv.put("ghost.agent.trainer", impostor)
            return refused

    refused = run(attack())
    beta.daemon.kill()  # the victim restarts: its claim must still be the oldest
    beta.start()
    wait_for("beta back", lambda: connected(beta))
    assert alpha.sees("trainer", "beta") and not alpha.sees("trainer", ATTACKER)
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="for the real trainer")
    wait_for("trainer's mail on beta", lambda: [m.body for m in beta.inbox("trainer")] == ["for the real trainer"])
    assert beta.sees("athena", "alpha")
    assert alpha.bridge()["agents"][0]["program"] is None  # the impostor entry was not taken
    # The entry about beta written by ghost is ignored, and logged once.
    wait_for("alpha's note of it", lambda: log_lines(alpha, "skipped a directory entry"))
    assert log_lines(alpha, "skipped a directory entry") == 1
    assert "rollup not permitted" in refused


def test_a_roll_up_cannot_erase_reservations(hosts, nats):
    from support.bridge_hosts import REPO

    alpha, beta = registered_pair(hosts)
    assert alpha.raw().request("reserve", {"agent": "athena", "pattern": "src/**", "repo": REPO})["ok"]
    wait_for("beta to see it", lambda: beta.bridge()["reservations"])

    async def attack() -> str:
        async with Intruder(nats, ATTACKER) as ghost:
            return await outcome(ghost.js().publish("$KV.relay-reservations.ghost.aaaa", b"{}", headers={"Nats-Rollup": "all"}))

    refused = run(attack())
    taken = beta.raw().request("reserve", {"agent": "trainer", "pattern": "src/auth/login.py", "repo": REPO})
    assert not taken["ok"] and taken["error"]["code"] == "conflict" and "athena holds src/**" in taken["error"]["message"] and "on host alpha" in taken["error"]["message"]
    assert "rollup not permitted" in refused


async def as_admin(server):
    """The operator's connection: the admin key relayctl bridge setup wrote."""
    import nats as nats_py

    from relayd.bridge.setup import load_admin

    return await nats_py.connect(server.url, nkeys_seed_str=load_admin(server.setup_dir).seed, inbox_prefix="_INBOX._admin", allow_reconnect=False)


def test_a_stream_that_could_lose_mail_is_refused_at_start_and_on_reconnect(hosts, nats):
    from nats.js import api

    alpha, beta = registered_pair(hosts)

    async def attack() -> list[str]:
        async with Intruder(nats, ATTACKER) as ghost:
            js = ghost.js()
            # A host may neither change the stream nor make one of its own.
            tries = [
                js.update_stream(api.StreamConfig(name="RELAY_MAIL", subjects=["relay.mail.*.*"], retention=api.RetentionPolicy.WORK_QUEUE, max_age=3)),
                js.add_stream(api.StreamConfig(name="RELAY_MAIL2", subjects=["relay.x.>"], max_age=3)),
                js.purge_stream("RELAY_MAIL"),
                js.delete_stream("KV_relay-agents"),
            ]
            return [await outcome(t) for t in tries]

    assert "allowed" not in run(attack())

    async def misconfigure() -> None:
        # What an older relay, or a mistaken operator, left: mail expiring after 3 s.
        nc = await as_admin(nats)
        js = nc.jetstream()
        config = (await js.stream_info("RELAY_MAIL")).config
        config.max_age, config.duplicate_window = 3, 3
        await js.update_stream(config)
        await nc.close()

    run(misconfigure())
    nats.kill()
    nats.start()  # both relayd reconnect and check the stream again
    for host in (alpha, beta):
        assert host.daemon.proc.wait(30) == 1
        last = Path(host.daemon.log_path).read_text().strip().splitlines()[-1]
        assert last.startswith("error: the NATS stream RELAY_MAIL has max_age 3s: mail waiting longer for its host would be deleted"), last
    # At start, too: beta refuses to run over it.
    beta.daemon = None
    import subprocess
    import sys

    started = subprocess.run([sys.executable, "-m", "relayd.daemon", "--bridge", nats.url, "--bridge-creds", beta.creds], env=beta.env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 1 and "Traceback" not in started.stderr
    assert started.stderr.strip().splitlines()[-1].startswith("error: the NATS stream RELAY_MAIL has max_age 3s")
    # provision puts it right, and mail flows again.

    shown = RelayCtl(alpha.env)("bridge", "provision", "--server", nats.url, "--dir", nats.setup_dir).stdout
    assert "RELAY_MAIL" in shown and "updated" in shown
    alpha.start()
    beta.start()
    wait_for("both back", lambda: connected(alpha) and connected(beta))
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="after provision")
    wait_for("the mail on beta", lambda: [m.body for m in beta.inbox("trainer")] == ["after provision"])


def test_every_setting_that_could_lose_or_rewrite_mail_is_named():
    import dataclasses

    pytest.importorskip("nats")
    from nats.js import api

    from relayd.bridge.streams import bucket_config, configs, mail_config, problem

    assert [problem(c) for c in configs()] == [None] * 5  # what provision makes passes
    mail, agents = mail_config(), bucket_config("relay-agents")
    for config, change, setting in (
        (mail, {"max_age": 3.0}, "max_age 3s"),
        (mail, {"retention": api.RetentionPolicy.LIMITS}, "retention limits"),
        (mail, {"subjects": ["relay.>"]}, "subjects"),
        (mail, {"allow_rollup_hdrs": True}, "allow_rollup_hdrs true"),
        (mail, {"deny_purge": False}, "deny_purge false"),
        (mail, {"deny_delete": False}, "deny_delete false"),
        (mail, {"storage": api.StorageType.MEMORY}, "storage memory"),
        (mail, {"max_bytes": 1 << 20, "discard": api.DiscardPolicy.OLD}, "discard old with max_bytes"),
        (mail, {"discard_new_per_subject": False}, "max_msgs_per_subject 10000 without discard_new_per_subject"),
        (agents, {"max_age": 60.0}, "max_age 60s: name claims would expire"),
        (agents, {"allow_rollup_hdrs": True}, "allow_rollup_hdrs true"),
        (agents, {"max_msgs": 100, "discard": api.DiscardPolicy.OLD}, "discard old with max_msgs"),
    ):
        found = problem(dataclasses.replace(config, **change))
        assert found is not None and setting in found, (change, found)


def test_one_host_cannot_fill_the_server(short_tmp, relay_env):
    """ghost mails hosts that do not exist (a new name each time, so no per-subject cap
    applies), and one that never reads its mail (gamma), with 100 KB messages: more than
    the server's 16 MB store holds."""
    from support.bridge_hosts import Host, team_server

    server = team_server(short_tmp, relay_env, "jetstream { max_file_store: 16MB }", "--max-queued", "20")
    made = [Host(short_tmp, "alpha", server, relay_env), Host(short_tmp, "beta", server, relay_env)]
    try:
        for host in made:
            host.ctl.setup("init")
            host.start()
        alpha, beta = registered_pair(made)
        big = json.dumps({**GOOD, "from": "nobody", "body": "x" * 100_000}).encode()

        async def flood(to: str) -> tuple[int, str]:
            async with Intruder(server, ATTACKER) as ghost:
                js = ghost.js()
                for n in range(250):
                    subject = f"relay.mail.{to}{n}.ghost" if to == "nowhere" else f"relay.mail.{to}.ghost"
                    answer = await outcome(js.publish(subject, big, headers={"Nats-Msg-Id": f"flood-{to}-{n}"}))
                    if answer != "allowed":
                        return n, answer
                return 250, "allowed"

        stored, nowhere = run(flood("nowhere"))
        queued, full = run(flood("gamma"))
        for n in range(20):
            alpha.ctl.setup("send", agent="athena", to=["trainer"], body=f"real {n}")
        wait_for("all 20 real messages on beta", lambda: [m.body for m in beta.inbox("trainer")] == [f"real {n}" for n in range(20)], timeout=30)
        assert stored == 0, f"{stored} messages for a host that does not exist were stored ({nowhere})"
        assert queued == 20 and "maximum messages per subject exceeded" in full, (queued, full)
        assert connected(alpha) and connected(beta)
        # A genuine sender meets the same cap when its recipient is down for long: the rest
        # waits in its outbox, its session goes on, and nothing is lost.
        beta.daemon.kill()
        for n in range(20, 50):
            alpha.ctl.setup("send", agent="athena", to=["trainer"], body=f"real {n}")
        wait_for("alpha to meet the cap", lambda: log_lines(alpha, "the most mail waiting"))
        assert alpha.bridge()["backlog"] > 0 and session_errors(alpha) == 0
        beta.start()
        wait_for("all 50 on beta, in order", lambda: [m.body for m in beta.inbox("trainer")] == [f"real {n}" for n in range(50)], timeout=30)
    finally:
        for host in made:
            if host.daemon is not None:
                host.daemon.kill()
        server.kill()


def test_a_copy_of_a_hosts_store_gets_none_of_its_mail(hosts, nats, relay_env, short_tmp):
    """A relayd started on a copy of beta's store (its store id too), with beta's name and
    credentials, while beta runs."""
    import shutil
    import subprocess
    import sys

    from support.bridge_hosts import Host

    alpha, beta = registered_pair(hosts)
    twin = Host(short_tmp, "twin", nats, relay_env)
    shutil.copytree(beta.env["RELAY_DIR"], twin.env["RELAY_DIR"], symlinks=True, ignore=shutil.ignore_patterns("*.lock", "*.sock"))
    log = open(twin.dir / "relayd.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "relayd.daemon", "--bridge", nats.url, "--bridge-creds", beta.creds], env=twin.env, stdout=log, stderr=log)
    try:
        client = alpha.raw()
        for n in range(300):
            assert client.request("send", {"agent": "athena", "to": ["trainer"], "body": f"m{n}"})["ok"]
        wait_for("all 300 on beta", lambda: len(beta.inbox("trainer")) >= 300, timeout=60)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert [m.body for m in beta.inbox("trainer")] == [f"m{n}" for n in range(300)]
    assert twin.inbox("trainer") == []
    last = (twin.dir / "relayd.log").read_text().strip().splitlines()[-1]
    assert code == 1 and last.startswith("error: host name 'beta' is in use by relayd pid") and "this store or a copy of it" in last, last
    assert connected(beta)


def test_a_directory_flood_keeps_status_small(hosts, nats):
    """ghost writes 2,000 name claims (each with a 4 KB task) and 2,000 damaged entries."""
    alpha, beta = registered_pair(hosts)

    async def flood() -> None:
        async with Intruder(nats, ATTACKER) as ghost:
            js = ghost.js()
            acks = []
            for n in range(2000):
                name = f"flood-{n}"
                presence = json.dumps({"name": name, "host": "ghost", "task": "t" * 4000, "last_heartbeat": "2026-11-23T09:00:00.000Z"}).encode()
                acks.append(await js.publish_async(f"$KV.relay-agents.ghost.name.{name}", b"{}"))
                acks.append(await js.publish_async(f"$KV.relay-agents.ghost.agent.{name}", presence))
                acks.append(await js.publish_async(f"$KV.relay-agents.ghost.agent.damaged-{n}", b"\x00not json"))
            for ack in acks:
                await ack

    run(flood())
    wait_for("alpha to have read the whole flood", lambda: alpha.bridge().get("skipped", {}).get("directory", {}).get("ghost: damaged") == 2000, timeout=60, every=0.5,
             explain=lambda: f"alpha's bridge: state {alpha.bridge()['state']}, skipped {alpha.bridge().get('skipped')}, session errors {session_errors(alpha)}")
    started = time.monotonic()
    shown = alpha.ctl("--json", "status").stdout
    took = time.monotonic() - started
    print(f"status --json after the flood: {len(shown)} bytes in {took:.2f}s")  # the time is for the report, not asserted
    status = json.loads(shown)["bridge"]
    assert len(shown) < 200_000
    assert sum(a["host"] == ATTACKER for a in status["agents"]) == 128
    assert status["skipped"]["directory"] == {"ghost: damaged": 2000, "ghost: more agents than a host may list": 2000 - 128}
    # Each kind of skipped entry is logged once, not once per entry.
    assert log_lines(alpha, "skipped a directory entry") == 2
    # The genuine agents are still there and mail flows.
    assert alpha.sees("trainer", "beta")
    alpha.ctl.setup("send", agent="athena", to=["trainer"], body="still here")
    wait_for("trainer's mail", lambda: [m.body for m in beta.inbox("trainer")] == ["still here"])


@pytest.mark.timeout(180)
def test_a_host_back_from_an_outage_forgets_what_left_the_directory_and_counts_skipped_entries_once(hosts, nats):
    """alpha's link to NATS is cut (beta stays connected); meanwhile beta's agent leaves the
    team. Back, alpha no longer lists it (nor sends to it as to beta's), and the damaged
    entries ghost wrote before are counted once: each session reads the whole bucket again,
    and they were counted again, once a session (a host that lost its link twice showed
    twice as many as there are)."""
    alpha, beta = hosts
    link = CuttableLink(nats.port)
    try:
        alpha.daemon.stop()
        alpha.start(link.url)
        alpha, beta = registered_pair(hosts)

        async def damage() -> None:
            async with Intruder(nats, ATTACKER) as ghost:
                js = ghost.js()
                for n in range(5):
                    await js.publish(f"$KV.relay-agents.ghost.agent.damaged-{n}", b"\x00not json")

        run(damage())
        damaged = lambda: alpha.bridge().get("skipped", {}).get("directory", {}).get("ghost: damaged")  # noqa: E731
        wait_for("alpha to count the damaged entries", lambda: damaged() == 5)
        link.cut()
        wait_for("alpha to notice the outage", lambda: not connected(alpha), timeout=30)
        beta.ctl("reset", "--yes")  # trainer leaves beta, and so the team's directory

        async def claimed() -> bool:
            async with Intruder(nats, ATTACKER) as ghost:
                kv = await ghost.js().key_value("relay-agents")
                return any(key.startswith("beta.") for key in await kv.keys())

        wait_for("beta to withdraw trainer's claim", lambda: not run(claimed()), timeout=60, every=0.5)
        assert alpha.sees("trainer", "beta")  # (what alpha knew when it was cut off)
        link.mend()
        wait_for("alpha back", lambda: connected(alpha), timeout=60)
        assert not alpha.sees("trainer", "beta"), alpha.bridge()["agents"]
        assert damaged() == 5
        refused = alpha.ctl("send", "trainer", "are you there?", agent="athena", check=False)
        assert refused.returncode != 0 and "trainer" in refused.stderr
    finally:
        link.close()


def test_a_host_registers_no_more_agents_than_the_others_keep():
    import anyio

    pytest.importorskip("nats")
    from relayd.bridge.directory import MAX_AGENTS_PER_HOST, Directory
    from relayd.errors import Conflict

    directory = Directory(None, "alpha")  # no store is touched before the cap is checked
    for n in range(MAX_AGENTS_PER_HOST):
        assert directory._add_claim("alpha", f"a{n}", n + 1)
    with pytest.raises(Conflict, match="the most one host may list"):
        anyio.run(directory.claim, None, "one-more")
    # Another host's claims beyond the cap are skipped and counted, its first ones kept.
    for n in range(MAX_AGENTS_PER_HOST + 5):
        directory._add_claim("ghost", f"g{n}", 1000 + n)
    assert directory.counts["ghost"] == MAX_AGENTS_PER_HOST and directory.owner("g0") == "ghost" and directory.owner(f"g{MAX_AGENTS_PER_HOST}") is None
    assert directory.skipped.counts == {"ghost: more agents than a host may list": 5}


def test_an_older_team_migrates_by_running_setup_and_provision_again(short_tmp, relay_env):
    """A team set up before provision existed: no admin.creds, and the stream and buckets
    as the older relayd made them (roll-up allowed, no cap)."""
    import nats as nats_py
    from nats.js import api

    from support.nats_proc import NatsServer
    from relayd.bridge.streams import problem
    from support.bridge_hosts import TEAM, Host

    auth = short_tmp / "nats-auth"
    RelayCtl(relay_env)("bridge", "setup", "--hosts", ",".join(TEAM), "--out", str(auth))
    seeds = {host: json.loads((auth / f"{host}.creds").read_text())["seed"] for host in TEAM}
    (auth / "admin.creds").unlink()
    old = NatsServer(str(short_tmp)).start()  # what the older relayd made, as it made it

    async def as_older_relayd() -> None:
        nc = await nats_py.connect(old.url)
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name="RELAY_MAIL", subjects=["relay.mail.*.*"], retention=api.RetentionPolicy.WORK_QUEUE, storage=api.StorageType.FILE, duplicate_window=120))
        for bucket, ttl in (("relay-agents", None), ("relay-reservations", 600), ("relay-locks", None), ("relay-hosts", 20)):
            await js.create_key_value(bucket=bucket, history=1, ttl=ttl, storage=api.StorageType.FILE)
        kv = await js.key_value("relay-agents")
        await kv.put("beta.name.trainer", b"{}")
        await kv.put("alpha.name.athena", b"{}")
        await js.publish("relay.mail.beta.alpha", json.dumps({**GOOD, "body": "from before the upgrade"}).encode())
        await nc.close()

    run(as_older_relayd())
    old.kill()
    again = json.loads(RelayCtl(relay_env)("--json", "bridge", "setup", "--hosts", ",".join(TEAM), "--out", str(auth)).stdout)
    assert again["kept"] == list(TEAM) and (auth / "admin.creds").exists()
    assert {host: json.loads((auth / f"{host}.creds").read_text())["seed"] for host in TEAM} == seeds
    server = NatsServer(str(short_tmp), port=old.port, config=str(auth / "auth.conf"))
    server.creds = lambda host: str(auth / f"{host}.creds")  # type: ignore[attr-defined]
    server.start()
    beta = Host(short_tmp, "beta", server, relay_env)
    try:
        beta.ctl.setup("init")
        beta.ctl.setup("register", name="trainer")
        shown = json.loads(RelayCtl(relay_env)("--json", "bridge", "provision", "--server", server.url, "--dir", str(auth)).stdout)
        assert shown["streams"] == {"RELAY_MAIL": "updated", "KV_relay-agents": "updated", "KV_relay-reservations": "updated", "KV_relay-locks": "updated", "KV_relay-hosts": "updated"}

        async def settings() -> list:
            async with Intruder(server, "beta") as host:
                js = host.js()
                return [(await js.stream_info(name)).config for name in shown["streams"]]

        assert [problem(config) for config in run(settings())] == [None] * 5
        beta.start()
        wait_for("beta connected over the migrated stream", lambda: connected(beta))
        # The claim and the mail from before the upgrade are still there.
        got = wait_for("the mail from before the upgrade", lambda: beta.inbox("trainer"), timeout=30)
        assert [m.body for m in got] == ["from before the upgrade"] and beta.sees("athena", "alpha")
    finally:
        if beta.daemon is not None:
            beta.daemon.kill()
        server.kill()


def test_a_reservation_flood_keeps_status_small_and_reserves_working(hosts, nats):
    """ghost writes 1,000 reservations of its own and 500 damaged entries."""
    from support.bridge_hosts import REPO

    alpha, beta = registered_pair(hosts)
    entry = {"id": "x", "agent": "phantom", "repo": "/elsewhere", "exclusive": True, "reason": "r" * 1000, "created_at": "2026-11-23T09:00:00.000Z", "expires_at": "2099-01-01T00:00:00.000Z", "host": "ghost"}

    async def flood() -> None:
        async with Intruder(nats, ATTACKER) as ghost:
            js = ghost.js()
            acks = [await js.publish_async(f"$KV.relay-reservations.ghost.{n:064x}", json.dumps({**entry, "pattern": f"/elsewhere/p{n}"}).encode()) for n in range(1000)]
            acks += [await js.publish_async(f"$KV.relay-reservations.ghost.d{n}", b"\x00") for n in range(500)]
            for ack in acks:
                await ack

    run(flood())
    granted = beta.raw().request("reserve", {"agent": "trainer", "pattern": "src/**", "repo": REPO})  # reads the whole bucket
    assert granted["ok"], granted
    wait_for("beta's watcher to catch up", lambda: len(beta.bridge()["reservations"]) == 256, timeout=30)
    shown = beta.ctl("--json", "status").stdout
    status = json.loads(shown)["bridge"]
    assert len(shown) < 200_000 and sum(r["host"] == ATTACKER for r in status["reservations"]) == 256
    assert status["skipped"]["reservations"] == {"ghost: damaged": 500, "ghost: more reservations than a host may hold": 1000 - 256}
    assert log_lines(beta, "skipped a reservation entry") == 2
    refused = alpha.raw().request("reserve", {"agent": "athena", "pattern": "src/a.py", "repo": REPO})
    assert not refused["ok"] and "on host beta" in refused["error"]["message"]


def test_provision_errors_are_one_line(short_tmp, relay_env):
    from support.nats_proc import free_port

    ctl = RelayCtl(relay_env)
    ctl("bridge", "setup", "--hosts", "alpha,beta", "--out", str(short_tmp / "team"))
    nowhere = f"nats://127.0.0.1:{free_port()}"
    for args, words in (
        (["--server", nowhere, "--dir", str(short_tmp)], "admin.creds: No such file or directory (relayctl bridge setup writes it"),
        (["--server", nowhere, "--dir", str(short_tmp / "team")], f"cannot connect to {nowhere} with the admin key"),
        (["--server", nowhere, "--dir", str(short_tmp / "team"), "--max-queued", "0"], "--max-queued: give at least 1"),
    ):
        proc = ctl("bridge", "provision", *args, check=False)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1
