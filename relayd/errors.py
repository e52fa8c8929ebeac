"""The errors relay reports, each with a stable wire code and a CLI exit status.

Store functions raise these; the daemon puts `code` and the message on the wire, and
clients turn a wire error back into the same class with `from_wire`. Errors from the OS
or other libraries are converted at the boundary, never shown as tracebacks.
"""

from __future__ import annotations

import sys

from . import DISTRIBUTION

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_BUG = 70  # EX_SOFTWARE: what relayctl exits with after a bug, in relayd or in itself


class RelayError(Exception):
    """Base of every error a user may see; `str()` is a one-line sentence. On the wire its
    own code `error` means anything else (e.g. a reply too large for one line, a queue
    directory that cannot be read)."""

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


# -- the table: every wire code, one class each ----------------------------------------------
# A code is stable once published (docs/protocol.md §4 lists them, generated from this table
# by tests/support/protocol_doc.py); the message is a sentence for a person and may change.


class UsageError(RelayError):
    """The request itself is malformed: a bad flag value or parameter, a missing argument,
    an unknown operation (`details.op`), a bad duration."""

    code = "invalid_argument"
    exit_status = EXIT_USAGE


class InvalidName(RelayError):
    """An agent name outside `^[a-z0-9][a-z0-9_-]{0,63}$` (names become directory names)."""

    code = "invalid_name"


class UnknownAgent(RelayError):
    """No such agent; `details.known` lists the registered ones."""

    code = "unknown_agent"


class NoIdentity(RelayError):
    """The operation needs an agent name (`--agent`, RELAY_AGENT) and got none."""

    code = "no_identity"
    exit_status = EXIT_USAGE


class Conflict(RelayError):
    """The store already holds something that excludes this: a reservation overlapping
    someone else's, a command still pending, an agent name being registered by another host."""

    code = "conflict"


class NotOwner(RelayError):
    """The thing belongs to another agent, e.g. releasing another agent's reservation."""

    code = "not_owner"


class NotFound(RelayError):
    """No such thing, e.g. no command or message with that id."""

    code = "not_found"


class UnsafePath(RelayError):
    """A symlink or other non-regular entry was found where the store expects its own file."""

    code = "unsafe_path"


class StoreError(RelayError):
    """The filesystem refused an operation (disk full, permissions, failed fsync)."""

    code = "store_error"


class InvalidMessage(RelayError):
    """A file given as an IGNITE message is not one (no header section, not UTF-8, ...)."""

    code = "invalid_message"


class WakeFailed(RelayError):
    """No wake-up method reached the orchestrator (gateway command, socket, trigger file)."""

    code = "wake_failed"


class QueueBusy(RelayError):
    """Another monitor already serves this IGNITE queue directory (its lock is held)."""

    code = "queue_busy"


class ProtocolError(RelayError):
    """Someone misused the protocol: relayd received a frame the protocol does not allow (not
    JSON, not a valid frame, a frame only relayd sends, a subscribe without known topics or
    a second one on a connection). relayd answers with this code; the client that sent the
    frame raises this class, as does local code that builds such a frame."""

    code = "protocol_error"


class PeerError(RelayError):
    """The other side misbehaved: relayd sent this client something that is not relay's protocol,
    or an answer that does not fit the question (a bug, or another program on the socket).
    Raised by clients only; relayd never sends this code."""

    code = "peer_error"


class VersionMismatch(RelayError):
    """relayd and this client speak different protocol versions: one of them was started
    from an older install (raised by the client on relayd's hello, relayd.wire.handshake)."""

    code = "version_mismatch"


class LineTooLong(RelayError):
    """A line over the protocol's 1 MiB limit; relayd answers with a fatal error frame and
    closes the connection."""

    code = "line_too_long"


class PermissionDenied(RelayError):
    """The peer's uid is not relayd's: relayd serves only its own user (fatal error frame)."""

    code = "permission_denied"


class Dropped(RelayError):
    """A subscriber did not read its events fast enough and was dropped (fatal error
    frame); resume with `after` = the last event id it received."""

    code = "dropped"


class TimedOut(RelayError):
    """Client side: relayd did not answer in time."""

    code = "timeout"


class Unavailable(RelayError):
    """relayd is needed and not running, went away mid-request, or (relayd) is serving its
    limit of connections."""

    code = "unavailable"


class StartupError(RelayError):
    """relayd cannot start (another one runs for the store or on the socket, the socket path
    is unusable); the message says what to do. Seen by `relayd`, never on the wire."""

    code = "startup_failed"


class Internal(RelayError):
    """A bug in an operation, in relayd or in a client's direct mode (`relayd.ops.run`); the
    message names the exception."""

    code = "internal"
    exit_status = EXIT_BUG


def _table() -> dict[str, type[RelayError]]:
    table: dict[str, type[RelayError]] = {}
    for cls in (RelayError, *_every_subclass(RelayError)):
        if cls.code in table:
            raise AssertionError(f"wire code {cls.code!r} used by {table[cls.code].__name__} and {cls.__name__}")
        table[cls.code] = cls
    return table


def _every_subclass(cls: type[RelayError]) -> list[type[RelayError]]:
    found: list[type[RelayError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_every_subclass(sub)]
    return found


BY_CODE: dict[str, type[RelayError]] = _table()  # complete at import: every class above


NO_ANSWER = "relayd did not answer in time (is it stopped or overloaded?)"


def no_answer(op: str) -> TimedOut:
    """relayd did not answer within the client's timeout a request that is not safe to run
    again (a send or a read is run by the client itself instead: relayd.client.full)."""
    return TimedOut(f"{NO_ANSWER}; {op!r} may or may not have been done (check before repeating it)")


def went_away(op: str) -> Unavailable:
    """relayd's connection ended during an operation that is not safe to repeat."""
    return Unavailable(f"relayd went away while running {op!r}; it may or may not have been done (check before repeating it)")


def missing_extra(what: str, extra: str, provides: str) -> UsageError:
    """`what` needs the optional extra `extra` (which brings `provides`): the command that
    installs it into the very Python running relay, whichever pip is first on PATH."""
    # deferred imports: every relayctl start loads this module; shlex only for the one error that
    # needs it
    import shlex

    return UsageError(f"{what} needs the {extra} extra ({provides}): {shlex.quote(sys.executable)} -m pip install '{DISTRIBUTION}[{extra}]'")


def from_wire(error: dict[str, object]) -> RelayError:
    """Rebuild the error a peer reported, keeping its class when the code is known."""
    cls = BY_CODE.get(str(error.get("code", "")), RelayError)
    details = error.get("details")
    exc = cls(str(error.get("message", "unknown error")), **(details if isinstance(details, dict) else {}))
    if cls is RelayError:
        exc.code = str(error.get("code", "error"))
    return exc
