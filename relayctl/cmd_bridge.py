"""bridge setup: NATS credentials and permissions for a team of bridged hosts."""

from __future__ import annotations

import click

from relayd.bridge.subjects import DEFAULT_MAX_QUEUED

from .context import settings


@click.group()
def bridge() -> None:
    """The NATS bridge between the relayd of several hosts (docs/bridge.md).

    \b
    Examples:
      relayctl bridge setup --hosts laptop,gpu-box --out ~/team-nats
      relayctl bridge provision --server nats://10.0.0.5:4222 --dir ~/team-nats
      relayd --bridge nats://10.0.0.5:4222 --bridge-creds ~/gpu-box.creds
    """


@bridge.command()
@click.option("--hosts", required=True, metavar="HOST,HOST...", help="The team's host names, comma-separated (each becomes one NATS user).")
@click.option("--out", "out_dir", required=True, metavar="DIR", type=click.Path(file_okay=False), help="Where to write the files (created 0700; files 0600).")
@click.option("--listen", default="127.0.0.1:4222", show_default=True, metavar="HOST:PORT", help="The listen address written into a new nats-server.conf.")
def setup(hosts: str, out_dir: str, listen: str) -> None:
    """Write a nats-server authorization that trusts only the team's hosts, and one
    credentials file per host.

    Each host gets an nkey: the server keeps its public key with permissions that let
    the host publish only in its own name, read only its own mail, and change only its
    own directory entries, reservations, lease and mail consumer. Written to DIR:
    HOST.creds for each host (copy each to its host only, keep it 0600), admin.creds
    (the operator's key for relayctl bridge provision: keep it off the hosts),
    auth.conf (the server's authorization block: public keys only) and, unless it
    exists, nats-server.conf (listen, JetStream, include auth.conf). Run it again with
    more names to add hosts, or after an upgrade: existing keys are kept, auth.conf is
    rewritten; restart or reload (nats-server --signal reload) the server, then run
    relayctl bridge provision.

    \b
    Examples:
      relayctl bridge setup --hosts laptop,gpu-box --out ~/team-nats
      nats-server -c ~/team-nats/nats-server.conf
      relayctl bridge provision --server nats://127.0.0.1:4222 --dir ~/team-nats
      relayd --bridge nats://10.0.0.5:4222 --bridge-creds ~/gpu-box.creds
      relayctl bridge setup --hosts laptop,gpu-box,ci --out ~/team-nats   # add a host
    """
    # deferred imports: `relayctl --help` loads every command module; the bridge's setup and nats
    # (provision) load only when the command runs
    from relayd.bridge.setup import setup as write_setup

    result = write_setup(hosts.split(","), out_dir, listen)

    def human(r: dict) -> str:
        lines = [f"wrote {r['auth_conf']} ({len(r['hosts'])} hosts) and {r['server_conf']}"]
        for name in r["hosts"]:
            state = "new key" if name in r["created"] else "kept"
            lines.append(f"  {name:<16} {r['creds'][name]}  ({state})")
        lines.append(f"  {'(admin)':<16} {r['admin']}  (the operator's key for provision: keep it off the hosts)")
        lines.append(f"start the server: nats-server -c {r['server_conf']}")
        port = listen.rpartition(":")[2] or "4222"  # the port a new nats-server.conf listens on
        lines.append(f"then make its stream and buckets: relayctl bridge provision --server nats://SERVER:{port} --dir {r['dir']}")
        lines.append(f"on each host: relayd --bridge nats://SERVER:{port} --bridge-creds HOST.creds")
        return "\n".join(lines)

    settings().out(result, human)


@bridge.command()
@click.option("--server", required=True, metavar="URL", help="The team's nats-server, e.g. nats://10.0.0.5:4222.")
@click.option("--dir", "setup_dir", required=True, metavar="DIR", type=click.Path(file_okay=False), help="The directory relayctl bridge setup wrote (its admin.creds is used).")
@click.option("--max-queued", default=DEFAULT_MAX_QUEUED, type=int, show_default=True, metavar="N", help="Messages one host may have waiting for another; more are refused (they wait in the sender's outbox).")
def provision(server: str, setup_dir: str, max_queued: int) -> None:
    """Make the NATS stream and buckets relay relies on, with the admin key.

    Hosts may not make or change them: relayd checks their settings at every
    connection and refuses to run over a stream that could lose or rewrite mail
    (roll-up or purge allowed, a max age on mail, limits that drop old mail). Run once
    after starting the server, and again after an upgrade (it updates what an older
    relay made) or to change --max-queued.

    \b
    Examples:
      relayctl bridge provision --server nats://10.0.0.5:4222 --dir ~/team-nats
      relayctl bridge provision --server nats://10.0.0.5:4222 --dir ~/team-nats --max-queued 2000
    """
    import asyncio

    from relayd.bridge.streams import provision_server

    done = asyncio.run(provision_server(server, setup_dir, max_queued))
    result = {"server": server, "streams": {o.stream: o.action for o in done}}
    settings().out(result, lambda r: "\n".join(f"{name:<22} {action}" for name, action in r["streams"].items()))
