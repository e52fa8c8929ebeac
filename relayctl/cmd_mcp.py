"""mcp-config: the MCP server configuration an agent program needs to give a pane its relay tools.

Each program has its own shape for the same server (`relay-mcp` with the role and store in
its environment), built by its module in the programs wing (relayd.programs; `Mcp.build`):
Claude Code a JSON `mcpServers` file (or the inner object for `claude mcp add-json`), Codex
CLI a TOML `[mcp_servers.relay]` table, Gemini CLI an `mcpServers` block of its
settings.json, GitHub Copilot CLI Claude Code's file as it is, OpenCode an `mcp` block of its
opencode.json. `render(program, ...)` gives each as text.
"""

from __future__ import annotations

import json
import os

import click

from relayd.upkeep.admin import PRESETS
from relayd.programs.program import SERVER_NAME
from relayd.programs.registry import PROGRAMS as REGISTRY
from relayd.records import check_agent_name

from .context import installed_command, settings

PROGRAMS = tuple(REGISTRY)
# The program whose configuration is one server object that `--server-only` prints alone.
_SERVER_ONLY = next(name for name, spec in REGISTRY.items() if spec.mcp.given == "file")


def _launch(role: str, store_dir: str, socket: str | None, session: str | None) -> tuple[str, list[str], dict[str, str]]:
    command, *args = installed_command("relay-mcp", "mcp_shim")
    env = {"OVLD_ROLE": role, "RELAY_DIR": store_dir}
    if socket:
        env["RELAY_SOCKET"] = socket
    if session:
        env["OVLD_SESSION"] = session
    return command, args, env


def config(program: str, role: str, store_dir: str, socket: str | None, session: str | None):
    """`program`'s configuration for one role: a JSON object, or TOML text."""
    return REGISTRY[program].mcp.build(*_launch(role, store_dir, socket, session))


def server(program: str, role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """The one server's object of a JSON configuration (what `claude mcp add-json NAME JSON` takes)."""
    return REGISTRY[program].mcp.build.entry(*_launch(role, store_dir, socket, session))


def inline(program: str, role: str, store_dir: str, socket: str | None, session: str | None) -> str:
    """The configuration as one command-line value (Codex CLI: `-c mcp_servers.relay=TABLE`)."""
    return REGISTRY[program].mcp.build.inline(*_launch(role, store_dir, socket, session))


# relay's tools read and write only relay's own store (messages, presence, reservations):
# Codex and Gemini CLI are told not to ask before each call (in the server's entry), or a
# one-shot run (where nobody can answer) would refuse them. Claude Code takes such
# permissions in its own settings (`Settings.allow`), not in the server's entry.
def server_entry(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    return server(_SERVER_ONLY, role, store_dir, socket, session)


def server_config(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """A whole MCP configuration file (`claude --mcp-config FILE`, `.mcp.json`)."""
    return config(_SERVER_ONLY, role, store_dir, socket, session)


def render(program: str, role: str, store_dir: str, socket: str | None = None, session: str | None = None, server_only: bool = False) -> str:
    """The configuration text `program` takes for one role (what `mcp-config --for` prints)."""
    if server_only:
        return json.dumps(server(program, role, store_dir, socket, session)) + "\n"
    made = config(program, role, store_dir, socket, session)
    return made if isinstance(made, str) else json.dumps(made, indent=2) + "\n"


_FOR_HELP = "\n".join(f"      {name:<7} " + spec.mcp.help.replace("\n", "\n              ") for name, spec in REGISTRY.items())


@click.command("mcp-config")
@click.option("--for", "program", type=click.Choice(PROGRAMS), default="claude", show_default=True, help="The agent program whose configuration shape to print.")
@click.option("--role", metavar="NAME", help="The agent this pane speaks for (default: --agent / OVLD_ROLE / RELAY_AGENT).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), help="One configuration per role of a team preset.")
@click.option("--session", metavar="NAME", help="The terminal session the role runs in (OVLD_SESSION).")
@click.option("--out-dir", type=click.Path(file_okay=False), help="With --preset: write one file per role here (<role>.json; for Codex <role>.config.toml, a profile) instead of printing.")
@click.option("--server-only", is_flag=True, help="Claude Code: print only the server object (no mcpServers wrapper), as `claude mcp add-json NAME JSON` takes it.")
def mcp_config(program: str, role: str | None, preset: str | None, session: str | None, out_dir: str | None, server_only: bool) -> None:
    """Print the MCP server configuration that gives an agent program the relay tools.

    The server runs `relay-mcp` with the role and store in its environment. Each program
    gets its own shape:

    \b
    {programs}

    With --preset, prints {role: config} for every role of the team (JSON), or with
    --out-dir writes one file per role.

    \b
    Examples:
      relayctl mcp-config --role inferno > inferno.json
      claude --mcp-config inferno.json --dangerously-load-development-channels server:relay
      claude mcp add-json relay "$(relayctl mcp-config --role inferno --server-only)"
      relayctl mcp-config --for codex --role inferno >> ~/.codex/inferno.config.toml
      relayctl mcp-config --for gemini --role inferno > .gemini/settings.json
      relayctl mcp-config --for copilot --role inferno > inferno.json
      copilot --additional-mcp-config @inferno.json
      relayctl mcp-config --for opencode --role inferno > opencode.json
      relayctl mcp-config --preset overlord --out-dir .relay
    """
    s = settings()
    if preset and role:
        raise click.UsageError("give --role or --preset, not both")
    if out_dir and not preset:
        raise click.UsageError("--out-dir goes with --preset (a single --role config is printed)")
    if server_only and preset:
        raise click.UsageError("--server-only prints one server: give --role, not --preset")
    if server_only and program != _SERVER_ONLY:
        raise click.UsageError(f"--server-only is for `claude mcp add-json`; --for {program} prints the {program} shape whole")
    socket = os.path.abspath(s.socket) if s.socket else None
    if not preset:
        name = role or s.agent
        if not name:
            raise click.UsageError("which role? pass --role NAME (or --preset overlord)")
        check_agent_name(name, "role")
        click.echo(render(program, name, s.dir, socket, session, server_only), nl=False)
        return
    if not out_dir:
        made = {name: config(program, name, s.dir, socket, session) for name in PRESETS[preset]}
        if any(isinstance(text, str) for text in made.values()):
            raise click.UsageError(f"--preset with --for {program} needs --out-dir: one TOML profile per role "
                                   f"(<role>{REGISTRY[program].mcp.suffix}, for `{program} -p <role>`)")
        click.echo(json.dumps(made, indent=2))
        return
    try:
        os.makedirs(out_dir, exist_ok=True)
        for name in PRESETS[preset]:
            path = os.path.join(out_dir, name + REGISTRY[program].mcp.suffix)
            with open(path, "w") as fh:
                fh.write(render(program, name, s.dir, socket, session))
            s.note(f"wrote {path}")
    except OSError as exc:
        raise click.UsageError(f"cannot write to --out-dir {out_dir}: {exc.strerror or exc}") from None


mcp_config.help = mcp_config.help.replace("    {programs}", _FOR_HELP)  # each program's line of its Mcp.help
