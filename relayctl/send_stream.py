"""`relayctl send --stdin`: one message per line of standard input, many in flight at once.

A shell script that sends thousands of messages pays relayctl's start-up once, not per
message, and waits for no single answer before the next message goes: the lines are sent
through the client's pipeline (relayd.wire.connection.Caller.pipeline), up to its window
in flight, and each is answered on its own once durable.

Each line is a JSON object with the `send` operation's fields: `body` (required), `to` (a
name, comma-separated names or a list; default: the command's TO), `subject`, `thread`,
`priority`, `tags`, `type`, `ack`, `ack_wait`, `max_deliver`, `id`, `broadcast`; the
command's own options are the defaults for every line. The sender is the caller
(`--agent`, RELAY_AGENT): a line cannot name another. Blank lines are skipped.

For every other line one JSON line is printed on stdout, in input order:
`{"line": 3, "ok": true, "id": "01K...", "to": ["bob"]}`, or
`{"line": 4, "ok": false, "error": {"code": "unknown_agent", "message": "..."}}`
(`--quiet`: only the failures). A line that fails never stops the others; exit status 1
when any failed, with a one-line count on stderr.
"""

from __future__ import annotations

import sys

from relayd import jsonline
from relayd.errors import RelayError, UsageError

from .context import Settings, echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterator

FIELDS = ("to", "body", "subject", "thread", "priority", "tags", "type", "ack", "ack_wait", "max_deliver", "id", "broadcast")


class _BadLine(Exception):
    """A line that is no message: reported for that line alone."""


def send_lines(s: Settings, args: tuple[str, ...], defaults: dict[str, Any], lines: Any = None) -> int:
    """Send one message per line of `lines` (default: stdin's bytes); the exit status."""
    if len(args) > 1:
        raise UsageError("with --stdin the messages come from stdin, one JSON object a line: give at most the recipient (relayctl send --stdin TO)")
    sender = s.require_agent("send")
    recipients = [name.strip() for name in args[0].split(",") if name.strip()] if args else []
    source = sys.stdin.buffer if lines is None else lines
    bad: list[tuple[int, str]] = []  # lines that are no message, reported in their place
    numbers: list[int] = []  # the input line of each request sent, in order
    counts = {"sent": 0, "failed": 0}

    def requests() -> Iterator[tuple[str, dict[str, Any]]]:
        for number, raw in enumerate(source, 1):
            if not raw.strip():
                continue
            try:
                params = _message(raw, sender, recipients, defaults)
            except _BadLine as exc:
                bad.append((number, str(exc)))
                continue
            numbers.append(number)
            yield "send", params

    def failure(number: int, code: str, message: str) -> None:
        counts["failed"] += 1
        echo(jsonline.dumps({"line": number, "ok": False, "error": {"code": code, "message": message}}))

    for index, (_, outcome) in enumerate(s.client().pipeline(requests())):
        number = numbers[index]
        _report_bad(bad, number, failure)
        if isinstance(outcome, RelayError):
            failure(number, outcome.code, outcome.message)
            continue
        counts["sent"] += 1
        if not s.quiet:
            messages = outcome["messages"]
            echo(jsonline.dumps({"line": number, "ok": True, "id": messages[0]["id"] if messages else None, "to": [m["to"] for m in messages]}))
    _report_bad(bad, None, failure)
    if counts["failed"]:
        sys.stdout.flush()  # the results first, then the count: in that order in a shared pipe too
        total = counts["failed"] + counts["sent"]
        echo(f"{counts['failed']} of {total} messages failed (their lines above say why)", err=True)
        return 1
    return 0


def _report_bad(bad: list[tuple[int, str]], before: int | None, failure: Any) -> None:
    """Report the bad lines that came before input line `before` (None: all that are left)."""
    while bad and (before is None or bad[0][0] < before):
        number, reason = bad.pop(0)
        failure(number, "invalid_argument", reason)


def _message(raw: bytes, sender: str, recipients: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    try:
        found = jsonline.loads(raw)
    except ValueError:
        raise _BadLine("not a JSON object on one UTF-8 line") from None
    if not isinstance(found, dict):
        raise _BadLine("not a JSON object: each line is one message, e.g. {\"to\": \"bob\", \"body\": \"hi\"}")
    unknown = sorted(set(found) - set(FIELDS))
    if unknown:
        hint = " (the sender is the caller: --agent or RELAY_AGENT)" if {"agent", "from"} & set(unknown) else ""
        raise _BadLine(f"unknown field {unknown[0]!r}{hint}; a line takes {', '.join(FIELDS)}")
    params = dict(defaults, **found)
    params["agent"] = sender
    to = params.get("to", recipients)
    if isinstance(to, str):
        to = [name.strip() for name in to.split(",") if name.strip()]
    params["to"] = to if to else recipients
    if not isinstance(params.get("body"), str):
        raise _BadLine("no body: each line needs \"body\", a string")
    if not params["to"] and not params.get("broadcast"):
        raise _BadLine("no recipient: give \"to\" on the line or TO on the command (relayctl send --stdin TO)")
    if isinstance(params.get("tags"), tuple):
        params["tags"] = list(params["tags"])
    return params
