"""Waking the orchestrator (seed 004 §3.6): three layers, tried in order.

  gateway  run the configured gateway command with the text as its last argument
  socket   write one JSON line to the configured gateway Unix socket
With neither configured, both come from OpenClaw's own config when it exists
(`relayd.team.openclaw`): the `openclaw` command, and its gateway's HTTP wake hook.
  file     write `wake/last-message` and touch `wake/trigger` (a systemd path unit or any
           inotify watcher picks it up); always works while the store is writable

The first two run in the calling process (they start programs and open sockets, which
the daemon should not do on a client's behalf); the file layer is the store operation
`wake_trigger`, so it goes through relayd like every other write.
"""

from __future__ import annotations

import json
from contextlib import closing
import os
import shlex
import socket
import subprocess
import time
from typing import Any, Callable

import msgspec

from .. import layout
from ..config import Config, load_config
from ..errors import RelayError, UsageError, WakeFailed
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..wire import peer
from ..timefmt import now_iso, parse_duration
from .openclaw import OpenClawConfigError, config_path, discover, wake_by_hook

METHODS = ("gateway", "socket", "file")
MAX_TEXT = 4096
_SOCKET_REPLY_WAIT = 0.5
RETRY_WAITS = (0.1, 0.3, 0.9, 2.7)  # before each further try of a gateway that may be restarting
sleep = time.sleep  # replaced in tests (no real waiting)


# -- the file layer (a store operation) ----------------------------------------------------


class WakeTriggerParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str
    agent: str | None = None


class WakeTriggerResult(msgspec.Struct, kw_only=True):
    trigger: str
    last_message: str
    ts: str


@operation("wake_trigger", WakeTriggerParams)
def wake_trigger(store: Store, p: WakeTriggerParams) -> WakeTriggerResult:
    """Wake by file: write wake/last-message, then touch wake/trigger for the watcher."""
    if p.agent is not None:
        check_agent_name(p.agent)
    if len(p.text) > MAX_TEXT:
        raise UsageError(f"wake text is too long ({len(p.text)} characters, at most {MAX_TEXT})")
    folder = store.top(layout.WAKE)
    stamp = now_iso()
    folder.replace(layout.WAKE_LAST_MESSAGE, p.text.encode() + b"\n", store.sync)
    # Written in place (not renamed) so path watchers see a plain modification.
    fd = folder.open(layout.WAKE_TRIGGER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, f"{stamp} {p.agent or '-'}\n".encode())
        store.sync.file(fd)
    finally:
        os.close(fd)
    store.emit(store.event("wake", action="wake", agent=p.agent, subject=p.text[:120]))
    return WakeTriggerResult(
        trigger=os.path.join(folder.path, layout.WAKE_TRIGGER),
        last_message=os.path.join(folder.path, layout.WAKE_LAST_MESSAGE),
        ts=stamp,
    )


# -- the gateway layers -----------------------------------------------------------------------


def gateway_argv(config: Config) -> list[str] | None:
    command = config.wake.gateway_command
    if not command:
        return None
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return [os.path.expanduser(argv[0]), *argv[1:]] if argv else None


class _Discovered:
    """OpenClaw's gateway, looked up once per wake and only when config.json names no
    gateway at all (`relayd.team.openclaw`); `problem` says why it is not usable."""

    def __init__(self, config: Config) -> None:
        self.gateway = None
        self.problem: str | None = None
        if config.wake.gateway_command or config.wake.gateway_socket:
            return

        try:
            self.gateway = discover()
        except OpenClawConfigError as exc:
            self.problem = str(exc)
            return
        if self.gateway is None:
            self.problem = f"and no {config_path() or '~/.openclaw/openclaw.json'}"

    def command(self) -> tuple[list[str] | None, str]:
        if self.gateway is None:
            return None, f"no gateway_command in config.json{', ' + self.problem if self.problem else ''}"
        if self.gateway.command is None:
            return None, f"no gateway_command in config.json, and no openclaw command on PATH for {self.gateway.config_path}"
        return self.gateway.command, ""

    def hook_missing(self) -> str | None:
        if self.gateway is None:
            return f"no gateway_socket in config.json{', ' + self.problem if self.problem else ''}"
        if self.gateway.hook_url is None:
            return f"no gateway_socket in config.json, and {self.gateway.config_path} enables no hooks (hooks.enabled, hooks.token)"
        return None


def by_gateway(config: Config, text: str, found: _Discovered | None = None) -> str | None:
    """None on success, else why it failed. A gateway that is restarting (it exits
    non-zero) is tried again `wake.retries` times, after RETRY_WAITS."""
    return _with_retries(config, lambda: _gateway_once(config, text, found))


def _gateway_once(config: Config, text: str, found: _Discovered | None) -> tuple[str | None, bool]:
    """(why it failed or None, whether trying again may help)."""
    argv = gateway_argv(config)
    if argv is None and found is not None:
        argv, why = found.command()
        if argv is None:
            return why, False
    if argv is None:
        return "no gateway_command in config.json", False
    timeout = parse_duration(config.wake.timeout).total_seconds()
    try:
        done = subprocess.run(argv + [text], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    except FileNotFoundError:
        return f"{argv[0]} not found", False
    except PermissionError:
        return f"{argv[0]} is not executable", False
    except subprocess.TimeoutExpired:
        return f"{argv[0]} did not finish within {config.wake.timeout}", False
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}", True
    if done.returncode != 0:
        said = " ".join(done.stderr.decode(errors="replace").split())[:200]
        return f"{argv[0]} exited {done.returncode}" + (f": {said}" if said else ""), True
    return None, False


def by_socket(config: Config, text: str, agent: str | None, found: _Discovered | None = None) -> str | None:
    """One JSON line `{"type":"wake","text":...,"from":...,"ts":...}` to the gateway socket.

    Success is the line written; a reply line saying `"ok": false` counts as failure.
    With no socket configured, OpenClaw's wake hook if its config enables one.
    A socket that is missing or refuses connections (its server restarting) is tried
    again `wake.retries` times, after RETRY_WAITS.
    """
    return _with_retries(config, lambda: _socket_once(config, text, agent, found))


def _socket_once(config: Config, text: str, agent: str | None, found: _Discovered | None) -> tuple[str | None, bool]:
    path = config.wake.gateway_socket
    if not path and found is not None:
        missing = found.hook_missing()
        if missing:
            return missing, False

        assert found.gateway is not None
        return wake_by_hook(found.gateway, text, parse_duration(config.wake.timeout).total_seconds()), False
    if not path:
        return "no gateway_socket in config.json", False
    path = os.path.expanduser(path)
    timeout = parse_duration(config.wake.timeout).total_seconds()
    line = json.dumps({"type": "wake", "text": text, "from": agent, "ts": now_iso()}).encode() + b"\n"
    try:
        with closing(peer.connect(path, timeout)) as sock:  # this user's socket and process, or nothing is sent
            sock.sendall(line)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(_SOCKET_REPLY_WAIT)
            try:
                reply = sock.recv(4096)
            except (socket.timeout, ConnectionResetError):
                reply = b""
    except peer.ForeignSocket as exc:
        return str(exc), False  # not retried: another user's socket stays another user's
    except FileNotFoundError:
        return f"{path}: no such socket", True
    except ConnectionRefusedError as exc:
        return f"{path}: {exc.strerror or exc}", True
    except (socket.timeout, OSError) as exc:
        return f"{path}: {getattr(exc, 'strerror', None) or exc}", False
    if reply.strip():
        try:
            answer = json.loads(reply.splitlines()[0])
        except ValueError:
            return None, False
        if isinstance(answer, dict) and answer.get("ok") is False:
            return f"{path} refused: {answer.get('error') or answer}", False
    return None, False


def _with_retries(config: Config, attempt: Callable[[], tuple[str | None, bool]]) -> str | None:
    """Measured by benchmarks/bench_wake.py: one try reaches a receiver that restarts
    now and then about 3 times in 4; waiting a moment and trying again reaches it."""
    error, transient = attempt()
    for wait in RETRY_WAITS[: max(0, config.wake.retries)]:
        if error is None or not transient:
            break
        sleep(wait)
        error, transient = attempt()
    return error


def wake(store: Store, call: Callable[[str, dict], Any], text: str, method: str | None = None, agent: str | None = None, layers: tuple[str, ...] = METHODS) -> dict:
    """Try the layers in order (or only `method`); the first that works wins.

    Returns {"ok", "method", "tried": [{"method", "ok", "error"?}]}; raises WakeFailed
    when a forced method (or every layer) failed.
    """
    if method is not None and method not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, not {method!r}")
    if not text.strip():
        raise UsageError("wake text is empty")
    if len(text) > MAX_TEXT:
        raise UsageError(f"wake text is too long ({len(text)} characters, at most {MAX_TEXT})")
    config = load_config(store)
    found = _Discovered(config)
    tried: list[dict] = []
    for layer in (method,) if method else layers:
        if layer == "file":
            try:
                result = call("wake_trigger", {"text": text, "agent": agent})
            except RelayError as exc:
                tried.append({"method": "file", "ok": False, "error": exc.message})
                continue
            tried.append({"method": "file", "ok": True})
            return {"ok": True, "method": "file", "tried": tried, "trigger": result["trigger"]}
        error = by_gateway(config, text, found) if layer == "gateway" else by_socket(config, text, agent, found)
        tried.append({"method": layer, "ok": error is None, **({"error": error} if error else {})})
        if error is None:
            return {"ok": True, "method": layer, "tried": tried}
    reasons = "; ".join(f"{t['method']}: {t.get('error')}" for t in tried)
    raise WakeFailed(f"wake failed ({reasons})", tried=tried)


def forward_pending(store: Store) -> dict:
    """For the systemd path unit: hand `wake/last-message` to the gateway or the socket."""
    raw = store.top(layout.WAKE).read_bytes(layout.WAKE_LAST_MESSAGE)
    text = (raw or b"").decode(errors="replace").strip() or "relay wake"
    return wake(store, lambda op, params: None, text, None, None, layers=("gateway", "socket"))
