"""What every command shares: the global options, the client, and output.

Commands get a `Settings` from the click context, call `settings.call(op, params)` and
hand the result to `settings.out(...)`, which prints JSON with `--json` or the
command's human rendering otherwise.

Imports neither click nor anything that loads msgspec or the store: the fast path
(`relayctl.fast`) runs commands with these same Settings and output functions.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself costs ~2 ms of start-up, and the fast path imports this
if TYPE_CHECKING:
    from typing import Any, Callable

from relayd import layout
from relayd.errors import NoIdentity, UsageError
from relayd.arrival.for_models import visible  # (the one escaping of relay's output; relayctl's modules take it from here)


class Settings:
    __slots__ = ("agent", "store_dir", "socket", "json", "quiet", "_client", "printed")

    current: "Settings | None" = None  # this run's, for `fail` (which runs after the command)

    def __init__(self, agent: str | None, store_dir: str | None, socket: str | None, json: bool, quiet: bool, client: Any = None) -> None:
        self.agent = agent
        self.store_dir = store_dir
        self.socket = socket
        self.json = json
        self.quiet = quiet
        self._client = client
        self.printed = False  # JSON went to stdout already
        Settings.current = self

    @property
    def dir(self) -> str:
        if self.store_dir:
            return os.path.abspath(os.path.expanduser(self.store_dir))
        try:
            return layout.default_store_dir()
        except layout.NoHome as exc:
            raise UsageError(str(exc)) from None

    def require_agent(self, what: str = "this command") -> str:
        if not self.agent:
            raise NoIdentity(
                f"{what} needs your agent name: pass --agent NAME before the command, or set RELAY_AGENT (or its alias OVLD_ROLE); "
                "relay never assumes one, such as the hostname, that several agents would share"
            )
        return self.agent

    def client(self) -> Any:
        if self._client is None:
            # deferred imports: relayctl's fast path loads this module without click, json or the
            # full client
            from relayd.client.full import Client

            self._client = Client(self.dir, self.socket)
        return self._client

    def close(self) -> None:
        """The run's connection to relayd (or the store it opened) closed: a process exits
        anyway, but relayctl's main may run again in the same one."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def call(self, op: str, params: dict[str, Any] | None = None) -> Any:
        params = params or {}
        _refuse_undecodable(params)
        return self.client().call(op, params)

    def out(self, data: Any, human: Callable[[Any], str | None] | None = None) -> None:
        """Print `data` as JSON with --json, else `human(data)`; --quiet prints nothing."""
        if self.json:
            echo(json_text(data))
            self.printed = True
            return
        if self.quiet or human is None:
            return
        text = human(data)
        if text:
            echo(text)

    def note(self, text: str) -> None:
        """Non-essential human output: silenced by --quiet and by --json."""
        if not (self.quiet or self.json):
            echo(text)

    def warn(self, text: str) -> None:
        echo(f"warning: {text}", err=True)

    def warn_if_unregistered(self, result: dict, doing: str) -> None:
        """relay takes any --agent name (a script may speak for a name nobody registered),
        but a typo in your own name should not pass unnoticed: replies would go nowhere."""
        if result.get("agent_registered", True) is False:
            self.warn(
                f"{self.agent} is not a registered agent; {doing} as {self.agent} all the same "
                f"(a typo in --agent or RELAY_AGENT? relayctl status lists the agents; relayctl register {self.agent} adds it)"
            )


def settings() -> Settings:
    import click

    return click.get_current_context().find_object(Settings)  # type: ignore[return-value]


def echo(text: str, err: bool = False, nl: bool = True, exact: bool = False) -> None:
    """Text (with a newline unless `nl` is false) to stdout or stderr, shown `visible`
    (newlines and tabs kept), in a pipe as on a terminal: a message body cannot write the
    clipboard or retitle the window of whoever reads the output later. `exact`: a format
    for programs (MIME, a raw body), written unchanged into a pipe and shown visible
    only on a terminal. A stream misconfigured as something other than UTF-8 is left to
    `click.echo`, which re-encodes it."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if not exact or _isatty(stream):
        text = visible(text, lines=True)
    if (getattr(stream, "encoding", None) or "").lower() not in ("utf-8", "utf8"):
        import click

        click.echo(text, err=err, nl=nl)
        return
    stream.write(text + "\n" if nl else text)
    stream.flush()


def json_text(data: Any) -> str:
    """`data` as one line of JSON that is exact and safe on a terminal (see `visible`)."""
    import json  # only here: most runs print text, and every millisecond of start-up shows

    return visible(json.dumps(data, ensure_ascii=False, indent=None), json=True)


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


def installed_command(script: str, module: str) -> list[str]:
    """How another program (an agent program's MCP server list, its hooks) runs one of
    relay's commands: the `script` installed next to this Python (never a version-manager
    shim, which would cost every start tens of milliseconds), else `python -m module`."""
    path = os.path.join(os.path.dirname(sys.executable), script)
    if os.access(path, os.X_OK):
        return [path]
    return [sys.executable, "-m", module]


def fail(message: str, status: int, code: str = "error") -> None:
    """The one-line `error:` report every refusal ends in; the caller exits with `status`.
    With --json, stdout gets the refusal too, as `{"error": {"code", "message"}}` (unless
    the command printed its JSON answer already): a script reads one JSON document either way."""
    line = " ".join(str(message).split())
    current = Settings.current
    if current is not None and current.json and not current.printed:
        import json

        echo(json.dumps({"error": {"code": code, "message": line}}, ensure_ascii=False))
    echo(f"error: {line}", err=True)


def held_line(held: dict) -> str:
    """Why an agent's mail waits (relayd.delivery.held), as status, track and send --wait say it."""
    return f"held: {held['why']}, since {held['since'][11:19]} UTC"


def clip(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _refuse_undecodable(params: dict[str, Any]) -> None:
    """Arguments that were not UTF-8 reach Python as lone surrogates; no JSON can hold them."""
    for key, value in params.items():
        for text in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(text, str):
                try:
                    text.encode()
                except UnicodeEncodeError:
                    raise UsageError(f"{key.replace('_', '-')}: not valid UTF-8 text") from None


def read_body(message: str | None) -> str:
    """The message text; `-` (or nothing, with a pipe on stdin) reads stdin."""
    if message == "-" or (message is None and not sys.stdin.isatty()):
        try:
            return sys.stdin.buffer.read().decode()
        except UnicodeDecodeError as exc:
            raise UsageError(f"the message on stdin is not valid UTF-8 (byte {exc.start})") from None
    if message is None:
        raise UsageError("no message text: give it as an argument, or pipe it in with '-'")
    return message
