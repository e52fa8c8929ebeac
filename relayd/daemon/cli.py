"""The daemon's command line, shared by `relayd` and `relayctl daemon`.

This module only declares options; the asynchronous machinery is imported when the
command runs, so listing `relayctl --help` never loads anyio or structlog.
"""

from __future__ import annotations

import os
import sys
import re

import click

from relayd.errors import RelayError, UsageError, missing_extra
from relayd.timefmt import parse_duration
from relayd import layout
from relayd.names import check_agent_name

HELP = """Run relayd in the foreground: serve the store on a Unix socket, push events to
subscribers, batch fsyncs (group commit), run GC and stale-agent detection, redeliver
unacknowledged messages sent with --ack, and retry pane triggers held back by copy mode or by
unsent text in the pane's input line.

One daemon per store (a flock on <store>/relayd.lock). Logs are JSON lines on stderr
(readable text on a terminal). SIGTERM/SIGINT drain and exit 0; a second signal exits
at once; a crash exits 70 (so systemd's Restart=on-failure restarts it). Works under systemd (Type=notify, watchdog, socket activation).

\b
Examples:
  relayd
  relayd --dir ~/team-store --gc-interval 10m --log-level debug
  relayctl daemon --socket $XDG_RUNTIME_DIR/relay/relayd.sock
  relayd --ignite-queue ~/ignite/workspace/queue --ignite-timeout 10m
  RELAY_DIR=/tmp/t relayd & relayctl status
  relayd --bridge nats://10.0.0.5:4222 --bridge-creds ~/gpu-box.creds    # join other hosts (docs/bridge.md)
  relayd --bridge tls://nats.example:4222 --bridge-creds ~/gpu-box.creds  # TLS; a private CA via SSL_CERT_FILE
"""


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        seconds = parse_duration(value).total_seconds()
    except UsageError as exc:
        raise click.BadParameter(exc.message) from None
    if seconds <= 0:
        raise click.BadParameter("must be longer than zero")
    return seconds


@click.command("daemon", help=HELP, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--dir", "store_dir", envvar=["RELAY_DIR", "OVLD_RELAY_DIR"], metavar="PATH", help="Store directory. [env: RELAY_DIR, then OVLD_RELAY_DIR; default: ~/.relay]")
@click.option("--socket", "socket_path", envvar="RELAY_SOCKET", metavar="PATH", help="Socket to listen on. [env: RELAY_SOCKET; default: $XDG_RUNTIME_DIR/relay/relayd.sock (relayd-<hash>.sock for a store other than ~/.relay), else <store>/relayd.sock]")
@click.option("--gc-interval", default="5m", show_default=True, metavar="DURATION", callback=_duration, help="How often to run garbage collection.")
@click.option("--stale", "stale_after", default="5m", show_default=True, metavar="DURATION", callback=_duration, help="Heartbeat age after which an agent counts as stale (one presence event each).")
@click.option("--retry-interval", default="5s", show_default=True, metavar="DURATION", callback=_duration, help="How often to retry pane/cmd triggers that were held back (copy mode, unsent text in the input line) or failed.")
@click.option("--redeliver-interval", default="1s", show_default=True, metavar="DURATION", callback=_duration, help="How often to look for owed messages (send --ack) whose ack-wait has passed.")
@click.option("--drain-timeout", default="5s", show_default=True, metavar="DURATION", callback=_duration, help="On SIGTERM/SIGINT, how long to wait for in-flight requests.")
@click.option("--ignite-queue", metavar="DIR", type=click.Path(file_okay=False), help="Also serve this IGNITE queue directory (DIR/<agent>/*.mime; see relayctl ignite watch).")
@click.option("--ignite-timeout", default="5m", show_default=True, metavar="DURATION", callback=_duration, help="With --ignite-queue: how long an agent may leave a delivered file before it is retried.")
@click.option("--max-connections", type=click.IntRange(min=1), metavar="N", help="Connections served at once; more are refused with an error frame. [default: from the open-file limit, at most 1024]")
@click.option("--idle-timeout", default="10m", show_default=True, metavar="DURATION", callback=_duration, help="Close a request connection silent this long (clients reconnect on their next request; subscribers are kept).")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.option("--bridge", "bridge_url", metavar="URL", help="Join the relayd of other hosts through NATS JetStream at URL (nats://HOST:PORT; needs the extra relay-bus[bridge]). [default: config.json bridge.url, else host-local only]")
@click.option("--bridge-creds", "bridge_creds", metavar="FILE", help="This host's credentials for the bridge, made by `relayctl bridge setup` (mode 0600; they name the host). [default: config.json bridge.creds, else none: the URL's own user/password or token]")
@click.option("--host-name", metavar="NAME", help="This host's name in the bridged team (a-z, 0-9, '_', '-'). [default: the name in --bridge-creds, else config.json bridge.host, else the machine's hostname]")
@click.pass_context
def daemon(
    ctx: click.Context,
    store_dir: str | None,
    socket_path: str | None,
    gc_interval: float,
    stale_after: float,
    retry_interval: float,
    redeliver_interval: float,
    drain_timeout: float,
    ignite_queue: str | None,
    ignite_timeout: float,
    max_connections: int | None,
    idle_timeout: float,
    log_level: str,
    bridge_url: str | None,
    bridge_creds: str | None,
    host_name: str | None,
) -> None:
    # Under relayctl, its global --dir/--socket (given before `daemon`) count too, and
    # win over the environment that both levels read.
    outer = ctx.find_root().obj
    if ctx.get_parameter_source("store_dir") != click.core.ParameterSource.COMMANDLINE:
        store_dir = getattr(outer, "store_dir", None) or store_dir
    if ctx.get_parameter_source("socket_path") != click.core.ParameterSource.COMMANDLINE:
        socket_path = getattr(outer, "socket", None) or socket_path
    try:
        root = os.path.abspath(os.path.expanduser(store_dir)) if store_dir else layout.default_store_dir()
    except layout.NoHome as exc:
        raise UsageError(str(exc)) from None
    sock = os.path.abspath(os.path.expanduser(socket_path)) if socket_path else layout.default_socket_path(root)

    if ignite_queue:
        ignite_queue = os.path.abspath(os.path.expanduser(ignite_queue))
        if not os.path.isdir(ignite_queue):
            raise UsageError(f"--ignite-queue {ignite_queue}: not a directory (the IGNITE queue, e.g. workspace/queue)")

    bridge_url, host_name, bridge_seed, bridge_creds = _bridge_settings(root, bridge_url, host_name, bridge_creds)

    # deferred imports: `relayd --help` and option errors stay quick: the daemon itself (anyio,
    # structlog), the store and the optional bridge (nats, nkeys) load only when they run
    from .main import Config, run

    status = run(
        Config(
            store_dir=root,
            socket_path=sock,
            gc_interval=gc_interval,
            stale_after=stale_after,
            retry_interval=retry_interval,
            redeliver_interval=redeliver_interval,
            drain_timeout=drain_timeout,
            max_connections=max_connections,
            idle_timeout=idle_timeout,
            log_level=log_level.lower(),
            bridge_url=bridge_url,
            host_name=host_name,
            bridge_seed=bridge_seed,
            bridge_creds=bridge_creds,
            ignite_queue=ignite_queue,
            ignite_timeout=ignite_timeout,
        )
    )
    ctx.exit(status)


def _bridge_settings(root: str, url: str | None, host: str | None, creds_path: str | None) -> tuple[str | None, str | None, str | None, str | None]:
    """--bridge / --bridge-creds / --host-name, else config.json's bridge section; checked
    before starting. Returns (url, host name, nkey seed or None, creds path or None)."""
    if url is None or host is None or creds_path is None:
        from relayd.config import load_config
        from relayd.store import Store

        if os.path.isfile(os.path.join(root, "config.json")):
            with Store(root) as store:
                configured = load_config(store).bridge
            if configured is not None:
                url = url or configured.url
                host = host or configured.host
                creds_path = creds_path or configured.creds
    if not url:
        if creds_path:
            raise UsageError("--bridge-creds goes with --bridge URL (the team's NATS server)")
        return None, None, None, None
    if not url.startswith(("nats://", "tls://")):
        raise UsageError(f"--bridge must be a nats:// (or tls://) URL, e.g. nats://127.0.0.1:4222, not {url!r}")
    seed = None
    if creds_path:
        from relayd.bridge.setup import load_credentials

        creds_path = os.path.abspath(os.path.expanduser(creds_path))
        creds = load_credentials(creds_path)
        if host and host != creds.host:
            raise UsageError(f"--host-name {host} does not match the credentials in {creds_path}, which are host {creds.host}'s")
        host, seed = creds.host, creds.seed
    if not host:
        import socket

        host = re.sub(r"[^a-z0-9_-]+", "-", socket.gethostname().split(".")[0].lower()).strip("-_") or "host"
    check_agent_name(host, "host name")
    try:
        import nats  # noqa: F401  (only to say clearly what is missing)

        if seed is not None:
            import nkeys  # noqa: F401
    except ImportError as exc:
        raise missing_extra("relayd --bridge", "bridge", "nats-py, nkeys") from None
    return url, host, seed, creds_path


def main(argv: list[str] | None = None) -> None:
    """The `relayd` console script."""
    try:
        # Not standalone, so click hands back the exit status instead of exiting: pass it
        # on, or a crash (70) would end in status 0 and systemd's Restart=on-failure would
        # not restart the daemon.
        status = daemon.main(args=argv, prog_name="relayd", standalone_mode=False)
        sys.exit(status if type(status) is int else 0)
    except RelayError as exc:
        click.echo(f"error: {' '.join(exc.message.split())}", err=True)
        sys.exit(exc.exit_status)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code or 1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
