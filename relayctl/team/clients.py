"""Each agent program's client configuration and command line, for `relayctl up`.

`launch(agent, team, store_dir, socket, state_dir)` writes what the program needs to hear
from relay and returns the argv its pane runs, from its module in the programs wing
(relayd.programs): relay's hooks in the project's settings (`Settings`), relay-mcp as its
`Mcp.given` says (a file named on its command line, one command-line value, or the project
file the program reads its servers from, where one file serves every pane, so the server's
role is each pane's own RELAY_AGENT, `Mcp.pane_agent`), with notify = "channel" the flags
that let relay-mcp push mail into the session (`Launch.channel`), and with extension = true
relay's extension and the flags its program needs to load it (`Extension`: Copilot's
--experimental). Any other command runs as
written; the pane's environment names the agent.

The hooks are installed without an agent name: each pane's RELAY_AGENT says whose mail
they deliver, so the agents of one repository share one settings file.

`startup_prompts(agent, team)` lists the questions relay's own configuration makes a program
ask at start, with the keys that answer each (up.py watches the panes for them); the
person's own questions at a first start (`Screen.first_start`: folder trust, ...) are named,
never answered. `missing_programs(team)` lists the agents whose program is not installed,
before `up` starts anything.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil

from relayctl import hook_settings
from relayctl.cmd_mcp import config, inline, server
from relayd.fsio import replace_file
from relayd import layout
from relayd.programs.program import SERVER_NAME, Program, Question
from relayd.programs import installed
from relayd.programs.registry import PROGRAMS

from .teamfile import Agent, Team

__all__ = ["Question", "SERVER_NAME", "arrival", "executable", "launch", "missing_programs", "pane_env", "program_of", "startup_prompts"]


def program_of(agent: Agent) -> Program | None:
    """What relay knows of the agent's program; None for any other command."""
    return PROGRAMS.get(agent.kind)


# Read by every program (Node's and Rust's HTTP clients): proxies and the certificates they need.
NETWORK_ENV = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "no_proxy", "all_proxy",
               "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")


def passed_settings(agent: Agent, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The calling shell's settings `agent`'s program reads (its Launch.reads, NETWORK_ENV)
    that are set there; the team file's `env` for the agent wins over them."""
    environ = os.environ if environ is None else environ
    spec = program_of(agent)
    names = (*(spec.launch.reads if spec is not None else ()), *NETWORK_ENV)
    return {name: environ[name] for name in names if environ.get(name) and name not in agent.env}


def version_warning(agent: Agent) -> str | None:
    """One line when `agent`'s program is older than the version relay is tested with."""
    spec = program_of(agent)
    return installed.warning(spec, agent.program) if spec is not None else None


def signed_out(agent: Agent, screen: str) -> str | None:
    """What the program's screen shows when it started without a sign-in, if it does."""
    spec = program_of(agent)
    return next((mark for mark in (spec.screen.signed_out if spec is not None else ()) if mark in screen), None)


def executable(agent: Agent) -> str:
    """The program a pane of `agent` runs (its command's first word)."""
    if agent.kind != "command":
        return agent.program
    words = shlex.split(agent.program)
    return words[0] if words else ""


def missing_programs(team: Team) -> list[str]:
    """One line per agent whose program is not installed: what to install."""
    lines = []
    for agent in team.agents:
        program = executable(agent)
        found = os.access(program, os.X_OK) if "/" in program else shutil.which(program) is not None
        if found:
            continue
        if program_of(agent) is not None:
            lines.append(f"{agent.name}: {program} is not installed (not on PATH): npm install -g {program_of(agent).package}")
        else:
            lines.append(f"{agent.name}: {program or agent.program!r} is not installed (not on PATH, or not executable)")
    return lines


def arrival(agent: Agent) -> str:
    """How mail reaches the agent: "channel" (relay-mcp pushes it into the session; nothing
    is typed), "hook" (relay's plugin hands it over and starts a turn when the session is
    idle: OpenCode) or "pane" (a trigger typed into its pane, relayd.arrival.notify). `auto`
    takes the channel where the program has one that works for this person
    (`Channel.available`: Claude Code on Anthropic's API, from an account whose channels
    switch is on, docs/mcp.md), else the program's own way (`Launch.arrival`)."""
    if agent.notify != "auto":
        return agent.notify
    spec = program_of(agent)
    if spec is None:
        return "pane"
    channel = spec.launch.channel
    if channel is not None and channel.available(agent.env):
        return "channel"
    return spec.launch.arrival


def startup_prompts(agent: Agent, team: Team) -> list[Question]:
    """The questions relay's configuration makes this agent's program ask at start: its
    review of relay's hooks (`Settings.review`), the channel's question (`Channel.question`)."""
    spec = program_of(agent)
    if spec is None:
        return []
    asked = []
    if spec.settings.review is not None:
        review = spec.settings.review(hook_settings.relay_alone(spec.name, team.repo), hook_settings.settings_path(spec.name, team.repo),
                                      agent.env)
        if review is not None:
            asked.append(review)
    if spec.launch.channel is not None and arrival(agent) == "channel":
        asked.append(spec.launch.channel.question)
    return asked


def launch(agent: Agent, team: Team, store_dir: str, socket: str | None, state_dir: str) -> list[str]:
    """Write `agent`'s client configuration; the argv of its pane."""
    spec = program_of(agent)
    if spec is None:
        return [*shlex.split(agent.program), *agent.args]
    model = ["--model", agent.model] if agent.model else []
    store_arg = store_dir if store_dir != _default_store() else None
    hook_settings.install(spec.name, team.repo, store_arg, socket)
    flags: list[str] = []
    if agent.extension and spec.extension is not None:  # the team file asked for it (teamfile: `extension`)
        hook_settings.install_extension(spec.name, team.repo, store_arg, socket)
        flags = [f for f in spec.extension.flags if f not in agent.args]
    given = None
    if spec.mcp.given == "file":
        given = os.path.join(state_dir, f"{agent.name}.mcp.json")
        _write(given, json.dumps(config(spec.name, agent.name, store_dir, socket, team.name), indent=2) + "\n")
    elif spec.mcp.given == "argument":
        given = inline(spec.name, agent.name, store_dir, socket, team.name)
    elif spec.mcp.given == "project":
        hook_settings.put_server(spec.name, team.repo, SERVER_NAME, server(spec.name, spec.mcp.pane_agent, store_dir, socket, team.name))
    channels = spec.launch.channel.flags if spec.launch.channel is not None and arrival(agent) == "channel" else ()
    return spec.launch.argv(given, channels, model, [*flags, *agent.args])


def pane_env(agent: Agent, team: Team, store_dir: str, socket: str | None) -> dict[str, str]:
    """The identity a pane's program and everything it starts inherit, with the calling
    shell's settings that program reads (passed_settings)."""
    env = {"RELAY_AGENT": agent.name, "OVLD_ROLE": agent.name, "RELAY_DIR": store_dir, "OVLD_SESSION": team.name}
    if socket:
        env["RELAY_SOCKET"] = socket
    spec = program_of(agent)
    if spec is not None and spec.launch.env is not None:
        env.update(spec.launch.env(team.repo))  # OpenCode finds its project from $PWD, not its working directory
    env.update(passed_settings(agent))
    env.update(agent.env)
    return env


def _default_store() -> str | None:
    try:
        return layout.default_store_dir({"HOME": os.environ.get("HOME", "")})
    except layout.NoHome:
        return None


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    replace_file(path, text.encode())
