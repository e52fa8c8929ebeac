"""Finding the OpenClaw gateway when config.json names no gateway (seed 004 US-015, Q5).

The orchestrator in seed 004 runs on OpenClaw, whose settings live in
`~/.openclaw/openclaw.json` (or `$OPENCLAW_CONFIG_PATH`), a JSON5 file. OpenClaw's
gateway has no Unix socket to write to: it listens on a loopback TCP port
(`gateway.port`, default 18789) and, when `hooks.enabled` is true, accepts
`POST <hooks.path>/wake` with `{"text": ..., "mode": "now"}` and the bearer token
`hooks.token` — the direct way to wake it, no Node.js process spawned. The other way is
the `openclaw` command (`openclaw system event --mode now --text TEXT`), which reads the
same file to find its gateway. Only these keys are read; nothing is written there, and
only 127.0.0.1 is ever contacted, whatever `gateway.bind` says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass

DEFAULT_PORT = 18789
DEFAULT_HOOKS_PATH = "/hooks"
MAX_CONFIG_BYTES = 1 << 20


class OpenClawConfigError(Exception):
    """openclaw.json exists but cannot be used; the message says why, in one line."""


@dataclass(frozen=True)
class Gateway:
    config_path: str
    command: list[str] | None  # argv; the wake text is appended
    hook_url: str | None  # http://127.0.0.1:PORT/PATH/wake
    token: str | None

    def describe_hook(self) -> str:
        return f"OpenClaw hook {self.hook_url} (from {self.config_path})"


def config_path(env: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    env = os.environ if env is None else env
    if env.get("OPENCLAW_CONFIG_PATH"):
        return os.path.expanduser(env["OPENCLAW_CONFIG_PATH"])
    home = env.get("HOME")
    return os.path.join(home, ".openclaw", "openclaw.json") if home else None


def discover(env: dict[str, str] | os._Environ[str] | None = None) -> Gateway | None:
    """The gateway OpenClaw's config describes; None when there is no config file."""
    env = os.environ if env is None else env
    path = config_path(env)
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OpenClawConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise OpenClawConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(json5_to_json(raw.decode()))
    except (UnicodeDecodeError, ValueError) as exc:
        raise OpenClawConfigError(f"{path} is not readable JSON5: {exc}") from None
    if not isinstance(config, dict):
        raise OpenClawConfigError(f"{path} does not hold an object")
    gateway = config.get("gateway") if isinstance(config.get("gateway"), dict) else {}
    hooks = config.get("hooks") if isinstance(config.get("hooks"), dict) else {}
    port = gateway.get("port", DEFAULT_PORT)
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise OpenClawConfigError(f"{path}: gateway.port is not a port number: {port!r}")
    hook_url = token = None
    if hooks.get("enabled") is True and isinstance(hooks.get("token"), str):
        token = _substitute(hooks["token"], env)
        base = hooks.get("path") if isinstance(hooks.get("path"), str) and hooks["path"].startswith("/") else DEFAULT_HOOKS_PATH
        hook_url = f"http://127.0.0.1:{port}{base.rstrip('/')}/wake"
    program = shutil.which("openclaw", path=env.get("PATH"))
    command = [program, "system", "event", "--mode", "now", "--text"] if program else None
    return Gateway(config_path=path, command=command, hook_url=hook_url, token=token or None)


def _substitute(value: str, env: dict[str, str] | os._Environ[str]) -> str:
    """OpenClaw's `${VAR}` references in config values."""
    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}", lambda m: env.get(m.group(1), ""), value)


def wake_by_hook(gateway: Gateway, text: str, timeout: float) -> str | None:
    """POST the wake to the gateway's hook; None on a 2xx answer, else why not."""
    # deferred imports: http.client only when a wake goes to a gateway over HTTP
    import http.client
    from urllib.parse import urlsplit

    assert gateway.hook_url is not None
    url = urlsplit(gateway.hook_url)
    body = json.dumps({"text": text, "mode": "now"}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", url.port, timeout=timeout)
    try:
        connection.request("POST", url.path, body=body, headers={"Content-Type": "application/json", "Authorization": f"Bearer {gateway.token}"})
        answer = connection.getresponse()
        said = " ".join(answer.read(300).decode(errors="replace").split())
    except (OSError, http.client.HTTPException) as exc:
        return f"{gateway.hook_url}: {getattr(exc, 'strerror', None) or exc}"
    finally:
        connection.close()
    if 200 <= answer.status < 300:
        return None
    return f"{gateway.hook_url} answered {answer.status}" + (f": {said}" if said else "")


def json5_to_json(text: str) -> str:
    """The JSON5 that config files use (comments, trailing commas, unquoted keys,
    single-quoted strings) rewritten as JSON; anything else is left for json to refuse."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j, chars = i + 1, []
            while j < n and text[j] != c:
                if text[j] == "\\" and j + 1 < n:
                    pair = text[j : j + 2]
                    chars.append("'" if pair == "\\'" else pair)
                    j += 2
                    continue
                chars.append('\\"' if text[j] == '"' else text[j])
                j += 1
            if j >= n:
                raise ValueError(f"unterminated string at character {i}")
            out.append('"' + "".join(chars) + '"')
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError(f"unterminated comment at character {i}")
            i = end + 2
        elif c.isalpha() or c in "_$":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            word = text[i:j]
            out.append(word if word in ("true", "false", "null") else json.dumps(word))
            i = j
        elif c in "}]":
            k = len(out) - 1
            while k >= 0 and out[k].isspace():
                k -= 1
            if k >= 0 and out[k] == ",":
                del out[k]
            out.append(c)
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)
