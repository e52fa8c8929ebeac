"""Claude Code's cross-session inbox, the formats only (no I/O): what relay reads and writes.

Claude Code (2.1.224 and later; tested: `TESTED_VERSION`) listens in every interactive
session on a Unix socket, `$XDG_RUNTIME_DIR/cc-socks/<pid>.sock` (or
`/tmp/cc-socks-<uid>/<pid>.sock` when that path is too long or there is no runtime
directory), the directory 0700 and the socket 0600. It names the socket to its children
(`CLAUDE_CODE_MESSAGING_SOCKET`, and a token for them, `CLAUDE_CODE_MESSAGING_TOKEN`) and
records the session in `~/.claude/sessions/<pid>.json` (`SessionRecord`), with a key file
beside it, `<pid>.<sha256 of the socket path>.key` (0600: `KeyFile`), whose `peerToken`
lets a process of the same user speak as a peer.

The wire is newline-delimited JSON, one object a line, at most `MAX_LINE` characters
(Claude Code drops a connection whose line grows past it). A peer opens with an auth line
and then writes messages:

    {"type": "auth", "token": "<peerToken>"}
    {"type": "user", "message": {"content": "..."}, "from": "uds:<sender socket>",
     "msgV": 1, "msg_id": "<uuid>"}

Claude Code puts the content in front of the model as "another session sent a message ...
not typed by your user" (queued while a tool runs or a question is open, never answering
it). A sender with a socket of its own gets `peer_message_status` receipts on it:

    {"type": "control", "action": "peer_message_status", "status": "held" | "delivered" |
     "denied" | "expired" | "refused" | "dropped", "orig_msg_id": "<uuid>", ...}

(`expired` with `status_detail: "refused"` is a refusal). Everything here is pinned by
tests/arrival/test_claude_inbox_format.py against the tested version; a record whose
`peerProtocol` is not `PEER_PROTOCOL` makes relay fall back to the pane or channel
(`unusable`).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Iterator

import msgspec

from ..layout import sha256_hex
from .for_models import PEER_CUT, field, peer_head, quoted

TESTED_VERSION = "2.1.332"
PEER_PROTOCOL = 1  # the session record's `peerProtocol` this code speaks
MSG_V = 1  # a message's `msgV`
MAX_LINE = 1_048_576  # characters a line may have before Claude Code closes the connection
MAX_SOCKET_PATH = 103  # bytes: longer socket paths do not fit sockaddr_un; Claude Code falls back to /tmp
SOCKET_ENV = "CLAUDE_CODE_MESSAGING_SOCKET"
TOKEN_ENV = "CLAUDE_CODE_MESSAGING_TOKEN"
SWITCH_ENV = "CLAUDE_CODE_HARBOR_KITE"  # "0" turns the inbox off
RECEIPT_STATUSES = ("held", "delivered", "denied", "expired", "refused", "dropped")
VIA_CLAUDE_CODE = "via-claude-code"  # the tag of mail a Claude Code model sent (relayd.arrival.claude_peer_agents): never written back into a Claude Code inbox
PREVIEW = 1500  # characters of a body put into the peer message; the rest is read from relay
# Claude Code admits peer messages per sender through a token bucket (2.1.332: 30 at once,
# then one every 2 s) and drops the rest with a `dropped` receipt, `drop_reason`
# "rate-limited" (or "queue-full" when its own queue is): relay paces itself by the same
# bucket and writes what a round has as one peer message, and mail dropped so is written again.
BUCKET_CAPACITY = 30
REFILL_PER_SECOND = 0.5
RETRIED_DROPS = ("rate-limited", "queue-full")
_SOCKET_NAME = re.compile(r"^(\d+)\.sock$")
_TOKEN = re.compile(r"^[0-9a-f]{32}$")


class SessionRecord(msgspec.Struct, kw_only=True):
    """`~/.claude/sessions/<pid>.json`, the fields relay uses (Claude Code writes more)."""

    pid: int
    sessionId: str | None = None
    cwd: str | None = None
    procStart: str | None = None  # the process's start time, /proc/<pid>/stat field 22
    version: str | None = None
    peerProtocol: int | None = None
    kind: str | None = None  # "interactive" for a session in a terminal
    messagingSocketPath: str | None = None
    name: str | None = None
    status: str | None = None  # "idle" or "busy"


class KeyFile(msgspec.Struct, kw_only=True):
    peerToken: str
    procStart: str | None = None


class Receipt(msgspec.Struct, kw_only=True):
    """One `peer_message_status` line, read."""

    status: str  # one of RECEIPT_STATUSES
    msg_id: str
    detail: str | None = None


_record = msgspec.json.Decoder(SessionRecord)
_key = msgspec.json.Decoder(KeyFile)


def socket_dirs(runtime_dir: str | None, uid: int) -> list[str]:
    """The directories Claude Code puts its sockets in, in the order it tries them."""
    dirs = [os.path.join(runtime_dir, "cc-socks")] if runtime_dir else []
    return dirs + [f"/tmp/cc-socks-{uid}"]


def pid_of_socket(path: str) -> int | None:
    """The session's pid from its socket's name (`<pid>.sock`); None for any other name."""
    found = _SOCKET_NAME.match(os.path.basename(path))
    return int(found.group(1)) if found else None


def record_name(pid: int) -> str:
    return f"{pid}.json"


def key_name(pid: int, socket_path: str) -> str:
    """The key file's name: the pid and the SHA-256 of the socket's absolute path."""
    return f"{pid}.{sha256_hex(os.path.normpath(socket_path).encode())}.key"


def decode_record(raw: bytes) -> SessionRecord | None:
    try:
        return _record.decode(raw)
    except msgspec.DecodeError:
        return None


def decode_key(raw: bytes) -> str | None:
    """The peer token from a key file; None for anything else."""
    try:
        token = _key.decode(raw).peerToken
    except msgspec.DecodeError:
        return None
    return token if _TOKEN.match(token) else None


def unusable(record: SessionRecord, socket_path: str) -> str | None:
    """Why relay cannot write to this session's inbox (one line), or None when it can."""
    if record.peerProtocol != PEER_PROTOCOL:
        return f"its inbox speaks peer protocol {record.peerProtocol!r}; relay knows {PEER_PROTOCOL} (Claude Code {TESTED_VERSION})"
    if record.messagingSocketPath != socket_path:
        return "its session record names another socket"
    if record.kind not in (None, "interactive"):
        return f"it is a {record.kind} session, not an interactive one"
    return None


def auth_line(token: str) -> bytes:
    return _line({"type": "auth", "token": token})


def message_line(content: str, sender_socket: str | None = None, msg_id: str | None = None) -> tuple[str, bytes]:
    """(msg_id, line) of one peer message; `sender_socket` is where receipts should go."""
    msg_id = msg_id or str(uuid.uuid4())
    frame: dict = {"type": "user", "message": {"content": content}, "msgV": MSG_V, "msg_id": msg_id}
    if sender_socket:
        frame["from"] = f"uds:{sender_socket}"
    return msg_id, _line(frame)


def _line(frame: dict) -> bytes:
    line = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
    if len(line) > MAX_LINE:
        raise ValueError(f"a peer message of {len(line)} characters is longer than Claude Code takes ({MAX_LINE})")
    return line.encode() + b"\n"


def mail_text(agent: str, message: dict) -> str:
    """The peer message that tells the model of one relay message: who sent it, its
    subject and id, the body (a bounded preview), and how to read all of it. It says it
    is relay mail, never the person's words."""
    body = (message.get("body") or "").rstrip("\n")
    cut = len(body) > PREVIEW
    if cut:
        body = body[:PREVIEW] + "…"
    # Every field one line, escaped as `relayctl read` shows it, and every body line quoted
    # (relayd.arrival.for_models): nothing in a message can pass for a second one's header.
    extras = [f"thread {field(message['thread'])}"] if message.get("thread") else []
    if message.get("priority", "normal") != "normal":
        extras.append(field(message["priority"]))
    tail = f" [{', '.join(extras)}]" if extras else ""
    lines = [
        peer_head(agent, message["from"], message["id"], tail),
        f"subject: {field(message.get('subject') or '')}",
    ]
    if body and body != message.get("subject"):
        lines += ["", *quoted(body)]
    read = "check_inbox (relay's MCP tool) or `relayctl read --unread --mark-read`"
    lines += ["", (f"{PEER_CUT}{PREVIEW} characters: read all of it with {read}." if cut
                   else f"It stays unread in relay until you read it with {read}; reply with send_message or `relayctl send {field(message['from'])}`.")]
    return "\n".join(lines)


class LineReader:
    """Bounded NDJSON framing for what Claude Code writes to relay's socket: feed bytes,
    get the complete lines' JSON objects; a line longer than MAX_LINE is an error."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Iterator[dict]:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > MAX_LINE:
                    raise ValueError(f"a line longer than {MAX_LINE} characters")
                return
            line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
            try:
                frame = json.loads(line)
            except ValueError:
                continue  # Claude Code skips a line it cannot parse: so does relay
            if isinstance(frame, dict):
                yield frame


_ENVELOPE = re.compile(r"^\s*<cross-session-message\b[^>]*>\n?(.*?)\n?</cross-session-message>\s*$", re.DOTALL)


def peer_body(content: str) -> str:
    """The text a Claude Code model sent with SendMessage, without the envelope Claude Code
    puts around it (`<cross-session-message from=... from-name=...>` ... `</cross-session-message>`)."""
    found = _ENVELOPE.match(content)
    return (found.group(1) if found else content).strip()


def receipt(frame: dict) -> Receipt | None:
    """A `peer_message_status` receipt from one line; None for any other line."""
    if frame.get("type") != "control" or frame.get("action") != "peer_message_status":
        return None
    status, msg_id = frame.get("status"), frame.get("orig_msg_id")
    if status not in RECEIPT_STATUSES or not isinstance(msg_id, str):
        return None
    if status == "expired" and frame.get("status_detail") == "refused":
        status = "refused"
    detail = frame.get("drop_reason") if status == "dropped" else None
    return Receipt(status=status, msg_id=msg_id, detail=detail if isinstance(detail, str) else None)

