"""systemd install | uninstall: the user units for relayd and the wake path, written with
this installation's paths (seed 004 US-016, US-031).

contrib/systemd holds the same units for copying by hand; they find the programs on PATH
and assume ~/.relay. The ones written here name the `relayd` and `relayctl` installed next
to the Python running this command and the store this command uses, so they work for a
virtualenv or a store elsewhere without editing.
"""

from __future__ import annotations

import os
import subprocess

import click

from relayd import layout
from relayd.errors import RelayError
from relayd.fsio import replace_file

from .context import installed_command, settings

MARKER = "# Written by `relayctl systemd install`; `relayctl systemd uninstall` removes it."
UNITS = ("relayd.socket", "relayd.service", "relay-wake.path", "relay-wake.service")
ENABLED = ("relayd.socket", "relay-wake.path")  # what --now enables and starts


def unit_dir() -> str:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "systemd", "user")


def _arg(text: str) -> str:
    """One word of an ExecStart= / Environment= line: `%` doubled, quoted when needed."""
    text = text.replace("%", "%%")
    if any(ch in text for ch in ' \t"\'\\;$'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _socket(store_dir: str, socket: str | None) -> tuple[str, str]:
    """Where relayd listens, as (ListenStream= value, ExecStart= word): the given --socket,
    else the runtime-dir default for this store (what relayctl itself connects to)."""
    if socket:
        path = os.path.abspath(socket)
        return path.replace("%", "%%"), _arg(path)
    default = "%t/relay/" + layout.runtime_socket_name(store_dir, os.environ.get("HOME"))
    return default, default


def render(store_dir: str, socket: str | None) -> dict[str, str]:
    """The four unit files, by name."""
    relayd = " ".join(_arg(a) for a in installed_command("relayd", "relayd.daemon"))
    relayctl = " ".join(_arg(a) for a in installed_command("relayctl", "relayctl"))
    listen, listen_arg = _socket(store_dir, socket)
    env = _arg(f"RELAY_DIR={store_dir}")
    trigger = os.path.join(store_dir, layout.WAKE, layout.WAKE_TRIGGER).replace("%", "%%")
    head = f"{MARKER}\n# Store: {store_dir}\n"
    return {
        "relayd.socket": f"""{head}[Unit]
Description=relay message bus socket (relayd)

[Socket]
ListenStream={listen}
SocketMode=0600
DirectoryMode=0700
Accept=no

[Install]
WantedBy=sockets.target
""",
        "relayd.service": f"""{head}[Unit]
Description=relay message bus daemon for AI coding agents (relayd)
Requires=relayd.socket
After=relayd.socket

[Service]
Type=notify
NotifyAccess=main
ExecStart={relayd} --socket {listen_arg}
Environment={env}
WatchdogSec=30s
Restart=on-failure
RestartSec=1s
KillSignal=SIGTERM
TimeoutStopSec=15s
UMask=0077
NoNewPrivileges=yes

[Install]
WantedBy=default.target
""",
        "relay-wake.path": f"""{head}[Unit]
Description=relay: watch the wake file trigger

[Path]
PathModified={trigger}
Unit=relay-wake.service

[Install]
WantedBy=default.target
""",
        "relay-wake.service": f"""{head}[Unit]
Description=relay: forward a file-trigger wake to the orchestrator gateway

[Service]
Type=oneshot
Environment={env}
ExecStart={relayctl} wake --forward
""",
    }


def _ours(path: str) -> bool:
    try:
        with open(path) as fh:
            return fh.readline().rstrip("\n") == MARKER
    except FileNotFoundError:
        return True  # nothing there to protect
    except (OSError, UnicodeDecodeError):
        return False


def systemctl(*args: str) -> str | None:
    """Run `systemctl --user ARGS`; None on success, else why it failed (one line)."""
    try:
        done = subprocess.run(["systemctl", "--user", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "systemctl is not installed"
    except subprocess.TimeoutExpired:
        return "systemctl did not answer within 60 s"
    except OSError as exc:
        return f"systemctl: {exc.strerror or exc}"
    if done.returncode == 0:
        return None
    return " ".join(done.stderr.split())[:300] or f"exit status {done.returncode}"


@click.group()
def systemd() -> None:
    """Install or remove the systemd user units for relayd and the wake path unit.

    \b
    Examples:
      relayctl systemd install --now
      relayctl systemd uninstall
    """


@systemd.command()
@click.option("--now", is_flag=True, help=f"Also enable and start {' and '.join(ENABLED)}.")
@click.option("--force", is_flag=True, help="Overwrite unit files that relayctl did not write.")
def install(now: bool, force: bool) -> None:
    """Write relayd.socket, relayd.service, relay-wake.path and relay-wake.service into
    $XDG_CONFIG_HOME/systemd/user (~/.config/systemd/user) with this installation's
    programs and store, then run `systemctl --user daemon-reload`.

    Without a user session bus (over ssh without lingering, in a container) the reload
    fails: the units are still written, and a warning says what to run later.

    \b
    Examples:
      relayctl systemd install
      relayctl systemd install --now
      relayctl --dir /srv/team systemd install
      systemctl --user status relayd.socket relay-wake.path
    """
    s = settings()
    target = unit_dir()
    units = render(s.dir, s.socket)
    foreign = [name for name in units if not _ours(os.path.join(target, name))]
    if foreign and not force:
        raise click.ClickException(f"{', '.join(foreign)} in {target} were not written by relayctl; keep them, or replace them with --force")
    try:
        os.makedirs(target, exist_ok=True)
        for name, text in units.items():
            path = os.path.join(target, name)
            replace_file(path, text.encode())
            s.note(f"wrote {path}")
    except OSError as exc:
        raise click.ClickException(f"cannot write the units to {target}: {exc.strerror or exc}") from None
    except RelayError as exc:
        raise click.ClickException(f"cannot write the units to {target}: {exc.message}") from None
    later = f"systemctl --user daemon-reload && systemctl --user enable --now {' '.join(ENABLED)}"
    failed = systemctl("daemon-reload")
    if failed:
        if now:
            raise click.ClickException(f"the units are written, but systemctl --user daemon-reload failed ({failed}); in your login session run: {later}")
        s.warn(f"systemctl --user daemon-reload failed ({failed}); the units are written: in your login session run: {later}")
        return
    if now:
        failed = systemctl("enable", "--now", *ENABLED)
        if failed:
            raise click.ClickException(f"systemctl --user enable --now {' '.join(ENABLED)} failed: {failed}")
        s.note(f"enabled and started {' and '.join(ENABLED)}")
    else:
        s.note(f"start them with: systemctl --user enable --now {' '.join(ENABLED)}")


@systemd.command()
def uninstall() -> None:
    """Stop and disable the units `systemd install` wrote, remove them, and reload.

    Unit files that relayctl did not write are left alone (with a warning).

    \b
    Examples:
      relayctl systemd uninstall
    """
    s = settings()
    target = unit_dir()
    present = [name for name in UNITS if os.path.exists(os.path.join(target, name))]
    ours = [name for name in present if _ours(os.path.join(target, name))]
    for name in sorted(set(present) - set(ours)):
        s.warn(f"left {os.path.join(target, name)} alone: relayctl did not write it")
    if not ours:
        s.note(f"no units written by relayctl in {target}")
        return
    failed = systemctl("disable", "--now", *ours)
    if failed:
        s.warn(f"systemctl --user disable --now failed ({failed}); removing the files anyway")
    for name in ours:
        try:
            os.unlink(os.path.join(target, name))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise click.ClickException(f"cannot remove {os.path.join(target, name)}: {exc.strerror or exc}") from None
        s.note(f"removed {os.path.join(target, name)}")
    failed = systemctl("daemon-reload")
    if failed:
        s.warn(f"systemctl --user daemon-reload failed ({failed}); run it in your login session")
