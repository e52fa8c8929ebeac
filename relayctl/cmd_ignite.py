"""`relayctl ignite watch DIR`: serve an IGNITE queue directory from the command line."""

from __future__ import annotations

import os
import sys
import threading

import click

from relayd.daemon.cli import _duration  # the same positive-duration option check as relayd's
from relayd.errors import UsageError

from .context import echo, settings, visible
from .stopping import until_stopped


@click.group("ignite")
def ignite() -> None:
    """Run an IGNITE-style workspace on relay (see docs/ignite.md).

    \b
    Examples:
      relayctl init --preset ignite --workers 3
      relayctl ignite watch workspace/queue
      relayctl ignite watch workspace/queue --once
      relayd --ignite-queue workspace/queue      # the same, inside the daemon
    """


def log_line(event: str, **fields: object) -> None:
    shown = " ".join(f"{key}={value}" for key, value in fields.items() if value not in (None, ""))
    echo(visible(f"{event.removeprefix('queue_')} {shown}".rstrip()), err=True)
    sys.stderr.flush()


@ignite.command()
@click.argument("queue_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--once", is_flag=True, help="One pass (take, deliver, retry, dead-letter what is due), then exit.")
@click.option("--timeout", default="5m", show_default=True, metavar="DURATION", callback=_duration, help="How long an agent may leave a delivered file before it is retried.")
def watch(queue_dir: str, once: bool, timeout: float) -> None:
    """Serve the IGNITE queue DIR (DIR/<agent>/*.mime) until Ctrl-C, or one pass with --once.

    New files are moved to processed/, marked processing, announced to the agent through
    relay (its inbox and its arrival mechanism; the notice names the file) and marked
    delivered. A file the agent has not deleted TIMEOUT later is retried with the store's
    backoff (config.json "delivery": ack_wait, cap, max_deliver) and finally moved to
    DIR/dead_letter/ with an escalation file for the escalation agent (leader).

    \b
    Examples:
      relayctl ignite watch ~/ignite/workspace/queue
      relayctl ignite watch workspace/queue --timeout 10m
      relayctl --json ignite watch workspace/queue --once
    """
    # deferred imports: `relayctl --help` loads every command module; the queue monitor loads only
    # when `ignite watch` runs
    from relayd.ignite.queue import monitor_for

    s = settings()
    root = os.path.abspath(queue_dir)
    if not os.path.isdir(root):
        raise UsageError(f"{root} is not a directory (the IGNITE queue, e.g. workspace/queue)")
    monitor = monitor_for(s.client(), root, timeout=timeout, log=log_line if not s.quiet else (lambda *a, **k: None))
    if once:
        held = monitor.lock()
        try:
            outcome = monitor.run_once()
        finally:
            held.close()
            monitor.close()
        data = {key: value for key, value in vars(outcome).items()}
        s.out(data, lambda d: f"taken {len(d['taken'])}, delivered {len(d['delivered'])}, retrying {len(d['retrying'])}, dead letters {len(d['dead_lettered'])}, malformed {len(d['malformed'])}, still being written {len(d['waiting'])}, written from relay {len(d['mirrored'])}")
        return

    stop = threading.Event()
    with until_stopped(stop.set):  # Ctrl-C or SIGTERM: finish the pass under way, then exit 0
        if not s.quiet:
            click.echo(f"serving {root} (Ctrl-C stops)", err=True)
        monitor.serve(stop, watch_socket=s.socket)
