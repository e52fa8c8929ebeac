"""relayctl's entry point, with a fast path for the commands scripts run all day.

Agents and their scripts run `relayctl send`, `read`, `heartbeat`, `status`, `set-status`,
`reserve` (and `reserve --check`), `release` and `reservations` hundreds of times an hour,
nearly always with relayd up, and then the work is one JSON line each way. Importing
click, msgspec and the store code for that costs several times the interpreter's own
start-up. So this module reads argv itself, talks to the socket with the standard
library, and runs the very same command functions (`relayctl.actions`) with the same
Settings and output as the click commands.

An agent program runs `relayctl hook PROGRAM` at every event of every session, and the
mail it hands over (and the trigger waiting for the program's next prompt) waits for it:
that takes the fast path too (relayctl.hook_answer), with relayd up.

It takes only what it is sure of: those commands with the options in `COMMANDS`,
spelled as click accepts them. Anything else -- help, another command or option,
anything click would refuse, a socket that answers oddly -- goes untouched to the full
click CLI (`relayctl.cli`). tests/client/test_fast_path.py holds this parser to click's own for
every option listed here. With no relayd for this store, the operation runs in this
process through `relayd.client.full.Client`, as it would under the full CLI, loading only the
domain module that registers it.

So its imports of relay's other modules are deferred imports, inside the functions that
need them: what a command does not use is never loaded.
"""

from __future__ import annotations

import os
import sys

from relayd import layout, load_msgspec  # (layout: loaded by every run anyway, the store and socket paths)
from relayd.wire.connection import Caller

TYPE_CHECKING = False  # typing itself costs ~2 ms of start-up
if TYPE_CHECKING:
    from typing import Any

FLAG, TEXT, MANY, INT, COUNT = "flag", "text", "many", "int", "count"  # COUNT: an int >= 0
ONE, OPTIONAL = "one", "optional"  # how many positional arguments a command takes (MANY: any)

# Before the command: option -> (Settings field, kind), and the environment click reads.
GLOBAL: dict[str, tuple[str, Any]] = {
    "--agent": ("agent", TEXT),
    "--dir": ("store_dir", TEXT),
    "--socket": ("socket", TEXT),
    "--json": ("json", FLAG),
    "--quiet": ("quiet", FLAG),
    "-q": ("quiet", FLAG),
}
ENVIRONMENT = {"agent": layout.AGENT_VARIABLES, "store_dir": layout.STORE_VARIABLES, "socket": ("RELAY_SOCKET",)}
# After the command, every command also takes these, and the other GLOBAL options unless it
# has its own of that name (cli._accept_output_flags).
OUTPUT = {"--json": "json", "--quiet": "quiet", "-q": "quiet"}

PRIORITIES = ("low", "normal", "high", "urgent", "critical")  # a choice, matched case-insensitively


class Spec:
    """One command's options, the one definition both front ends read: `options` are those
    the fast path parses (spelling -> parameter, kind, default), `full_only` those only the
    click command takes (it declines them here; their defaults still fill the call). The
    click command is built from both (relayctl.options.declared), so a spelling, parameter
    name, kind or default cannot differ between the two. Also: whether the command takes
    positional arguments, and whether its operation changes the store."""

    __slots__ = ("options", "defaults", "declared", "positional", "arity", "mutates", "module")

    def __init__(self, options: dict[str, tuple[str, Any, Any]], full_only: dict[str, tuple[str, Any, Any]], positional: str | None, mutates: bool, module: str, arity: str = MANY) -> None:
        self.declared = {**options, **full_only}
        self.options = {spelling: (param, kind) for spelling, (param, kind, _) in options.items()}
        self.defaults = {param: default for param, _, default in self.declared.values()}
        self.positional = positional
        self.arity = arity  # of the positional: MANY (a tuple), ONE (required) or OPTIONAL
        self.mutates = mutates
        self.module = module  # registers the operation, for direct mode (ops.table() would load them all)


COMMANDS: dict[str, Spec] = {
    "send": Spec(
        {
            "--subject": ("subject", TEXT, None),
            "--thread": ("thread", TEXT, None),
            "--priority": ("priority", PRIORITIES, "normal"),
            "--tag": ("tags", MANY, ()),
            "--broadcast": ("broadcast", FLAG, False),
            "--type": ("type_", TEXT, None),
            "--ack": ("ack", FLAG, False),
            "--ack-wait": ("ack_wait", TEXT, None),
            "--max-deliver": ("max_deliver", INT, None),
            "--id": ("message_id", TEXT, None),
            "--stdin": ("stdin", FLAG, False),
        },
        {
            "--wake": ("wake", FLAG, False),
            "--mime": ("mime_files", MANY, ()),
            "--wait": ("wait_for", ("read", "ack"), None),
            "--timeout": ("timeout", TEXT, "5m"),
        },
        "args",
        True,
        "relayd.inbox.send",
    ),
    "read": Spec(
        {
            "--from": ("from_", TEXT, None),
            "--thread": ("thread", TEXT, None),
            "--since": ("since", TEXT, None),
            "--unread": ("unread", FLAG, False),
            "--last": ("last", COUNT, 20),
            "--mark-read": ("mark_read", FLAG, False),
        },
        {
            "--tail": ("tail", FLAG, False),
            "--format": ("format_", ("text", "mime"), "text"),
        },
        None,
        True,
        "relayd.inbox.read",
    ),
    "heartbeat": Spec({"--task": ("task", TEXT, None)}, {}, None, True, "relayd.agents.roster"),
    "set-status": Spec({"--task": ("task", TEXT, None)}, {}, "status", True, "relayd.agents.roster", ONE),
    "reserve": Spec(
        {
            "--repo": ("repo", TEXT, None),
            "--shared": ("shared", FLAG, False),
            "--ttl": ("ttl", TEXT, "1h"),
            "--reason": ("reason", TEXT, None),
            "--force": ("force", FLAG, False),
            "--check": ("check", FLAG, False),
        },
        {},
        "pattern",
        True,
        "relayd.reservations.reserve",
        ONE,
    ),
    "release": Spec({"--repo": ("repo", TEXT, None), "--all": ("all_", FLAG, False)}, {}, "pattern", True, "relayd.reservations.reserve", OPTIONAL),
    "reservations": Spec({"--repo": ("repo", TEXT, None), "--agent": ("holder", TEXT, None), "--expired": ("expired", FLAG, False)}, {}, None, False, "relayd.reservations.reserve"),
    "status": Spec(
        {
            "--agents": ("only_agents", FLAG, False),
            "--reservations": ("only_reservations", FLAG, False),
            "--commands": ("only_commands", FLAG, False),
            "--stale": ("stale", TEXT, "5m"),
        },
        {},
        None,
        False,
        "relayd.overview",
    ),
}

TIMEOUT = 30.0  # relayd.client.full.Client's default


class _Declined(Exception):
    """Not something the fast path is sure about: the full CLI takes it."""


def _option(table: dict[str, tuple[str, Any]], argv: list[str], i: int) -> tuple[str, Any, Any, int]:
    """The option at argv[i] -> (parameter, kind, value, index after it), as click parses it."""
    token = argv[i]
    spelled, attached = token, None
    if token.startswith("--") and "=" in token:
        spelled, _, attached = token.partition("=")
    found = table.get(spelled)
    if found is None:
        raise _Declined
    name, kind = found
    if kind is FLAG:
        if attached is not None:
            raise _Declined
        return name, kind, True, i + 1
    if attached is None:
        if i + 1 >= len(argv):
            raise _Declined
        attached, i = argv[i + 1], i + 1
    return name, kind, _convert(kind, attached), i + 1


def _convert(kind: Any, text: str) -> Any:
    if kind is TEXT or kind is MANY:
        return text
    if kind is INT or kind is COUNT:
        try:
            number = int(text)
        except ValueError:
            raise _Declined from None
        if kind is COUNT and number < 0:
            raise _Declined
        return number
    folded = text.casefold()
    for choice in kind:
        if choice.casefold() == folded:
            return choice
    raise _Declined


def parse(argv: list[str], environ: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """argv -> (command, Settings fields, the command function's parameters), exactly as
    click would pass them; raises _Declined for anything else."""
    settings: dict[str, Any] = {"agent": None, "store_dir": None, "socket": None, "json": False, "quiet": False}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, _, value, i = _option(GLOBAL, argv, i)
        settings[name] = value
    if i < len(argv) and argv[i] == "hook":
        params = _hook(argv[i + 1:])
        _environment(settings, environ)
        return "hook", settings, params
    if i >= len(argv) or argv[i] not in COMMANDS:
        raise _Declined
    command = argv[i]
    spec = COMMANDS[command]
    params = dict(spec.defaults)
    positional: list[str] = []
    i += 1
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token == "-":
            positional.append(token)
            i += 1
        elif token in OUTPUT:
            settings[OUTPUT[token]] = True
            i += 1
        elif token.partition("=")[0] in GLOBAL and token.partition("=")[0] not in spec.options:
            name, _, value, i = _option(GLOBAL, argv, i)  # a global option after the command
            settings[name] = value
        else:
            name, kind, value, i = _option(spec.options, argv, i)
            params[name] = params[name] + (value,) if kind is MANY else value
    if spec.positional is None:
        if positional:
            raise _Declined
    elif spec.arity is MANY:
        params[spec.positional] = tuple(positional)
    elif len(positional) == 1 or (spec.arity is OPTIONAL and not positional):
        params[spec.positional] = positional[0] if positional else None
    else:
        raise _Declined  # missing or extra: click's usage error says which
    _environment(settings, environ)
    return command, settings, params


def _environment(settings: dict[str, Any], environ: Any) -> None:
    for field, names in ENVIRONMENT.items():
        if settings[field] is None:
            settings[field] = next((environ[name] for name in names if environ.get(name)), None)


def _hook(argv: list[str]) -> dict[str, Any]:
    """`hook PROGRAM`, or `hook PROGRAM EVENT` for a program whose events do not name
    themselves: the parameters of hook_answer.hook. Anything else (--help, an unknown
    program, an option) is the full CLI's to explain."""
    from relayd.programs.registry import PROGRAMS

    if not argv or argv[0] not in PROGRAMS or any(token.startswith("-") for token in argv):
        raise _Declined
    program, rest = argv[0], argv[1:]
    if len(rest) != (1 if PROGRAMS[program].hooks.named_by_entry else 0):
        raise _Declined
    return {"program": program, "event": rest[0] if rest else None}


class QuickClient(Caller):
    """The requests of relayd.wire.connection over a blocking socket, stdlib only (no msgspec).
    Where no relayd serves the store, the call runs here through `relayd.client.full.Client`, as
    under the full CLI, loading only the domain module that registers its operation."""

    # One short process whose calls (a hook's few) follow each other at once on the
    # connection it has just greeted: checking it again would only slow each one.
    probe = False

    def __init__(self, store_dir: str, socket_path: str, given_socket: str | None) -> None:
        super().__init__(store_dir, socket_path, timeout=TIMEOUT)
        self._given_socket = given_socket
        self._full: Any = None

    def connect(self) -> bool:
        """Connect and greet. True: relayd serves this store here, or surely none does
        (then calls run on the store in this process, as relayd.client.full.Client would).
        False: something else (refused, an odd answer): the full CLI decides."""
        from relayd.errors import VersionMismatch

        try:
            self._daemon()
        except VersionMismatch:
            raise  # the user must restart one side; nothing else would work
        except Exception:
            return False
        self._try_daemon = self._line is not None  # none there now: run here, without asking again
        return True

    def _mutates(self, op: str) -> bool:
        return MUTATES.get(op, True)

    def direct(self, op: str, params: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
        self.close()
        if self._full is None:
            load_msgspec()  # (before anything of the store's is imported)
            command = COMMANDS.get(op) or COMMANDS.get(op.replace("_", "-"))
            if command is not None:
                __import__(command.module)
            else:
                from relayd import ops

                ops.table()  # a hook's operations: rare here (relayd went away mid-hook)
            from relayd.client.full import Client

            self._full = Client(self.store_dir, self._given_socket, daemon=False)
        try:
            return self._full.direct(op, params, session)
        finally:
            self.mode = self._full.mode

    def finish(self) -> None:
        self.close()
        if self._full is not None:
            self._full.close()


def operation(command: str) -> str:
    """The operation a fast command runs, and the name of its function in relayctl.actions."""
    return command.replace("-", "_")


MUTATES = {operation(name): spec.mutates for name, spec in COMMANDS.items()}  # each command runs the operation of its name


def _fast(argv: list[str]) -> int | None:
    """Run argv on the fast path; its exit status, or None when the full CLI should take it."""
    try:
        command, fields, params = parse(argv, os.environ)
    except _Declined:
        return None
    from relayd.errors import Internal, RelayError, VersionMismatch

    from .context import Settings, fail

    settings = Settings(agent=fields["agent"] or None, store_dir=fields["store_dir"] or None, socket=fields["socket"] or None, json=fields["json"], quiet=fields["quiet"])
    try:
        store_dir = os.path.abspath(settings.dir)
        from relayd import layout

        client = QuickClient(store_dir, settings.socket or layout.default_socket_path(store_dir), settings.socket)
        if not client.connect():
            return None
    except VersionMismatch as exc:
        fail(exc.message, exc.exit_status)
        return exc.exit_status
    except RelayError:
        return None  # e.g. no HOME: the full CLI says so
    settings._client = client
    try:
        if command == "hook":
            from .hook_answer import hook

            return hook(settings, **params)  # (its errors are its own: one line, status 1)
        from . import actions

        getattr(actions, operation(command))(settings, **params)
    except RelayError as exc:
        if isinstance(exc, Internal) and exc.__cause__ is not None and os.environ.get("RELAY_DEBUG"):
            raise  # a bug in an operation run here (direct mode): its traceback on request
        fail(exc.message, exc.exit_status, exc.code)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: one line, as the full CLI reports it
        if os.environ.get("RELAY_DEBUG"):
            raise
        fail(f"internal error: {type(exc).__name__}: {exc} (set RELAY_DEBUG=1 for the traceback)", 70, "internal")
        return 70
    finally:
        client.finish()
    return 0


def main(argv: list[str] | None = None) -> None:
    """relayctl ARGV (sys.argv's by default). Given an argv, it returns, or raises
    SystemExit with a failure's status, and may be called again in the same process."""
    from .context import Settings

    Settings.current = None  # the run's own: an error before its settings exist must not find a former run's
    args = sys.argv[1:] if argv is None else list(argv)
    status = _fast(args)
    if status is None:
        load_msgspec()
        from .cli import main as full

        full(args)
        return
    if argv is None:
        _leave(status)  # the process is ours alone: the console script or python -m relayctl
    if status:
        sys.exit(status)


def _leave(status: int) -> None:
    """Exit without the interpreter's teardown. Freeing every loaded module took 3-6 ms, a
    fifth of a fast command's whole run, and nothing needs it: what relay writes is fsynced
    or in the kernel already, descriptors and locks go with the process; only Python's own
    output buffers are left, and they are flushed here."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # a reader that went away (head, grep -q) or a closed stream: nothing to keep
        except OSError:
            status = status or 1  # output lost (a full disk): say so in the status
    os._exit(status)


if __name__ == "__main__":
    main()
