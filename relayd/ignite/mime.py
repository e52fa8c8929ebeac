"""The IGNITE message file: RFC 2045 headers, a blank line, a YAML body sent as 8bit text.

Reading goes through the standard library's email parser (headers only, so the body is
kept exactly as written, CRLF and all); writing is done here, in IGNITE's header order for
new files and in the file's own order (and line endings) for edits. Replacing a file is
temp file + fsync + rename + directory fsync, so a reader never sees half a message.
"""

from __future__ import annotations

import errno
import email.parser
import email.policy
import email.utils
import os
import random
import re
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime

from relayd.errors import InvalidMessage as NotAMessage  # (the file is not an IGNITE message)
from relayd.errors import RelayError, UsageError
from relayd.layout import sha256_hex

from ..ulid import ulid_time_ms

PREFIX = "X-IGNITE-"
DOMAIN = "ignite.local"
CONTENT_TYPE = "text/x-yaml; charset=utf-8"
PRIORITIES = ("critical", "high", "normal", "low")
# The X-IGNITE-* headers with a key of their own in the parsed form; any other one appears
# under its suffix in snake_case (X-IGNITE-Retry-Count -> retry_count).
_MAPPED = {"TYPE": "type", "PRIORITY": "priority", "THREAD-ID": "thread_id", "REPOSITORY": "repository", "ISSUE": "issue", "STATUS": "status"}
_HEADER_NAME = re.compile(r"^[!-9;-~]+$")  # RFC 5322 field name: printable ASCII except ':'
_MAX_FILE = 4 << 20
# A header section must hold at least one of these to count as a message (an /etc/passwd
# line is a well-formed 'Name: value' too).
_DEFINING_NAMES = ("MIME-Version", "Message-ID", "From", "To", PREFIX + "Type", "Content-Type")
_DEFINING = {name.lower() for name in _DEFINING_NAMES}


@dataclass
class MimeMessage:
    """Headers in file order with their raw values (folding kept), and the body as written."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    body: str = ""
    eol: str = "\n"

    # -- reading -------------------------------------------------------------------
    def get(self, name: str, default: str | None = None) -> str | None:
        """The first header called `name` (any case), unfolded as IGNITE's tools unfold it."""
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return unfold(value)
        return default

    def get_all(self, name: str) -> list[str]:
        wanted = name.lower()
        return [unfold(value) for key, value in self.headers if key.lower() == wanted]

    def fields(self) -> dict[str, object]:
        """The JSON object IGNITE's `parse` prints, with the same keys in the same order."""
        out: dict[str, object] = {
            "message_id": self.get("Message-ID", ""),
            "from": self.get("From", ""),
            "to": split_list(self.get("To", "")),
            "cc": split_list(self.get("Cc", "")),
            "date": self.get("Date", ""),
            "in_reply_to": self.get("In-Reply-To", ""),
            "type": self.get(PREFIX + "Type", ""),
            "priority": self.get(PREFIX + "Priority", "normal"),
            "thread_id": self.get(PREFIX + "Thread-ID", ""),
            "repository": self.get(PREFIX + "Repository", ""),
            "issue": self.get(PREFIX + "Issue", ""),
            "status": self.get(PREFIX + "Status", ""),
            "content_type": self.get("Content-Type", ""),
            "body": self.text_body(),
        }
        for key, value in self.headers:
            upper = key.upper()
            if upper.startswith(PREFIX) and upper[len(PREFIX) :] not in _MAPPED:
                out[key[len(PREFIX) :].lower().replace("-", "_")] = unfold(value)
        return out

    def text_body(self) -> str:
        """The body as IGNITE's tool reads it (Python text mode: CRLF and CR become LF);
        `body` itself keeps the file's bytes for writing it back."""
        return self.body.replace("\r\n", "\n").replace("\r", "\n")

    # -- editing -------------------------------------------------------------------
    def set(self, name: str, value: str) -> None:
        """Replace the first header called `name` where it stands (dropping repeats), or append it."""
        check_header(name, value)
        wanted = name.lower()
        kept: list[tuple[str, str]] = []
        placed = False
        for key, old in self.headers:
            if key.lower() != wanted:
                kept.append((key, old))
            elif not placed:
                kept.append((key, value))
                placed = True
        if not placed:
            kept.append((name, value))
        self.headers = kept

    def remove(self, name: str) -> bool:
        wanted = name.lower()
        before = len(self.headers)
        self.headers = [(key, value) for key, value in self.headers if key.lower() != wanted]
        return len(self.headers) != before

    def to_text(self) -> str:
        head = "".join(f"{key}: {value}{self.eol}" for key, value in self.headers)
        return head + self.eol + self.body


def unfold(value: str) -> str:
    return " ".join(part.strip() for part in value.splitlines()).strip()


def split_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def check_header(name: str, value: str) -> None:
    """Refuse a header that would break the file (a newline in a value starts a new header)."""
    if not _HEADER_NAME.fullmatch(name):
        raise UsageError(f"invalid header name {name!r}")
    if any(ch in value for ch in "\r\n\0"):
        raise UsageError(f"header {name}: the value must be one line")


# -- parsing -------------------------------------------------------------------------


def parse(text: str, what: str = "the message") -> MimeMessage:
    """Parse message text; NotAMessage when it has no well-formed header section."""
    if "\0" in text:
        raise NotAMessage(f"{what} is not an IGNITE message: it contains NUL bytes")
    if not text.strip():
        raise NotAMessage(f"{what} is not an IGNITE message: it is empty")
    if text.startswith("From "):
        raise NotAMessage(f"{what} is not an IGNITE message: it starts with an mbox 'From ' line")
    parsed = email.parser.Parser(policy=email.policy.compat32).parsestr(text, headersonly=True)
    headers = list(parsed.raw_items())
    if parsed.defects or not headers:
        first = text.splitlines()[0][:60] if text.splitlines() else ""
        raise NotAMessage(f"{what} is not an IGNITE message: its header section is not 'Name: value' lines (first line: {first!r})")
    if not any(key.lower() in _DEFINING for key, _ in headers):
        raise NotAMessage(f"{what} is not an IGNITE message: none of the headers {', '.join(sorted(_DEFINING_NAMES))}")
    body = parsed.get_payload()
    if not isinstance(body, str):  # headersonly never splits parts; defensive
        raise NotAMessage(f"{what} is not an IGNITE message: unexpected multipart body")
    first_line_end = text.find("\n")
    eol = "\r\n" if first_line_end > 0 and text[first_line_end - 1] == "\r" else "\n"
    return MimeMessage(headers=headers, body=body, eol=eol)


def read_file(path: str, *, follow: bool = True) -> MimeMessage:
    """Parse the file at `path`; one-line errors for a missing, unreadable or foreign file."""
    data = read_bytes(path, follow=follow)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotAMessage(f"{path} is not an IGNITE message: not UTF-8 text (byte {exc.start})") from None
    return parse(text, path)


def read_bytes(path: str, *, follow: bool = True) -> bytes:
    """The bytes of a regular file; `follow=False` refuses a symlink (queue directories)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        raise RelayError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RelayError(f"{path} is a directory, not a message file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RelayError(f"{path} is a symlink; not followed here") from None
        raise RelayError(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RelayError(f"{path} is not a regular file")
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > _MAX_FILE:
                raise NotAMessage(f"{path} is not an IGNITE message: larger than {_MAX_FILE >> 20} MiB")
            chunks.append(chunk)
        return b"".join(chunks)
    except IsADirectoryError:
        raise RelayError(f"{path} is a directory, not a message file") from None
    finally:
        os.close(fd)


# -- building ------------------------------------------------------------------------


def new_message_id(now: float | None = None, of: str | None = None) -> str:
    """`<{epoch}.{pid}.{hash}@ignite.local>`, the shape IGNITE's tools write (seed 003).
    `of`: the relay message the file carries (its id is also in X-Relay-Id): the epoch is
    when that id was made and the hash is taken from it, so each relay message gets a
    Message-ID of its own; without it, now and random bits."""
    if of is not None:
        return f"<{ulid_time_ms(of) // 1000}.{os.getpid()}.{sha256_hex(of.encode())[:12]}@{DOMAIN}>"
    epoch = int(time.time() if now is None else now)
    return f"<{epoch}.{os.getpid()}.{random.getrandbits(48):012x}@{DOMAIN}>"


def rfc2822_date(now: float | None = None) -> str:
    return email.utils.formatdate(time.time() if now is None else now, localtime=True)


def build(
    *,
    from_: str,
    to: list[str],
    type_: str,
    body: str = "",
    cc: list[str] | None = None,
    priority: str = "normal",
    thread_id: str | None = None,
    in_reply_to: str | None = None,
    repository: str | None = None,
    issue: str | None = None,
    status: str | None = None,
    message_id: str | None = None,
    date: str | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> MimeMessage:
    """A new message with exactly IGNITE's headers, in IGNITE's order; `extra` goes last
    before Content-Type (relay's own X-Relay-* headers on export)."""
    if not from_:
        raise UsageError("--from: give the sender")
    if not to:
        raise UsageError("--to: give at least one recipient")
    if not type_:
        raise UsageError("--type: give the message type, e.g. task_assignment")
    if priority not in PRIORITIES:
        raise UsageError(f"invalid priority {priority!r}: use one of {', '.join(PRIORITIES)}")
    for label, names in (("--to", to), ("--cc", cc or [])):
        for name in names:
            if not name or "," in name or name != name.strip():
                raise UsageError(f"{label}: invalid agent name {name!r}")
    headers: list[tuple[str, str]] = [
        ("MIME-Version", "1.0"),
        ("Message-ID", message_id or new_message_id()),
        ("From", from_),
        ("To", ", ".join(to)),
    ]
    if cc:
        headers.append(("Cc", ", ".join(cc)))
    headers += [("Date", date or rfc2822_date()), (PREFIX + "Type", type_), (PREFIX + "Priority", priority)]
    optional = (
        (PREFIX + "Thread-ID", thread_id),
        ("In-Reply-To", in_reply_to),
        (PREFIX + "Repository", repository),
        (PREFIX + "Issue", issue),
        (PREFIX + "Status", status),
    )
    headers += [(name, value) for name, value in optional if value]
    headers += extra or []
    headers += [("Content-Type", CONTENT_TYPE), ("Content-Transfer-Encoding", "8bit")]
    for name, value in headers:
        check_header(name, value)
    return MimeMessage(headers=headers, body=body)


# -- writing -------------------------------------------------------------------------


def write_atomic(path: str, message: MimeMessage | str, *, exclusive: bool = False, mode: int | None = None) -> None:
    """Write `path` whole or not at all: temp file, fsync, rename (or link, with `exclusive`,
    which refuses to replace an existing file), directory fsync.

    Without `mode`, an existing file keeps its permissions; a new one gets 0600.
    """
    text = message if isinstance(message, str) else message.to_text()
    directory, name = os.path.split(os.path.abspath(path))
    if mode is None:
        try:
            mode = os.stat(path, follow_symlinks=False).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
        except OSError as exc:
            raise RelayError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise RelayError(f"cannot write {path}: {exc.strerror or exc}") from None
    temp = f".{name}.{os.getpid()}.{random.getrandbits(32):08x}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
        try:
            os.fchmod(fd, mode)  # the umask must not narrow what the file had
            data = text.encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            os.unlink(temp, dir_fd=dir_fd)
        else:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
    except FileExistsError:
        _discard(temp, dir_fd)
        raise RelayError(f"{path} exists already; not replaced") from None
    except OSError as exc:
        _discard(temp, dir_fd)
        raise RelayError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        os.close(dir_fd)


def _discard(temp: str, dir_fd: int) -> None:
    try:
        os.unlink(temp, dir_fd=dir_fd)
    except OSError:
        pass


def update_file(path: str, changes: list[tuple[str, str | None]]) -> MimeMessage:
    """Set (value) or remove (None) headers of the message file at `path`, atomically."""
    message = read_file(path)
    for name, value in changes:
        if value is None:
            message.remove(name)
        else:
            message.set(name, value)
    write_atomic(path, message)
    return message


def iso_seconds(moment: float) -> str:
    """`date -Iseconds` in local time, the form IGNITE stamps X-IGNITE-Processed-At with."""
    return datetime.fromtimestamp(moment).astimezone().isoformat(timespec="seconds")


def parse_iso_seconds(text: str | None) -> float | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()
