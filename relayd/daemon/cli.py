"""The daemon's command line, shared by `relayd` and `relayctl daemon`.

This module only declares options; the asynchronous machinery is imported when the
command runs, so listing `relayctl --help` never loads anyio or structlog.
"""

from __future__ import annotations

import os
import sys

import click

from relayd.errors import RelayError

HELP = """Run relayd in the foreground: serve the store on a Unix socket, push events to
subscribers, batch fsyncs (group commit), run GC and stale-agent detection, redeliver
unacknowledged messages sent with --ack, and retry pane triggers held back by copy mode.

One daemon per store (a flock on <store>/relayd.lock). Logs are JSON lines on stderr
(readable text on a terminal). SIGTERM/SIGINT drain and exit 0; a second signal exits
at once. Works under systemd (Type=notify, watchdog, socket activation).

\b
Examples:
  relayd
  relayd --dir ~/team-store --gc-interval 10m --log-level debug
  relayctl daemon --socket $XDG_RUNTIME_DIR/relay/relayd.sock
  relayd --ignite-queue ~/ignite/workspace/queue --ignite-timeout 10m
  RELAY_DIR=/tmp/t relayd & relayctl status
"""


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from relayd.errors import UsageError
    from relayd.timefmt import parse_duration

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
@click.option("--retry-interval", default="5s", show_default=True, metavar="DURATION", callback=_duration, help="How often to retry pane/cmd triggers that were held back (copy mode) or failed.")
@click.option("--redeliver-interval", default="1s", show_default=True, metavar="DURATION", callback=_duration, help="How often to look for owed messages (send --ack) whose ack-wait has passed.")
@click.option("--drain-timeout", default="5s", show_default=True, metavar="DURATION", callback=_duration, help="On SIGTERM/SIGINT, how long to wait for in-flight requests.")
@click.option("--ignite-queue", metavar="DIR", type=click.Path(file_okay=False), help="Also serve this IGNITE queue directory (DIR/<agent>/*.mime; see relayctl ignite watch).")
@click.option("--ignite-timeout", default="5m", show_default=True, metavar="DURATION", callback=_duration, help="With --ignite-queue: how long an agent may leave a delivered file before it is retried.")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.pass_context
def daemon(ctx: click.Context, store_dir: str | None, socket_path: str | None, gc_interval: float, stale_after: float, retry_interval: float, redeliver_interval: float, drain_timeout: float, ignite_queue: str | None, ignite_timeout: float, log_level: str) -> None:
    from relayd import layout
    from relayd.errors import UsageError

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

    from .main import Config, run

    status = run(Config(store_dir=root, socket_path=sock, gc_interval=gc_interval, stale_after=stale_after, retry_interval=retry_interval, redeliver_interval=redeliver_interval, drain_timeout=drain_timeout, log_level=log_level.lower(), ignite_queue=ignite_queue, ignite_timeout=ignite_timeout))
    ctx.exit(status)


def main(argv: list[str] | None = None) -> None:
    """The `relayd` console script."""
    try:
        daemon.main(args=argv, prog_name="relayd", standalone_mode=False)
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
