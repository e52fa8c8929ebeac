"""Each agent program's client configuration and command line, for `relayctl up`.

`launch(agent, team, store_dir, socket, state_dir)` writes what the program needs to hear
from relay and returns the argv its pane runs:

  claude   an MCP config file (`relayctl mcp-config` shape) given with --mcp-config, relay's
           hooks in the repository's .claude/settings.json, and with notify = "channel" the
           development-channels flag that lets relay-mcp push mail into the session
  codex    relay-mcp given with `-c mcp_servers.relay=...` (no file to share), and relay's
           hooks in .codex/hooks.json
  gemini   relay's hooks in .gemini/settings.json (its MCP servers live in one project-wide
           settings file, which cannot carry a role per pane: mail comes by hook)
  other    the command line as written; the pane's environment names the agent

The hooks are installed without an agent name: each pane's RELAY_AGENT says whose mail
they deliver, so the agents of one repository share one settings file.

`startup_prompts(agent)` lists the questions relay's own configuration makes a program ask
at start, with the keys that answer each (up.py watches the panes for them).
"""

from __future__ import annotations

import json
import os
import shlex

from relayctl import hook_settings
from relayctl.cmd_mcp import SERVER_NAME, codex_table, server_config
from relayd.fsio import replace_file

from .teamfile import Agent, Team

DEV_CHANNELS = ["--dangerously-load-development-channels", f"server:{SERVER_NAME}"]

# (text on the screen, keys that answer it). With the development-channels flag Claude Code
# asks at every start whether the channel is for local development; Enter takes the
# preselected "I am using this for local development". (No setting skips it in 2.1.330.)
CHANNEL_QUESTION = ("I am using this for local development", ["Enter"])


def startup_prompts(agent: Agent) -> list[tuple[str, list[str]]]:
    """The questions relay's configuration makes this agent's program ask at start."""
    return [CHANNEL_QUESTION] if agent.notify == "channel" else []


def launch(agent: Agent, team: Team, store_dir: str, socket: str | None, state_dir: str) -> list[str]:
    """Write `agent`'s client configuration; the argv of its pane."""
    model = ["--model", agent.model] if agent.model else []
    store_arg = store_dir if store_dir != _default_store() else None
    if agent.kind == "claude":
        config = os.path.join(state_dir, f"{agent.name}.mcp.json")
        _write(config, json.dumps(server_config(agent.name, store_dir, socket, team.name), indent=2) + "\n")
        hook_settings.install("claude", None, team.repo, store_arg, socket)
        channels = DEV_CHANNELS if agent.notify == "channel" else []
        return ["claude", "--mcp-config", config, *channels, *model, *agent.args]
    if agent.kind == "codex":
        hook_settings.install("codex", None, team.repo, store_arg, socket)
        table = codex_table(agent.name, store_dir, socket, team.name)
        return ["codex", "-c", f"mcp_servers.{SERVER_NAME}={table}", *model, *agent.args]
    if agent.kind == "gemini":
        hook_settings.install("gemini", None, team.repo, store_arg, socket)
        return ["gemini", *model, *agent.args]
    return [*shlex.split(agent.program), *agent.args]


def pane_env(agent: Agent, team: Team, store_dir: str, socket: str | None) -> dict[str, str]:
    """The identity a pane's program and everything it starts inherit."""
    env = {"RELAY_AGENT": agent.name, "OVLD_ROLE": agent.name, "RELAY_DIR": store_dir, "OVLD_SESSION": team.name}
    if socket:
        env["RELAY_SOCKET"] = socket
    env.update(agent.env)
    return env


def _default_store() -> str | None:
    from relayd import layout

    try:
        return layout.default_store_dir({"HOME": os.environ.get("HOME", "")})
    except layout.NoHome:
        return None


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    replace_file(path, text.encode())
