"""Each agent program's client configuration and command line, for `relayctl up`.

`launch(agent, team, store_dir, socket, state_dir)` writes what the program needs to hear
from relay and returns the argv its pane runs:

  claude   an MCP config file (`relayctl mcp-config` shape) given with --mcp-config, relay's
           hooks in the repository's .claude/settings.json, and with notify = "channel" the
           development-channels flag that lets relay-mcp push mail into the session
  codex    relay-mcp given with `-c mcp_servers.relay=...` (no file to share), and relay's
           hooks in .codex/hooks.json
  gemini   relay's hooks and relay-mcp in the repository's .gemini/settings.json: one
           project-wide file for every Gemini pane, so the server's role is `$RELAY_AGENT`,
           which Gemini CLI fills in from each pane's own environment
  opencode relay's plugin in the repository's .opencode/plugin/relay.js and relay-mcp under
           `mcp` of its opencode.json: project-wide, the server's role `{env:RELAY_AGENT}`,
           which OpenCode fills in from each pane's environment
  copilot  an MCP config file given with --additional-mcp-config (relay's tools allowed
           with --allow-tool relay), and relay's hooks in .github/hooks/relay.json
  other    the command line as written; the pane's environment names the agent

The hooks are installed without an agent name: each pane's RELAY_AGENT says whose mail
they deliver, so the agents of one repository share one settings file.

`startup_prompts(agent, team)` lists the questions relay's own configuration makes a program
ask at start, with the keys that answer each (up.py watches the panes for them).
`SCREENS` says what each program's pane shows when it is ready for a prompt, and its folder
trust question, which is the person's to answer, never relay's. `missing_programs(team)`
lists the agents whose program is not installed, before `up` starts anything.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tomllib
from typing import NamedTuple

from relayctl import hook_settings
from relayctl.cmd_mcp import SERVER_NAME, codex_table, gemini_config, opencode_config, server_config
from relayd.fsio import replace_file
from relayd import layout

from .teamfile import Agent, Team

DEV_CHANNELS = ["--dangerously-load-development-channels", f"server:{SERVER_NAME}"]

# (text on the screen, keys that answer it). With the development-channels flag Claude Code
# asks at every start whether the channel is for local development; Enter takes the
# preselected "I am using this for local development". (No setting skips it in 2.1.332.)
CHANNEL_QUESTION = ("I am using this for local development", ["Enter"])

# Gemini CLI expands `$NAME` in its settings' strings from its own environment when it
# loads them, so one project file names each pane's own agent.
PANE_AGENT = "$RELAY_AGENT"
OPENCODE_PANE_AGENT = "{env:RELAY_AGENT}"  # OpenCode's spelling of the same


# Where each program comes from (the package a person installs with `npm install -g`).
NPM_PACKAGE = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "gemini": "@google/gemini-cli",
               "opencode": "opencode-ai", "copilot": "@github/copilot"}


# -- each program's plain data, beside its npm package (kept together to move as one) --------
# tested: the version relay's tests run it at (tests/agents/package.json); `up` says so in one
#   line when the one installed is older.
# env: the calling shell's settings the program reads (sign-in, endpoints, cloud provider),
#   found in each program's own documentation and code; `up` copies the ones set into the
#   program's pane, since tmux gives a new pane its server's environment, not the caller's.
# signed_out: on its screen when it started without a sign-in.
PROGRAM_DATA: dict[str, dict] = {
    "claude": {"tested": "2.1.332",
               "env": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "CLAUDE_CODE_OAUTH_TOKEN",
                       "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "AWS_REGION", "AWS_PROFILE", "ANTHROPIC_VERTEX_PROJECT_ID",
                       "CLOUD_ML_REGION"),
               "signed_out": ("Not logged in",)},
    "codex": {"tested": "0.169.0", "env": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY", "CODEX_HOME"), "signed_out": ()},
    "gemini": {"tested": "0.61.0",
               "env": ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
                       "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_GENAI_USE_VERTEXAI", "GEMINI_MODEL"),
               "signed_out": ("Enter Gemini API Key", "How would you like to authenticate")},
    "opencode": {"tested": "1.18.33",
                 "env": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                         "OPENCODE_CONFIG"),
                 "signed_out": ()},
    "copilot": {"tested": "1.0.102", "env": ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL", "COPILOT_MODEL"),
                "signed_out": ()},
}
# Read by every program (Node's and Rust's HTTP clients): proxies and the certificates they need.
NETWORK_ENV = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "no_proxy", "all_proxy",
               "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")


def passed_settings(agent: Agent, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The calling shell's settings `agent`'s program reads (PROGRAM_DATA env, NETWORK_ENV)
    that are set there; the team file's `env` for the agent wins over them."""
    environ = os.environ if environ is None else environ
    names = (*PROGRAM_DATA.get(agent.kind, {}).get("env", ()), *NETWORK_ENV)
    return {name: environ[name] for name in names if environ.get(name) and name not in agent.env}


def installed_version(agent: Agent) -> str | None:
    """The version of the npm package behind `agent`'s program on PATH (its package.json,
    found from the command's real path); None for a command or a program not from npm."""
    package = NPM_PACKAGE.get(agent.kind)
    found = shutil.which(agent.program) if package else None
    if found is None:
        return None
    folder = os.path.dirname(os.path.realpath(found))
    while folder != os.path.dirname(folder):
        try:
            with open(os.path.join(folder, "package.json"), "rb") as fh:
                manifest = json.loads(fh.read())
            if isinstance(manifest, dict) and manifest.get("name") == package:
                return str(manifest.get("version") or "") or None
        except (OSError, ValueError):
            pass
        folder = os.path.dirname(folder)
    return None


def version_warning(agent: Agent) -> str | None:
    """One line when `agent`'s program is older than the version relay is tested with."""
    tested, found = PROGRAM_DATA.get(agent.kind, {}).get("tested"), installed_version(agent)
    if not tested or not found or _version_key(found) >= _version_key(tested):
        return None
    return (f"{agent.program} is {found}, older than the {tested} relay is tested with: "
            f"npm install -g {NPM_PACKAGE[agent.kind]}@{tested}")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("-")[0].split("."))


def signed_out(agent: Agent, screen: str) -> str | None:
    """What the program's screen shows when it started without a sign-in, if it does."""
    return next((mark for mark in PROGRAM_DATA.get(agent.kind, {}).get("signed_out", ()) if mark in screen), None)


class Screen(NamedTuple):
    title: str
    ready: tuple[str, ...]  # any of these on the screen: the program takes a prompt
    trust: str  # on the screen while the program asks whether to trust the folder
    question: str  # that question, as the person reads it


# Measured with Claude Code 2.1.330, Codex CLI 0.169.0, Gemini CLI 0.61.0 and Copilot CLI
# 1.0.102. (OpenCode asks no folder trust and may take a while to draw at its first start:
# `up` watches it as it watches any command.)
SCREENS = {
    "claude": Screen("Claude Code", ("? for shortcuts", "shift+tab to cycle"), "Yes, I trust this folder",
                     "Quick safety check: is this a project you created or one you trust?"),
    "codex": Screen("Codex CLI", ("Ask Codex to do anything",), "Trust this folder?", "Trust this folder?"),
    "gemini": Screen("Gemini CLI", ("Type your message",), "Do you trust the files in this folder?",
                     "Do you trust the files in this folder?"),
    "copilot": Screen("GitHub Copilot CLI", ("/ commands",), "Do you trust the files in this folder?",
                      "Do you trust the files in this folder?"),
}


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
        if agent.kind in NPM_PACKAGE:
            lines.append(f"{agent.name}: {program} is not installed (not on PATH): npm install -g {NPM_PACKAGE[agent.kind]}")
        else:
            lines.append(f"{agent.name}: {program or agent.program!r} is not installed (not on PATH, or not executable)")
    return lines


class Question(NamedTuple):
    text: str  # what the program's screen shows while it asks
    keys: list[str]  # what answers it
    expected: bool = True  # False: asked only sometimes; answered when seen, not missed when not


# Claude Code's switches for a cloud provider's API, where it offers no channels.
_CLOUD_PROVIDERS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_USE_ANTHROPIC_AWS",
                    "CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD", "CLAUDE_CODE_USE_MANTLE")


def arrival(agent: Agent) -> str:
    """How mail reaches the agent: "channel" (relay-mcp pushes it into Claude Code's session;
    nothing is typed), "hook" (OpenCode: relay's plugin hands it over, and starts a turn when
    the session is idle) or "pane" (a trigger typed into its pane, relayd.arrival.notify). `auto` takes
    the channel where it works: a Claude Code agent on Anthropic's API, not a cloud provider
    (Claude Code refuses channels under CLAUDE_CODE_USE_BEDROCK, _VERTEX, ...), from an account
    whose channels switch is on (Claude Code keeps it in ~/.claude.json:
    `cachedGrowthBookFeatures.tengu_harbor`, docs/mcp.md); else the pane."""
    if agent.notify != "auto":
        return agent.notify
    if agent.kind == "opencode":
        return "hook"  # relay's plugin starts a turn for mail to an idle session; nothing is typed
    if agent.kind != "claude" or any((agent.env.get(k) or os.environ.get(k, "")) not in ("", "0", "false") for k in _CLOUD_PROVIDERS):
        return "pane"
    home = agent.env.get("HOME") or os.environ.get("HOME") or ""
    try:
        with open(os.path.join(home, ".claude.json"), encoding="utf-8") as fh:
            features = json.load(fh).get("cachedGrowthBookFeatures") or {}
    except (OSError, ValueError, AttributeError):
        return "pane"
    return "channel" if isinstance(features, dict) and features.get("tengu_harbor") is True else "pane"


def startup_prompts(agent: Agent, team: Team) -> list[Question]:
    """The questions relay's configuration makes this agent's program ask at start."""
    if agent.kind == "codex":
        return _codex_hook_review(agent, team)
    return [Question(*CHANNEL_QUESTION)] if arrival(agent) == "channel" else []


def _codex_hook_review(agent: Agent, team: Team) -> list[Question]:
    """Codex CLI asks to review hooks it has not trusted yet ("Hooks need review"), relay's
    included. It is answered ("Trust all and continue") only when every hook it can be about
    is relay's: the project's hooks file holds relay's alone and the count on the screen is
    theirs. Anything more is the person's to review. Codex keeps what it trusted in
    `[hooks.state."<hooks file>:<event>:..."]` of $CODEX_HOME/config.toml; a hooks file
    written after that record is new to it again."""
    count = hook_settings.relay_alone("codex", team.repo)
    if count is None:
        return []
    text = f"{count} hook is new or changed" if count == 1 else f"{count} hooks are new or changed"
    hooks_file = os.path.realpath(hook_settings.settings_path("codex", team.repo))
    codex_home = agent.env.get("CODEX_HOME") or os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    config = os.path.join(codex_home, "config.toml")
    try:
        with open(config, "rb") as fh:
            state = tomllib.load(fh).get("hooks", {}).get("state", {})
        trusted = sum(1 for key in state if key.startswith(hooks_file + ":"))
        expected = trusted < count or os.stat(hooks_file).st_mtime > os.stat(config).st_mtime
    except (OSError, ValueError, AttributeError):
        expected = True
    return [Question(text, ["Down", "Enter"], expected)]


def launch(agent: Agent, team: Team, store_dir: str, socket: str | None, state_dir: str) -> list[str]:
    """Write `agent`'s client configuration; the argv of its pane."""
    model = ["--model", agent.model] if agent.model else []
    store_arg = store_dir if store_dir != _default_store() else None
    if agent.kind == "claude":
        config = os.path.join(state_dir, f"{agent.name}.mcp.json")
        _write(config, json.dumps(server_config(agent.name, store_dir, socket, team.name), indent=2) + "\n")
        hook_settings.install("claude", team.repo, store_arg, socket)
        channels = DEV_CHANNELS if arrival(agent) == "channel" else []
        return ["claude", "--mcp-config", config, *channels, *model, *agent.args]
    if agent.kind == "codex":
        hook_settings.install("codex", team.repo, store_arg, socket)
        table = codex_table(agent.name, store_dir, socket, team.name)
        return ["codex", "-c", f"mcp_servers.{SERVER_NAME}={table}", *model, *agent.args]
    if agent.kind == "gemini":
        hook_settings.install("gemini", team.repo, store_arg, socket)
        server = gemini_config(PANE_AGENT, store_dir, socket, team.name)["mcpServers"][SERVER_NAME]
        hook_settings.put_gemini_server(team.repo, SERVER_NAME, server)
        return ["gemini", *model, *agent.args]
    if agent.kind == "opencode":
        hook_settings.install("opencode", team.repo, store_arg, socket)
        server = opencode_config(OPENCODE_PANE_AGENT, store_dir, socket, team.name)["mcp"][SERVER_NAME]
        hook_settings.put_opencode_server(team.repo, SERVER_NAME, server)
        return ["opencode", *model, *agent.args]
    if agent.kind == "copilot":
        config = os.path.join(state_dir, f"{agent.name}.mcp.json")
        _write(config, json.dumps(server_config(agent.name, store_dir, socket, team.name), indent=2) + "\n")
        hook_settings.install("copilot", team.repo, store_arg, socket)
        return ["copilot", "--additional-mcp-config", f"@{config}", f"--allow-tool={SERVER_NAME}", *model, *agent.args]
    return [*shlex.split(agent.program), *agent.args]


def pane_env(agent: Agent, team: Team, store_dir: str, socket: str | None) -> dict[str, str]:
    """The identity a pane's program and everything it starts inherit, with the calling
    shell's settings that program reads (passed_settings)."""
    env = {"RELAY_AGENT": agent.name, "OVLD_ROLE": agent.name, "RELAY_DIR": store_dir, "OVLD_SESSION": team.name}
    if socket:
        env["RELAY_SOCKET"] = socket
    if agent.kind == "opencode":
        env["PWD"] = os.path.abspath(team.repo)  # OpenCode finds its project from $PWD, not its working directory
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
