"""bridge setup: NATS credentials and permissions for a team of bridged hosts."""

from __future__ import annotations

import click

from .context import settings


@click.group()
def bridge() -> None:
    """The NATS bridge between the relayd of several hosts (docs/bridge.md).

    \b
    Examples:
      relayctl bridge setup --hosts laptop,gpu-box --out ~/team-nats
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
    HOST.creds for each host (copy each to its host only, keep it 0600), auth.conf (the
    server's authorization block: public keys only) and, unless it exists,
    nats-server.conf (listen, JetStream, include auth.conf). Run it again with more
    names to add hosts: existing HOST.creds keep their keys; restart or reload
    (nats-server --signal reload) the server.

    \b
    Examples:
      relayctl bridge setup --hosts laptop,gpu-box --out ~/team-nats
      nats-server -c ~/team-nats/nats-server.conf
      relayd --bridge nats://10.0.0.5:4222 --bridge-creds ~/gpu-box.creds
      relayctl bridge setup --hosts laptop,gpu-box,ci --out ~/team-nats   # add a host
    """
    from relayd.bridge.setup import setup as write_setup

    result = write_setup(hosts.split(","), out_dir, listen)

    def human(r: dict) -> str:
        lines = [f"wrote {r['auth_conf']} ({len(r['hosts'])} hosts) and {r['server_conf']}"]
        for name in r["hosts"]:
            state = "new key" if name in r["created"] else "kept"
            lines.append(f"  {name:<16} {r['creds'][name]}  ({state})")
        lines.append(f"start the server: nats-server -c {r['server_conf']}")
        port = listen.rpartition(":")[2] or "4222"  # the port a new nats-server.conf listens on
        lines.append(f"on each host: relayd --bridge nats://SERVER:{port} --bridge-creds HOST.creds")
        return "\n".join(lines)

    settings().out(result, human)
