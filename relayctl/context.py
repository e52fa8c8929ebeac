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


class Settings:
    __slots__ = ("agent", "store_dir", "socket", "json", "quiet", "_client")

    def __init__(self, agent: str | None, store_dir: str | None, socket: str | None, json: bool, quiet: bool, client: Any = None) -> None:
        self.agent = agent
        self.store_dir = store_dir
        self.socket = socket
        self.json = json
        self.quiet = quiet
        self._client = client

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
                f"{what} needs your agent name: pass --agent NAME before the command, or set OVLD_ROLE or RELAY_AGENT; "
                "relay never assumes one, such as the hostname, that several agents would share"
            )
        return self.agent

    def client(self) -> Any:
        if self._client is None:
            from relayd.client import Client

            self._client = Client(self.dir, self.socket)
        return self._client

    def call(self, op: str, params: dict[str, Any] | None = None) -> Any:
        params = params or {}
        _refuse_undecodable(params)
        return self.client().call(op, params)

    def out(self, data: Any, human: Callable[[Any], str | None] | None = None) -> None:
        """Print `data` as JSON with --json, else `human(data)`; --quiet prints nothing."""
        if self.json:
            import json  # only here: most runs print text, and every millisecond of start-up shows

            echo(json.dumps(data, ensure_ascii=False, indent=None))
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


def settings() -> Settings:
    import click

    return click.get_current_context().find_object(Settings)  # type: ignore[return-value]


def echo(text: str, err: bool = False, nl: bool = True) -> None:
    """Text (with a newline unless `nl` is false) to stdout or stderr, byte for byte as
    `click.echo` prints it, without loading click for the usual case. click strips ANSI
    escape sequences when the stream is not a terminal (a message body cannot colour a log
    file) and re-encodes a stream misconfigured as ASCII: for those rare lines it is
    click.echo itself that prints."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if ("\x1b" in text and not _isatty(stream)) or (getattr(stream, "encoding", None) or "").lower() not in ("utf-8", "utf8"):
        import click

        click.echo(text, err=err, nl=nl)
        return
    stream.write(text + "\n" if nl else text)
    stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


def fail(message: str, status: int) -> None:
    """The one-line `error:` report every refusal ends in; the caller exits with `status`."""
    line = " ".join(str(message).split())
    echo(f"error: {line}", err=True)


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
