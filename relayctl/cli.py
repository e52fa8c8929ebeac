"""relayctl's entry point: the command group, global options and error handling.

Subcommands load lazily (one module each), so `relayctl send` imports only what sending
needs. No traceback reaches a user: RelayError and click usage errors become one
`error:` line and exit 1 (refused) or 2 (usage); set RELAY_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import click
from relayd import layout

from relayd import DISTRIBUTION
from relayd.errors import Internal, RelayError

from .context import Settings, fail

# name -> "module:function"; each module holds one area of commands.
COMMANDS: dict[str, str] = {
    "init": "relayctl.cmd_store:init",
    "reset": "relayctl.cmd_store:reset",
    "version": "relayctl.cmd_store:version",
    "register": "relayctl.cmd_agents:register",
    "heartbeat": "relayctl.cmd_agents:heartbeat",
    "set-status": "relayctl.cmd_agents:set_status",
    "status": "relayctl.cmd_agents:status",
    "send": "relayctl.cmd_messages:send",
    "read": "relayctl.cmd_messages:read",
    "ack": "relayctl.cmd_delivery:ack",
    "redeliver": "relayctl.cmd_delivery:redeliver",
    "dlq": "relayctl.cmd_delivery:dlq",
    "search": "relayctl.cmd_search:search",
    "track": "relayctl.cmd_track:track",
    "reserve": "relayctl.cmd_reservations:reserve",
    "release": "relayctl.cmd_reservations:release",
    "reservations": "relayctl.cmd_reservations:reservations",
    "handoff": "relayctl.cmd_reservations:handoff",
    "budget": "relayctl.cmd_budget:budget",
    "cmd": "relayctl.cmd_commands:cmd",
    "wake": "relayctl.cmd_wake:wake",
    "gc": "relayctl.cmd_wake:gc",
    "hook": "relayctl.cmd_hook:hook",
    "hooks": "relayctl.cmd_hooks:hooks",
    "daemon": "relayd.daemon.cli:daemon",
    "subscribe": "relayctl.cmd_events:subscribe",
    "mcp-config": "relayctl.cmd_mcp:mcp_config",
    "prompt": "relayctl.cmd_prompt:prompt",
    "systemd": "relayctl.cmd_systemd:systemd",
    "mime": "relayctl.cmd_mime:mime_group",
    "ignite": "relayctl.cmd_ignite:ignite",
    "web": "relayctl.cmd_web:web",
    "bridge": "relayctl.cmd_bridge:bridge",
    "guard": "relayctl.cmd_guard:guard",
    "up": "relayctl.cmd_team:up",
    "down": "relayctl.cmd_team:down",
    "uninstall": "relayctl.cmd_uninstall:uninstall",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        # click suggests only among commands it has loaded, and these load lazily.
        name = args[0] if args else ""
        if name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            ctx.fail(f"No such command {name!r}.{did_you_mean(name, COMMANDS)} (relayctl --help lists them)")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        _accept_output_flags(command)
        return command


def did_you_mean(name: str, choices) -> str:
    """' Did you mean 'send'?' for a typo close to one or more of `choices`, else ''."""
    # deferred imports: difflib only for a mistyped command
    from difflib import get_close_matches

    close = get_close_matches(name, list(choices), n=3)
    if not close:
        return ""
    return f" Did you mean {close[0]!r}?" if len(close) == 1 else f" Did you mean one of: {', '.join(map(repr, close))}?"


def _set_flag(attr: str):
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        settings = ctx.find_object(Settings)
        if value and settings is not None:
            setattr(settings, attr, True)

    return callback


def _set_value(attr: str):
    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        settings = ctx.find_object(Settings)
        if value is not None and settings is not None:
            setattr(settings, attr, value or None)  # as the same option before the command: an empty one is none

    return callback


def _accept_output_flags(command: click.Command) -> None:
    """`relayctl read --json` works as well as `relayctl --json read`: people type both.
    So do the other global options (`send --agent alice ...`), unless the command has an
    option of that name itself (`reservations --agent` filters); those are not repeated
    in each command's --help."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_output_flags(sub)
    taken = {opt for param in command.params for opt in getattr(param, "opts", [])}
    for flags, attr, text in ((["--json"], "json", "Print JSON (same as the global --json)."), (["--quiet", "-q"], "quiet", "Same as the global --quiet.")):
        free = [flag for flag in flags if flag not in taken]
        if flags[0] in free:
            command.params.append(click.Option(free, is_flag=True, expose_value=False, is_eager=True, callback=_set_flag(attr), help=text))
    for flag, attr in (("--agent", "agent"), ("--dir", "store_dir"), ("--socket", "socket")):
        if flag not in taken:
            command.params.append(click.Option([flag], expose_value=False, is_eager=True, hidden=True, callback=_set_value(attr)))


HELP = """relay: messages, presence, file reservations, commands and wake-ups for a team
of AI coding agents on one machine.

Works with or without the relayd daemon: when it is down, every command works directly
on the store files.

\b
Examples:
  relayctl init --preset overlord
  relayctl register agent-1 --program claude-code --task "auth refactor"
  relayctl --agent agent-1 send agent-2 "Done with the parser, tests pass"
  relayctl --agent agent-2 read --unread --mark-read
  relayctl status
  relayctl --agent agent-1 prompt >> AGENTS.md
  relayctl systemd install --now
"""


@click.group(cls=LazyGroup, help=HELP, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--agent", envvar=list(layout.AGENT_VARIABLES), metavar="NAME", help="Your agent name. [env: RELAY_AGENT; aliases: OVLD_ROLE, read before it (a pane's own), and BBS_AGENT_ROLE, read after it; no default: agents on one machine share a hostname]")
@click.option("--dir", "store_dir", envvar=list(layout.STORE_VARIABLES), metavar="PATH", help=f"Store directory. [env: {', then '.join(layout.STORE_VARIABLES)}; default: ~/.relay]")
@click.option("--socket", envvar="RELAY_SOCKET", metavar="PATH", help="relayd socket. [env: RELAY_SOCKET; default: $XDG_RUNTIME_DIR/relay/relayd.sock (relayd-<hash>.sock for a store other than ~/.relay), else <store>/relayd.sock]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (field names as stored) for scripts.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors and requested data.")
@click.version_option(package_name=DISTRIBUTION, prog_name="relayctl", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, agent: str | None, store_dir: str | None, socket: str | None, as_json: bool, quiet: bool) -> None:
    ctx.obj = Settings(agent=agent or None, store_dir=store_dir or None, socket=socket or None, json=as_json, quiet=quiet)


def _fail(message: str, status: int, code: str = "error") -> NoReturn:
    fail(message, status, code)
    sys.exit(status)


def _json_before_settings(argv: list[str]) -> None:
    """An error found before the command's options were taken in (an unknown command, a
    missing one, a bad option) still comes as JSON when --json was given anywhere before
    `--`: a script gets one JSON document for every error."""
    current = Settings.current
    if current is not None and current.json:
        return
    args = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" in args:
        if current is None:
            current = Settings(agent=None, store_dir=None, socket=None, json=True, quiet=False)
        current.json = True


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        # Not standalone: click returns a command's ctx.exit(status) instead of exiting
        # (`relayctl daemon` exits 70 after a crash, and that must reach systemd).
        status = cli.main(args=argv, prog_name="relayctl", standalone_mode=False)
        sys.exit(status if type(status) is int else 0)
    except RelayError as exc:
        if isinstance(exc, Internal) and exc.__cause__ is not None and os.environ.get("RELAY_DEBUG"):
            raise  # a bug in an operation run here (direct mode): its traceback on request
        _fail(exc.message, exc.exit_status, exc.code)
    except click.exceptions.Abort:
        _fail("aborted", 1)
    except click.ClickException as exc:
        _json_before_settings(argv)
        _fail(exc.format_message(), 2 if isinstance(exc, click.UsageError) else exc.exit_code or 1, "invalid_argument")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug: still one line, with the traceback on request
        if os.environ.get("RELAY_DEBUG"):
            raise
        _fail(f"internal error: {type(exc).__name__}: {exc} (set RELAY_DEBUG=1 for the traceback)", 70, "internal")
    finally:
        if Settings.current is not None:
            Settings.current.close()


if __name__ == "__main__":
    main()
