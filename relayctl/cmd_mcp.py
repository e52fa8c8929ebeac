"""mcp-config: the MCP server configuration Claude Code needs to give a pane its relay tools."""

from __future__ import annotations

import json
import os
import sys

import click

from relayd.admin import PRESETS
from relayd.records import check_agent_name

from .context import settings

SERVER_NAME = "relay"  # the key under mcpServers; `--channels server:relay` refers to it


def _command() -> list[str]:
    """The installed `relay-mcp` next to this Python (never a version-manager shim, which
    would cost every pane tens of milliseconds at start), else `python -m mcp_shim`."""
    script = os.path.join(os.path.dirname(sys.executable), "relay-mcp")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "mcp_shim"]


def server_entry(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """One server's object: what `claude mcp add-json NAME JSON` takes."""
    command, *args = _command()
    env = {"OVLD_ROLE": role, "RELAY_DIR": store_dir}
    if socket:
        env["RELAY_SOCKET"] = socket
    if session:
        env["OVLD_SESSION"] = session
    return {"type": "stdio", "command": command, "args": args, "env": env}


def server_config(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """A whole MCP configuration file (`claude --mcp-config FILE`, `.mcp.json`)."""
    return {"mcpServers": {SERVER_NAME: server_entry(role, store_dir, socket, session)}}


@click.command("mcp-config")
@click.option("--role", metavar="NAME", help="The agent this pane speaks for (default: --agent / OVLD_ROLE / RELAY_AGENT).")
@click.option("--preset", type=click.Choice(sorted(PRESETS)), help="One configuration per role of a team preset.")
@click.option("--session", metavar="NAME", help="The terminal session the role runs in (OVLD_SESSION).")
@click.option("--out-dir", type=click.Path(file_okay=False), help="With --preset: write <role>.json files here instead of printing.")
@click.option("--server-only", is_flag=True, help="Print only the server object (no mcpServers wrapper), as `claude mcp add-json NAME JSON` takes it.")
def mcp_config(role: str | None, preset: str | None, session: str | None, out_dir: str | None, server_only: bool) -> None:
    """Print the JSON that `claude --mcp-config FILE` (or a project's .mcp.json) takes.

    The server runs `relay-mcp` with the role and store in its environment. With
    --preset, prints {role: config} for every role of the team, or with --out-dir
    writes one file per role. --server-only prints just the one server's object, which
    `claude mcp add-json` takes (it refuses the whole file as "Invalid input").

    \b
    Examples:
      relayctl mcp-config --role inferno > inferno.json
      claude --mcp-config inferno.json --dangerously-load-development-channels server:relay
      relayctl mcp-config --preset overlord --out-dir .relay
      claude mcp add-json relay "$(relayctl mcp-config --role inferno --server-only)"
    """
    s = settings()
    if preset and role:
        raise click.UsageError("give --role or --preset, not both")
    if out_dir and not preset:
        raise click.UsageError("--out-dir goes with --preset (a single --role config is printed)")
    if server_only and preset:
        raise click.UsageError("--server-only prints one server: give --role, not --preset")
    socket = os.path.abspath(s.socket) if s.socket else None
    if not preset:
        name = role or s.agent
        if not name:
            raise click.UsageError("which role? pass --role NAME (or --preset overlord)")
        check_agent_name(name, "role")
        if server_only:
            click.echo(json.dumps(server_entry(name, s.dir, socket, session)))
            return
        click.echo(json.dumps(server_config(name, s.dir, socket, session), indent=2))
        return
    configs = {name: server_config(name, s.dir, socket, session) for name in PRESETS[preset]}
    if not out_dir:
        click.echo(json.dumps(configs, indent=2))
        return
    try:
        os.makedirs(out_dir, exist_ok=True)
        for name, config in configs.items():
            path = os.path.join(out_dir, f"{name}.json")
            with open(path, "w") as fh:
                json.dump(config, fh, indent=2)
                fh.write("\n")
            s.note(f"wrote {path}")
    except OSError as exc:
        raise click.UsageError(f"cannot write to --out-dir {out_dir}: {exc.strerror or exc}") from None
