"""A bridged host cannot fill another host's disk (issue 51, item 2), over a real nats-server
with three credentialed hosts: alpha (an honest relayd), beta (the receiving relayd, its
store on a 48 MiB tmpfs) and ghost, whose credentials flood beta with (a) junk that beta
refuses and (b) valid 200 KiB mail from ghost's own agent (60 MiB: stored as it came, it
would fill that tmpfs, as the attack of the issue did). beta stores ghost's budget and no
more, leaves the rest of its valid mail in JetStream (whose cap per pair of hosts then
refuses ghost's publishes), writes down 200 refusals and counts the rest, and local mail and
alpha's mail go on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from support.bridge_hosts import Host, Intruder, connected, registered_pair, run, team_server
from support.nats_proc import NATS_SERVER
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed (.ci/run installs the Debian package)")]

MIB = 1 << 20
BUDGET_MIB = 8  # beta's budget per other host per hour (config.json bridge.budget)
REFUSALS_RECORDED = 200  # refusal records per host per hour (the default)
MAX_QUEUED = 50  # what may wait in JetStream from one host for another (provision --max-queued)
JUNK = 3000  # of ~4.5 KiB: 13 MiB unbounded
BIG = 300  # of 200 KiB: 60 MiB unbounded


def store_bytes(root: Path) -> int:
    """Disk blocks the store's files take (as the tmpfs counts them)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def mount_tmpfs(path: Path) -> bool:
    """A 48 MiB tmpfs at `path` (root may mount one); False where mounting is not permitted,
    and the store then lies on the test's own filesystem: its growth is measured the same."""
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(path)], capture_output=True).returncode == 0


def log_lines(host: Host, words: str) -> list[dict]:
    found = []
    for line in Path(host.daemon.log_path).read_text(errors="replace").splitlines():
        if words in line:
            try:
                found.append(json.loads(line))
            except ValueError:
                found.append({"line": line})
    return found


def junk(n: int) -> bytes:
    return json.dumps({"id": f"junk-{n}", "ts": "2026-11-23T09:00:00.000Z", "from": "mallory", "to": "trainer", "subject": "s", "body": "j" * 4000}).encode()


def big(n: int) -> bytes:
    from relayd.ulid import new_ulid

    return json.dumps({"id": new_ulid(), "ts": "2026-11-23T09:00:00.000Z", "from": "mallory", "to": "trainer", "subject": f"big {n}", "body": "b" * (200 << 10)}).encode()


def test_a_flooding_host_gets_its_budget_of_disk_and_no_more(short_tmp, relay_env):
    server = team_server(short_tmp, relay_env, "", "--max-queued", str(MAX_QUEUED))
    alpha, beta = Host(short_tmp, "alpha", server, relay_env), Host(short_tmp, "beta", server, relay_env)
    store = Path(beta.env["RELAY_DIR"])
    mounted = mount_tmpfs(store)
    try:
        for host in (alpha, beta):
            host.ctl.setup("init")
        (store / "config.json").write_text(json.dumps({"bridge": {"budget": {"mib_per_hour": BUDGET_MIB}}}))
        for host in (alpha, beta):
            host.start()
        registered_pair([alpha, beta])
        beta.ctl.setup("register", name="keeper")

        async def flood() -> tuple[int, int, list[str]]:
            async with Intruder(server, "ghost") as ghost:
                js = ghost.js()
                kv = await js.key_value("relay-agents")
                await kv.put("ghost.name.mallory", b"{}")  # ghost's own agent, as its relayd would claim it
                junk_refused = []
                for start in range(0, JUNK, 40):  # in windows: JetStream's cap counts what waits
                    answers = await asyncio.gather(*(js.publish("relay.mail.beta.ghost", junk(n)) for n in range(start, start + 40)), return_exceptions=True)
                    junk_refused += [str(a) for a in answers if isinstance(a, Exception)]
                assert all("maximum messages per subject exceeded" in r for r in junk_refused), junk_refused[:3]
                refused = []
                for n in range(BIG):
                    try:
                        await js.publish("relay.mail.beta.ghost", big(n))
                    except Exception as exc:
                        refused.append(str(exc))
                return JUNK - len(junk_refused), BIG - len(refused), refused

        hours = {time.time() // 3600}
        before = store_bytes(store)
        junk_taken, accepted, refused_by_jetstream = run(flood())
        from_ghost = lambda: beta.bridge().get("from_hosts", {}).get("ghost", {})  # noqa: E731
        wait_for("beta to have met every junk message and its budget", lambda: from_ghost().get("refused") == junk_taken and from_ghost().get("held", 0) > 0, timeout=60, every=0.5)
        # Local mail, and mail from the third host, still get through.
        beta.ctl.setup("send", agent="keeper", to=["trainer"], body="local, after the flood")
        alpha.ctl.setup("send", agent="athena", to=["trainer"], body="from alpha, after the flood")
        wait_for("alpha's mail on beta", lambda: "from alpha, after the flood" in [m.body for m in beta.inbox("trainer")], timeout=30)
        hours.add(time.time() // 3600)
        grown = store_bytes(store) - before
        shown = from_ghost()
        print(f"beta's store grew {grown / MIB:.1f} MiB on {'a 48 MiB tmpfs' if mounted else 'the test filesystem (no tmpfs: mount not permitted)'}; ghost: {shown}")

        # (b) ghost's valid mail: its budget per clock hour was stored, the rest waits in JetStream.
        budget = len(hours) * BUDGET_MIB * MIB
        bodies = [m.body for m in beta.inbox("trainer")]
        stored = sum(b.startswith("bbbb") for b in bodies)
        assert shown["stored"] == stored and 0 < shown["stored_bytes"] <= budget and shown["stored_bytes"] > budget - 2 * (201 << 10)
        assert accepted < BIG and all("maximum messages per subject exceeded" in r for r in refused_by_jetstream)  # JetStream's cap then binds
        # (a) ghost's junk: refused, counted, and only REFUSALS_RECORDED of it written down.
        assert junk_taken > REFUSALS_RECORDED and shown["refused"] == junk_taken and shown["refused_unrecorded"] == junk_taken - REFUSALS_RECORDED
        refusals = [json.loads(line) for line in (store / "bridge" / "undeliverable.jsonl").read_text().splitlines()]
        assert len(refusals) == REFUSALS_RECORDED and all(r["host"] == "ghost" for r in refusals)
        # What beta's disk took: the budget, the refusal records, and the few KiB of ids and events.
        assert grown <= budget + REFUSALS_RECORDED * 5000 + MIB, f"{grown / MIB:.1f} MiB"
        assert "local, after the flood" in bodies and connected(beta)
        # Visible in relayctl status, and in the log once per host and hour, not once per message.
        said = [line for line in beta.ctl("status").stdout.splitlines() if "from host ghost:" in line]
        assert len(said) == 1 and f"{shown['held']} held in JetStream over its budget" in said[0] and f"{junk_taken} refused" in said[0], said
        assert len(log_lines(beta, "bridge mail refused")) == len(hours)
        assert len(held := log_lines(beta, "over its hourly budget")) == len(hours) and held[0].get("host") == "ghost"
    finally:
        for host in (alpha, beta):
            if host.daemon is not None:
                host.daemon.kill()
        server.kill()
        if mounted:
            subprocess.run(["umount", str(store)], check=True)
