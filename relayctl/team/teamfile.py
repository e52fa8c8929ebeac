"""The team file, `relay-team.toml`: who is on the team and what each runs (docs/team.md).

    team = "oathkeeper"                 # the tmux session (zellij session) is named after it
    multiplexer = "tmux"                # or "zellij"
    repo = "."                          # the repository the agents work in (relative to this file)
    held_after = "30s"                  # optional: mail not in front of its agent's model this long says why
    held_notice_after = "10m"           # optional: held this long, its sender gets one notice
    interrupt_interval = "30s"          # optional: a working agent is told of mail at most this often
    loop_messages = 20                  # optional: two agents answering each other more than this often ...
    loop_window = "10m"                 # ... within this, with no word from the person, are paused

    [[agents]]
    name = "overlord"
    program = "claude"                  # claude, codex, gemini, opencode, copilot, or any command line
    model = "opus"                      # optional
    task = "coordinate the team"        # optional: shown by relayctl status
    args = ["--permission-mode", "plan"]  # optional: more arguments for the program
    env = { EDITOR = "vim" }            # optional: more environment for the pane
    lead = true                         # at most one: dead letters escalate to it
    interrupt_interval = "5m"           # optional: this agent's own (also loop_messages, loop_window)
    notify = "auto"                     # "auto" (default): Claude Code's channel where it works, else "pane";
                                        # "pane": a trigger typed into the agent's pane;
                                        # "channel" (claude only): pushed into the session by relay-mcp
    extension = true                    # copilot only, optional: relay's extension enqueues mail into the
                                        # session (nothing typed); runs `copilot --experimental`

Unknown keys are refused, so a misspelt one is a clear error rather than silently ignored.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field

from relayd.upkeep.admin import ESCALATION_AGENT, preset_agents
from relayd.errors import UsageError
from relayd.names import check_agent_name
from relayd.programs.registry import PROGRAMS
from relayd.timefmt import parse_duration

DEFAULT_FILE = "relay-team.toml"
MULTIPLEXERS = ("tmux", "zellij")
KNOWN_PROGRAMS = tuple(PROGRAMS)  # relayd.programs: what relay knows of each
_TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # a tmux session name without '.' or ':'
BUDGET_KEYS = ("interrupt_interval", "loop_messages", "loop_window")  # written into config.json's "coordination" by `up` (relayd.arrival.budget)
_TOP_KEYS = {"team", "multiplexer", "repo", "agents", "held_after", "held_notice_after", *BUDGET_KEYS}
HELD_KEYS = ("held_after", "held_notice_after")  # written into config.json's "delivery" by `up` (relayd.delivery.held)
_AGENT_KEYS = {"name", "program", "model", "task", "args", "env", "lead", "notify", "extension", *BUDGET_KEYS}
NOTIFY = ("auto", "pane", "channel")


@dataclass
class Agent:
    name: str
    program: str
    model: str | None = None
    task: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    lead: bool = False
    notify: str = "auto"
    extension: bool = False  # relay's extension for its program (relayd.programs: `Extension`), with the flags it needs
    budget: dict = field(default_factory=dict)  # its own interrupt_interval, loop_messages, loop_window

    @property
    def kind(self) -> str:
        """claude, codex, gemini, opencode or copilot when the program is one of them, else "command"."""
        return self.program if self.program in KNOWN_PROGRAMS else "command"


@dataclass
class Team:
    name: str
    multiplexer: str
    repo: str  # absolute, real path
    agents: list[Agent]
    path: str  # the team file
    delivery: dict[str, str] = field(default_factory=dict)  # held_after, held_notice_after when the file sets them
    budget: dict = field(default_factory=dict)  # interrupt_interval, loop_messages, loop_window when the file sets them

    @property
    def lead(self) -> Agent | None:
        return next((a for a in self.agents if a.lead), None)


def load(path: str) -> Team:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"no team file at {path}: write one (docs/team.md) or start from a preset: relayctl up --preset overlord") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
    where = os.path.abspath(path)
    _no_unknown(data, _TOP_KEYS, where)
    name = check_team_name(data.get("team"), f"{where}: team")
    multiplexer = data.get("multiplexer", "tmux")
    if multiplexer not in MULTIPLEXERS:
        raise UsageError(f"{where}: multiplexer must be one of {', '.join(MULTIPLEXERS)}, not {multiplexer!r}")
    repo = data.get("repo", ".")
    if not isinstance(repo, str):
        raise UsageError(f"{where}: repo must be a directory path")
    repo = os.path.realpath(os.path.join(os.path.dirname(where), os.path.expanduser(repo)))
    if not os.path.isdir(repo):
        raise UsageError(f"{where}: repo {repo} is not a directory")
    raw_agents = data.get("agents")
    if not isinstance(raw_agents, list) or not raw_agents:
        raise UsageError(f"{where}: no agents: add one [[agents]] table per agent (name, program)")
    agents = [_agent(raw, where, n) for n, raw in enumerate(raw_agents, 1)]
    seen: set[str] = set()
    for agent in agents:
        if agent.name in seen:
            raise UsageError(f"{where}: agent {agent.name} is listed twice")
        seen.add(agent.name)
    leads = [a.name for a in agents if a.lead]
    if len(leads) > 1:
        raise UsageError(f"{where}: only one agent can be the lead, not {', '.join(leads)}")
    delivery = {}
    for key in HELD_KEYS:
        if key in data:
            value = data[key]
            try:
                if not isinstance(value, str):
                    raise UsageError("")
                parse_duration(value)
            except UsageError:
                raise UsageError(f"{where}: {key} must be a duration such as \"30s\" or \"10m\", not {value!r}") from None
            delivery[key] = value
    return Team(name=name, multiplexer=multiplexer, repo=repo, agents=agents, path=where, delivery=delivery, budget=_budget(data, where))


def _budget(table: dict, where: str) -> dict:
    """The coordination budget's keys the table sets, checked (relayd.arrival.budget)."""
    found: dict = {}
    for key in BUDGET_KEYS:
        if key not in table:
            continue
        value = table[key]
        if key == "loop_messages":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"{where}: loop_messages must be a whole number of at least 1, not {value!r}")
        else:
            try:
                if not isinstance(value, str):
                    raise UsageError("")
                parse_duration(value)
            except UsageError:
                raise UsageError(f"{where}: {key} must be a duration such as \"30s\" or \"10m\", not {value!r}") from None
        found[key] = value
    return found


def check_team_name(name: object, what: str = "team") -> str:
    if not isinstance(name, str) or not _TEAM_NAME.match(name):
        raise UsageError(f"{what} must be a name of letters, digits, '_' or '-' (it names the tmux session), not {name!r}")
    return name


def _agent(raw: object, where: str, n: int) -> Agent:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: agents entry {n} is not a table")
    _no_unknown(raw, _AGENT_KEYS, f"{where}: agents entry {n}")
    name = check_agent_name(raw.get("name"), f"name of agents entry {n}")  # type: ignore[arg-type]
    program = raw.get("program")
    if not isinstance(program, str) or not program.strip():
        raise UsageError(f"{where}: agent {name} needs a program: claude, codex, gemini, opencode, copilot or a command line")
    try:
        shlex.split(program)
    except ValueError as exc:
        raise UsageError(f"{where}: agent {name}: cannot split the program's command line: {exc}") from None
    for key in ("model", "task"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise UsageError(f"{where}: agent {name}: {key} must be a string")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UsageError(f"{where}: agent {name}: args must be a list of strings")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise UsageError(f"{where}: agent {name}: env must be a table of strings")
    lead = raw.get("lead", False)
    if not isinstance(lead, bool):
        raise UsageError(f"{where}: agent {name}: lead must be true or false")
    notify = raw.get("notify", "auto")
    if notify not in NOTIFY:
        raise UsageError(f"{where}: agent {name}: notify must be one of {', '.join(NOTIFY)}, not {notify!r}")
    if notify == "channel" and (program.strip() not in PROGRAMS or PROGRAMS[program.strip()].launch.channel is None):
        takes = [spec for spec in PROGRAMS.values() if spec.launch.channel is not None]
        raise UsageError(f"{where}: agent {name}: notify = \"channel\" needs program = "
                         + " or ".join(f"\"{spec.name}\" ({spec.title}'s channels)" for spec in takes))
    extension = raw.get("extension", False)
    if not isinstance(extension, bool):
        raise UsageError(f"{where}: agent {name}: extension must be true or false")
    if extension and (program.strip() not in PROGRAMS or PROGRAMS[program.strip()].extension is None):
        has = [spec for spec in PROGRAMS.values() if spec.extension is not None]
        raise UsageError(f"{where}: agent {name}: extension = true needs program = "
                         + " or ".join(f"\"{spec.name}\" (relay's {spec.title} extension)" for spec in has))
    return Agent(name=name, program=program.strip(), model=raw.get("model"), task=raw.get("task"), args=list(args), env=dict(env), lead=lead,
                 notify=notify, extension=extension, budget=_budget(raw, f"{where}: agent {name}"))


def _no_unknown(table: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")


# -- presets --------------------------------------------------------------------------------

# What each preset's agents do (seed 000 for overlord, seed 003 for IGNITE).
_TASKS = {
    "overlord": "plan the work and hand it out",
    "strategist": "break the goal into tasks and review the plan",
    "leader": "lead the team; escalations come here",
}
_LEADS = {"overlord": "overlord", **ESCALATION_AGENT}


def preset_text(preset: str, team: str | None = None, workers: int | None = None) -> str:
    """A team file for a preset: every agent runs Claude Code in the current directory."""
    names = preset_agents(preset, workers)
    lines = [
        "# relay team file: `relayctl up` starts it, `relayctl down` stops it (docs/team.md).",
        f'team = "{team or preset}"',
        'multiplexer = "tmux"',
        'repo = "."',
    ]
    for name in names:
        lines += ["", "[[agents]]", f'name = "{name}"', 'program = "claude"']
        if name in _TASKS:
            lines.append(f'task = "{_TASKS[name]}"')
        if _LEADS.get(preset) == name:
            lines.append("lead = true")
    return "\n".join(lines) + "\n"
