"""`relayctl mime`: IGNITE message files (build, parse, edit; import into relay, export)."""

from __future__ import annotations

import json
import sys

import click

from relayd.ignite import mime
from relayd.errors import RelayError, UsageError

from .context import echo, settings, visible


class _Greedy(click.Command):
    """Options that take several values after one flag (`--to a b c`), as IGNITE's tool
    accepts them; rewritten to click's repeated form (`--to a --to b --to c`)."""

    greedy: tuple[str, ...] = ()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        current: str | None = None  # the greedy flag whose values are being read
        for arg in args:
            if arg.startswith("-") and arg != "-":
                flag, eq, _ = arg.partition("=")
                current = flag if flag in self.greedy and not eq else None
                if current is None:
                    out.append(arg)  # a flag given no values at all is dropped, as IGNITE's tool allows
            elif current is not None:
                out += [current, arg]
            else:
                out.append(arg)
        return super().parse_args(ctx, out)


def greedy(*flags: str):
    return type("GreedyCommand", (_Greedy,), {"greedy": flags})


HELP = """IGNITE message files: RFC 2045 headers and a YAML body, one message per .mime file.

The same subcommands, arguments and flags as IGNITE's own message tool, so scripts
written for it work unchanged; edits replace the file atomically. `send` and `export`
move messages between files and relay.

\b
Examples:
  relayctl mime build --from coordinator --to ignitian_1 --type task_assignment \\
      --priority high --repo owner/repo --issue 42 --body 'task_id: "task_001"' \\
      -o queue/ignitian_1/task_assignment_$(date +%s%6N).mime
  relayctl mime parse queue/ignitian_1/processed/task_assignment_1770263544123456.mime
  relayctl mime extract-body message.mime
  relayctl mime update-status message.mime delivered --processed-at "$(date -Iseconds)"
  relayctl mime update-header message.mime X-IGNITE-Retry-Count 3
  relayctl mime remove-header message.mime X-IGNITE-Error-Reason
  relayctl mime send message.mime          # into relay: From/To/Type/... become the message
  relayctl mime export 01J... -o out.mime  # a relay message as a file
"""


@click.group("mime", help=HELP)
def mime_group() -> None:
    pass


@mime_group.command(cls=greedy("--to", "--cc"))
@click.option("--from", "from_", required=True, metavar="AGENT", help="Sender.")
@click.option("--to", multiple=True, required=True, metavar="AGENT...", help="Recipients (one or more after one --to).")
@click.option("--cc", multiple=True, metavar="AGENT...", help="Copies (zero or more).")
@click.option("--type", "type_", required=True, metavar="TYPE", help="X-IGNITE-Type, e.g. task_assignment.")
@click.option("--priority", default="normal", show_default=True, type=click.Choice(mime.PRIORITIES), help="X-IGNITE-Priority.")
@click.option("--thread-id", metavar="ID", help="X-IGNITE-Thread-ID.")
@click.option("--in-reply-to", metavar="MESSAGE-ID", help="In-Reply-To.")
@click.option("--repo", metavar="OWNER/REPO", help="X-IGNITE-Repository.")
@click.option("--issue", metavar="N", help="X-IGNITE-Issue.")
@click.option("--status", metavar="STATUS", help="X-IGNITE-Status.")
@click.option("--body", metavar="YAML", help="The body text.")
@click.option("--body-file", metavar="FILE", help="Read the body from FILE ('-' for stdin).")
@click.option("--output", "-o", metavar="FILE", help="Write to FILE (atomically) instead of stdout.")
def build(from_, to, cc, type_, priority, thread_id, in_reply_to, repo, issue, status, body, body_file, output) -> None:
    """Build a message: IGNITE's headers in IGNITE's order, then the body.

    \b
    Examples:
      relayctl mime build --from user --to leader --type user_goal --priority high \\
          --body 'goal: "write the README"' -o queue/leader/user_goal_$(date +%s%6N).mime
      relayctl mime build --from coordinator --to ignitian_1 ignitian_2 --type task_assignment --body-file task.yaml
    """
    if body_file:
        text = _read_text(body_file).replace("\r\n", "\n")  # line ends as IGNITE's tool writes them (LF)
    else:
        text = body or ""
    message = mime.build(
        from_=from_, to=list(to), cc=list(cc), type_=type_, body=text, priority=priority,
        thread_id=thread_id, in_reply_to=in_reply_to, repository=repo, issue=issue, status=status,
    )
    if output:
        mime.write_atomic(output, message)
    else:
        echo(message.to_text(), nl=False, exact=True)


def _read_text(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as file:
                data = file.read()
    except OSError as exc:
        raise RelayError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RelayError(f"{path} is not UTF-8 text (byte {exc.start})") from None


@mime_group.command()
@click.argument("file")
def parse(file: str) -> None:
    """Print a message as JSON: message_id, from, to[], cc[], date, in_reply_to, type,
    priority, thread_id, repository, issue, status, content_type, body, and every other
    X-IGNITE-* header in snake_case (X-IGNITE-Retry-Count -> retry_count).

    \b
    Examples:
      relayctl mime parse queue/leader/processed/user_goal_1738315200123456.mime
      relayctl mime parse message.mime | jq -r .type
    """
    echo(visible(json.dumps(mime.read_file(file).fields(), ensure_ascii=False, indent=2), json=True))


@mime_group.command("extract-body")
@click.argument("file")
def extract_body(file: str) -> None:
    """Print only the body (the YAML), as IGNITE's tool prints it (line ends as LF; on a
    terminal, control characters are shown as escapes).

    \b
    Example:
      relayctl mime extract-body message.mime | grep task_id
    """
    echo(mime.read_file(file).text_body(), nl=False, exact=True)


@mime_group.command("update-status", cls=greedy("--extra"))
@click.argument("file")
@click.argument("status")
@click.option("--processed-at", metavar="TIME", help="Also set X-IGNITE-Processed-At.")
@click.option("--extra", multiple=True, metavar="HEADER=VALUE...", help="Also set these headers.")
def update_status(file: str, status: str, processed_at: str | None, extra: tuple[str, ...]) -> None:
    """Set X-IGNITE-Status (and optionally more headers), replacing FILE atomically.

    \b
    Examples:
      relayctl mime update-status message.mime delivered --processed-at "$(date -Iseconds)"
      relayctl mime update-status message.mime retrying --extra X-IGNITE-Retry-Count=2
    """
    changes: list[tuple[str, str | None]] = [(mime.PREFIX + "Status", status)]
    if processed_at:
        changes.append((mime.PREFIX + "Processed-At", processed_at))
    for pair in extra:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--extra {pair!r}: use HEADER=VALUE")
        changes.append((key, value))
    mime.update_file(file, changes)


@mime_group.command("update-header")
@click.argument("file")
@click.argument("header")
@click.argument("value")
def update_header(file: str, header: str, value: str) -> None:
    """Set HEADER to VALUE (in place when present, else appended), atomically.

    \b
    Example:
      relayctl mime update-header message.mime X-IGNITE-Retry-Count 3
    """
    mime.update_file(file, [(header, value)])


@mime_group.command("remove-header")
@click.argument("file")
@click.argument("header")
def remove_header(file: str, header: str) -> None:
    """Remove every HEADER line (with its folded continuation), atomically.

    \b
    Example:
      relayctl mime remove-header message.mime X-IGNITE-Error-Reason
    """
    mime.update_file(file, [(header, None)])


def send_files(files: tuple[str, ...]) -> None:
    """Send each file's message through relay (used by `mime send` and `send --mime`)."""
    # deferred imports: `relayctl --help` loads every command module; the MIME converter loads only
    # for the commands that convert
    from relayd.ignite import convert

    s = settings()
    planned = [convert.to_send_params(mime.read_file(path), path) for path in files]  # all parse, or none is sent
    sent = []
    for path, params in zip(files, planned):
        result = s.call("send", params)
        for failure in result.get("notifications", []):
            if not failure.get("ok", True):
                s.warn(f"notifying {failure.get('agent')} failed: {failure.get('error')}")
        sent += result["messages"]
        if not s.json:
            s.note(f"sent {path}: " + ", ".join(f"{m['id']} to {m['to']}" for m in result["messages"]))
    if s.json:
        s.out(sent)


@mime_group.command("send")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
def send(files: tuple[str, ...]) -> None:
    """Send message files into relay: From is the sender, To and Cc the recipients,
    X-IGNITE-Type the type, Thread-ID the thread, Priority the priority (critical = urgent),
    Repository/Issue become the tags repo:... and issue:...; the body is kept byte for byte.

    \b
    Examples:
      relayctl mime send queue/ignitian_1/task_assignment_1770263544123456.mime
      relayctl --json mime send *.mime
    """
    send_files(files)


@mime_group.command("export")
@click.argument("message_id", metavar="ID")
@click.option("--output", "-o", metavar="FILE", help="Write to FILE (atomically) instead of stdout.")
def export(message_id: str, output: str | None) -> None:
    """Write relay message ID as an IGNITE message file. Looks in your inbox (--agent),
    or in every inbox without one.

    \b
    Examples:
      relayctl mime export 01JC3Z... -o queue/leader/processed/task_completed_$(date +%s%6N).mime
      relayctl --agent leader mime export 01JC3Z...
    """
    from relayd.ignite import convert

    s = settings()
    store = s.client().store()
    store.require_existing()
    message = convert.from_message(convert.find_message(store, message_id, s.agent))
    if output:
        mime.write_atomic(output, message)
    else:
        echo(message.to_text(), nl=False, exact=True)
