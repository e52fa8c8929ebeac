"""The errors relay reports, each with a stable wire code and a CLI exit status.

Store functions raise these; the daemon puts `code` and the message on the wire, and
clients turn a wire error back into the same class with `from_wire`. Errors from the OS
or other libraries are converted at the boundary, never shown as tracebacks.
"""

from __future__ import annotations

EXIT_REFUSED = 1
EXIT_USAGE = 2


class RelayError(Exception):
    """Base of every error a user may see; `str()` is a one-line sentence."""

    code = "error"
    exit_status = EXIT_REFUSED

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_wire(self) -> dict[str, object]:
        wire: dict[str, object] = {"code": self.code, "message": self.message}
        if self.details:
            wire["details"] = self.details
        return wire


class UsageError(RelayError):
    """The request itself is malformed: a bad flag value, a missing argument."""

    code = "invalid_argument"
    exit_status = EXIT_USAGE


class InvalidName(RelayError):
    code = "invalid_name"


class UnknownAgent(RelayError):
    code = "unknown_agent"


class NoIdentity(RelayError):
    code = "no_identity"
    exit_status = EXIT_USAGE


class Conflict(RelayError):
    code = "conflict"


class NotOwner(RelayError):
    code = "not_owner"


class NotFound(RelayError):
    code = "not_found"


class UnsafePath(RelayError):
    """A symlink or other non-regular entry was found where the store expects its own file."""

    code = "unsafe_path"


class StoreError(RelayError):
    """The filesystem refused an operation (disk full, permissions, failed fsync)."""

    code = "store_error"


class TimedOut(RelayError):
    code = "timeout"


class ProtocolError(RelayError):
    """The peer sent something that is not protocol v1."""

    code = "protocol_error"


class VersionMismatch(RelayError):
    """relayd and this client speak different protocol versions: one of them was started
    from an older install (raised by the client on relayd's hello)."""

    code = "version_mismatch"


class Unavailable(RelayError):
    """The daemon is needed for this and is not running."""

    code = "unavailable"


_BY_CODE: dict[str, type[RelayError]] = {}


NO_ANSWER = "relayd did not answer in time (is it stopped or overloaded?)"


def no_answer(op: str, message_id: str | None = None, text: str = NO_ANSWER) -> TimedOut:
    """relayd did not answer within the client's timeout (or `text` says what timed out).
    A send may have been done or not: the message says how to make sure it is done once."""
    if op == "send" and message_id:
        return TimedOut(f"{text}; the send may or may not have been done: repeat it with --id {message_id} to make sure it is done once", id=message_id)
    return TimedOut(text)


def went_away(op: str) -> Unavailable:
    """relayd's connection ended during an operation that is not safe to repeat."""
    return Unavailable(f"relayd went away while running {op!r}; it may or may not have been done (check before repeating it)")


def _collect(cls: type[RelayError]) -> None:
    for sub in cls.__subclasses__():
        _BY_CODE.setdefault(sub.code, sub)
        _collect(sub)


def from_wire(error: dict[str, object]) -> RelayError:
    """Rebuild the error a peer reported, keeping its class when the code is known."""
    if not _BY_CODE:
        _collect(RelayError)
    cls = _BY_CODE.get(str(error.get("code", "")), RelayError)
    details = error.get("details")
    exc = cls(str(error.get("message", "unknown error")), **(details if isinstance(details, dict) else {}))
    if cls is RelayError:
        exc.code = str(error.get("code", "error"))
    return exc
