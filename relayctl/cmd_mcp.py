"""mcp-config: the MCP server configuration an agent program needs to give a pane its relay tools.

Each program has its own shape for the same server (`relay-mcp` with the role and store in
its environment): Claude Code a JSON `mcpServers` file (or the inner object for
`claude mcp add-json`), Codex CLI a TOML `[mcp_servers.relay]` table, Gemini CLI an
`mcpServers` block of its settings.json, GitHub Copilot CLI Claude Code's file as it is
(`copilot --additional-mcp-config @FILE`), OpenCode an `mcp` block of its opencode.json.
`render(program, ...)` gives each as text.
"""

from __future__ import annotations

import json
import os

import click

from relayd.upkeep.admin import PRESETS
from relayd.records import check_agent_name

from .context import installed_command, settings
from .hook_settings import SERVER_NAME

PROGRAMS = ("claude", "codex", "gemini", "copilot", "opencode")
FILE_SUFFIX = {"claude": ".json", "codex": ".config.toml", "gemini": ".json", "copilot": ".json", "opencode": ".json"}


def _launch(role: str, store_dir: str, socket: str | None, session: str | None) -> tuple[str, list[str], dict[str, str]]:
    command, *args = installed_command("relay-mcp", "mcp_shim")
    env = {"OVLD_ROLE": role, "RELAY_DIR": store_dir}
    if socket:
        env["RELAY_SOCKET"] = socket
    if session:
        env["OVLD_SESSION"] = session
    return command, args, env


def server_entry(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """One server's object: what `claude mcp add-json NAME JSON` takes."""
    command, args, env = _launch(role, store_dir, socket, session)
    return {"type": "stdio", "command": command, "args": args, "env": env}


def server_config(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """A whole MCP configuration file (`claude --mcp-config FILE`, `.mcp.json`)."""
    return {"mcpServers": {SERVER_NAME: server_entry(role, store_dir, socket, session)}}


# relay's tools read and write only relay's own store (messages, presence, reservations):
# Codex and Gemini CLI are told not to ask before each call, or a one-shot run (where
# nobody can answer) would refuse them. Claude Code takes such permissions in its own
# settings (`permissions.allow: ["mcp__relay"]`), not in the server's entry.


def gemini_config(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """The `mcpServers` block of Gemini CLI's settings.json (it infers stdio from `command`)."""
    command, args, env = _launch(role, store_dir, socket, session)
    return {"mcpServers": {SERVER_NAME: {"command": command, "args": args, "env": env, "trust": True}}}


def opencode_config(role: str, store_dir: str, socket: str | None, session: str | None) -> dict:
    """The `mcp` block of OpenCode's opencode.json: a local server is one argv list."""
    command, args, env = _launch(role, store_dir, socket, session)
    return {"mcp": {SERVER_NAME: {"type": "local", "command": [command, *args], "environment": env, "enabled": True}}}


def codex_config(role: str, store_dir: str, socket: str | None, session: str | None) -> str:
    """Codex CLI's TOML: a `[mcp_servers.relay]` table for config.toml (or a profile)."""
    command, args, env = _launch(role, store_dir, socket, session)
    lines = [f"[mcp_servers.{SERVER_NAME}]", f"command = {_toml_string(command)}"]
    if args:
        lines.append(f"args = [{', '.join(_toml_string(a) for a in args)}]")
    lines.append('default_tools_approval_mode = "approve"  # relay\'s tools touch only the relay store')
    lines += ["", f"[mcp_servers.{SERVER_NAME}.env]"]
    lines += [f"{key} = {_toml_string(value)}" for key, value in env.items()]
    return "\n".join(lines) + "\n"


def codex_table(role: str, store_dir: str, socket: str | None, session: str | None) -> str:
    """The same server as one inline TOML table: `codex -c mcp_servers.relay=TABLE`."""
    command, args, env = _launch(role, store_dir, socket, session)
    return (
        f"{{command = {_toml_string(command)}, args = [{', '.join(_toml_string(a) for a in args)}], "
        f"env = {{{', '.join(f'{k} = {_toml_string(v)}' for k, v in env.items())}}}, "
        'default_tools_approval_mode = "approve"}'
    )


def _toml_string(text: str) -> str:
    # A JSON string is a TOML basic string, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def render(program: str, role: str, store_dir: str, socket: str | None = None, session: str | None = None, server_only: bool = False) -> str:
    """The configuration text `program` takes for one role (what `mcp-config --for` prints)."""
    if program == "codex":
        return codex_config(role, store_dir, socket, session)
    if program == "gemini":
        return json.dumps(gemini_config(role, store_dir, socket, session), indent=2) + "\n"
    if program == "opencode":
        return json.dumps(opencode_config(role, store_dir, socket, session), indent=2) + "\n"
    if server_only:
        return json.dumps(server_entry(role, store_dir, socket, session)) + "\n"
    return json.dumps(server_config(role, store_dir, socket, session), indent=2) + "\n"


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
      claude  the JSON file `claude --mcp-config FILE` (or a project's .mcp.json) takes;
              --server-only: the inner object `claude mcp add-json relay JSON` takes
      codex   TOML for ~/.codex/config.toml, a trusted project's .codex/config.toml,
              or a profile ~/.codex/NAME.config.toml (`codex -p NAME`)
      gemini  the mcpServers block of .gemini/settings.json (Gemini CLI connects MCP
              servers only in a folder you have trusted)
      copilot Claude Code's file, which GitHub Copilot CLI takes as it is:
              `copilot --additional-mcp-config @FILE`, ~/.copilot/mcp-config.json,
              or a trusted folder's .mcp.json
      opencode the mcp block of opencode.json (in the folder OpenCode starts in)

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
    if server_only and program != "claude":
        raise click.UsageError(f"--server-only is for `claude mcp add-json`; --for {program} prints the {program} shape whole")
    socket = os.path.abspath(s.socket) if s.socket else None
    if not preset:
        name = role or s.agent
        if not name:
            raise click.UsageError("which role? pass --role NAME (or --preset overlord)")
        check_agent_name(name, "role")
        click.echo(render(program, name, s.dir, socket, session, server_only), nl=False)
        return
    if program == "codex" and not out_dir:
        raise click.UsageError("--preset with --for codex needs --out-dir: one TOML profile per role (<role>.config.toml, for `codex -p <role>`)")
    if not out_dir:
        builder = {"gemini": gemini_config, "opencode": opencode_config}.get(program, server_config)
        click.echo(json.dumps({name: builder(name, s.dir, socket, session) for name in PRESETS[preset]}, indent=2))
        return
    try:
        os.makedirs(out_dir, exist_ok=True)
        for name in PRESETS[preset]:
            path = os.path.join(out_dir, name + FILE_SUFFIX[program])
            with open(path, "w") as fh:
                fh.write(render(program, name, s.dir, socket, session))
            s.note(f"wrote {path}")
    except OSError as exc:
        raise click.UsageError(f"cannot write to --out-dir {out_dir}: {exc.strerror or exc}") from None
