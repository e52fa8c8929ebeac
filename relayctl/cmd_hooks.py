"""hooks install|uninstall: put relay's hook entries into an agent program's project settings.

The work is done by relayctl.hook_settings; this module is its command line and the
notes a person needs next (each program's own trust step).
"""

from __future__ import annotations

import os

import click

from relayd import layout
from relayd.errors import UsageError
from relayd.names import check_agent_name
from relayd.programs.registry import PROGRAMS as REGISTRY

from . import hook_settings
from .context import settings

PROGRAMS = tuple(REGISTRY)  # the --for choices; what each asks of a person before its hooks run is its Settings.note


@click.group()
def hooks() -> None:
    """Install relay's hooks into an agent program's project settings, or remove them.

    The hooks run `relayctl hook PROGRAM`, which hands the unread mail of the session's
    agent to the model: at session start, before each prompt, after each tool call, and
    once at the end of a turn when mail waits (see `relayctl hook --help`). The settings
    file is the project's, shared by every session there, so it names no agent: each
    session's agent is the RELAY_AGENT of the program's environment (`relayctl up` sets it
    in each pane), and in a session without one the hooks do nothing.

    \b
    Examples:
      relayctl hooks install --for claude
      RELAY_AGENT=inferno claude
      relayctl hooks install --for codex --project ~/oathkeeper
      relayctl hooks uninstall --for gemini
    """


@hooks.command()
@click.option("--for", "program", type=click.Choice(PROGRAMS), required=True, help="The agent program.")
@click.option("--agent", "agent", metavar="NAME", help="Only for the note on how to start the program as NAME: the file never names an agent.")
@click.option("--project", default=".", show_default=True, type=click.Path(file_okay=False), help="The project directory whose settings get the hooks.")
@click.option("--extension", is_flag=True,
              help="copilot only: also relay's extension, .github/extensions/relay/extension.mjs, through which mail is "
                   "enqueued into a running session with nothing typed; Copilot loads it only when started with "
                   "--experimental, which also turns on its other experimental features (/every, /after, --assisted-approval).")
def install(program: str, agent: str | None, project: str, extension: bool) -> None:
    """Merge relay's hook entries into the project's settings for PROGRAM.

    \b
      claude  .claude/settings.json: SessionStart, UserPromptSubmit, PostToolUse, Stop,
              and the permissions.allow rule mcp__relay (relay's MCP tools run unasked)
      codex   .codex/hooks.json:     SessionStart, UserPromptSubmit, PostToolUse, Stop
      gemini  .gemini/settings.json: SessionStart, BeforeAgent, AfterTool, AfterAgent
      copilot .github/hooks/relay.json: sessionStart, userPromptSubmitted, postToolUse,
              agentStop (and permissionRequest, sessionEnd for the session's state)
      opencode .opencode/plugin/relay.js: relay's plugin (prompt, after a tool, a new
              turn when the session is idle with mail waiting; state events)

    With --extension (copilot) relay's extension goes in too: started with
    `copilot --experimental`, the session then gets a short notice of new mail as its
    next turn (at once when idle), nothing typed into its pane, no draft or question
    touched; the hooks hand the mail itself over. Without --experimental Copilot loads no
    extension, and the hooks and the pane trigger do the work (`relayctl status` says why).

    Other hooks and keys in the file stay as they are; a relay entry already there is
    replaced in place, so running it twice changes nothing. The command names this
    relayctl by its path, and the store (and socket) when they are not the default.
    A file that is not valid JSON is refused and left untouched, and so is one that
    leads through a symlink out of the project or has several hard links.

    The entries name no agent (the file is shared by every session in the project, and by
    every pane `relayctl up` starts there): start the program with RELAY_AGENT=NAME in its
    environment, and its hooks deliver NAME's mail. A session without RELAY_AGENT (or
    OVLD_ROLE) runs them as a no-op; the programs that show a hook's line to the person
    (Claude Code, Codex CLI, Gemini CLI) say once, at the session's start, how to start it
    as an agent. --agent only fills in that name in the note.

    Register the agent with `--notify hook` so that no other mechanism announces the
    same mail.

    \b
    Examples:
      relayctl hooks install --for claude
      RELAY_AGENT=inferno claude
      relayctl --dir /srv/team hooks install --for gemini --project ~/oathkeeper
    """
    s = settings()
    name = check_agent_name(agent) if agent else s.agent
    spec = REGISTRY[program]
    if extension and spec.extension is None:
        raise UsageError(f"--extension: relay has no extension for {spec.title} (only for copilot)")
    change = hook_settings.install(program, project, *_store_and_socket(s))
    added = hook_settings.install_extension(program, project, *_store_and_socket(s)) if extension else None
    s.out({"path": change.path, "changed": change.changed, "events": list(change.events),
           **({"extension": {"path": added.path, "changed": added.changed}} if added else {})})
    if change.changed:
        s.note(f"installed relay's hooks in {change.path} ({', '.join(change.events)})")
    else:
        s.note(f"relay's hooks were already in {change.path}; nothing changed")
    if added is not None:
        s.note(f"{'installed' if added.changed else 'already there:'} relay's extension {added.path}; "
               f"{spec.extension.help}: start it as RELAY_AGENT={name or 'NAME'} {program} {' '.join(spec.extension.flags)}")
    allowed = REGISTRY[program].settings.allow
    if allowed:  # a permission granted is said out loud, never slipped in with the hooks
        s.note(f"and the permissions.allow rule{'s' if len(allowed) > 1 else ''} {', '.join(map(repr, allowed))} there: "
               f"{REGISTRY[program].title} runs relay's MCP tools without asking (`relayctl hooks uninstall --for {program}` takes it out again)")
    s.note(f"they deliver the mail of the session's RELAY_AGENT: start it as RELAY_AGENT={name or 'NAME'} {program}"
           " (a session without one runs them as a no-op)")
    s.note(REGISTRY[program].settings.note.format(project=os.path.abspath(project)))


@hooks.command()
@click.option("--for", "program", type=click.Choice(PROGRAMS), required=True, help="The agent program.")
@click.option("--project", default=".", show_default=True, type=click.Path(file_okay=False), help="The project directory whose settings hold the hooks.")
def uninstall(program: str, project: str) -> None:
    """Remove relay's hook entries from the project's settings for PROGRAM.

    Only commands that run `relayctl ... hook PROGRAM` go; every other hook and key stays.
    A file relay wrote whole (OpenCode's relay.js, Copilot's relay extension) that you
    changed since stays, and a line says so.

    \b
    Examples:
      relayctl hooks uninstall --for claude
      relayctl hooks uninstall --for codex --project ~/oathkeeper
    """
    s = settings()
    gone = hook_settings.uninstall_extension(program, project)  # first: the folders relay made for both go with the last
    change = hook_settings.uninstall(program, project)
    s.out({"path": change.path, "changed": change.changed, "events": list(change.events), **({"kept": change.note} if change.note else {}),
           **({"extension": {"path": gone.path, "changed": gone.changed, **({"kept": gone.note} if gone.note else {})}}
              if gone.changed or gone.note else {})})
    if change.changed:
        s.note(f"removed relay's hooks from {change.path} ({', '.join(change.events)})")
    elif change.note:
        s.note(change.note)
    else:
        s.note(f"no relay hooks in {change.path}; nothing changed")
    if gone.changed:
        s.note(f"removed relay's extension {gone.path}")
    elif gone.note:
        s.note(gone.note)


def _store_and_socket(s) -> tuple[str | None, str | None]:
    """The store and socket to spell out in the command: only what differs from what a
    relayctl started with no options and an empty environment would use."""
    store = s.dir
    try:
        default = layout.default_store_dir({"HOME": os.environ.get("HOME", "")})
    except layout.NoHome:
        default = None
    socket = os.path.abspath(s.socket) if s.socket else None
    return (None if store == default else store), socket
