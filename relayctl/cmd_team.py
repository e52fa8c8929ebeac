"""up and down: start and stop a whole team from its team file (relayctl.team)."""

from __future__ import annotations

import os
import sys

import click

from relayd.errors import RelayError
from relayd.fsio import replace_file

from .context import echo, settings

_FILE = click.argument("file", required=False, metavar="[FILE]")


@click.command()
@_FILE
@click.option("--preset", type=click.Choice(["overlord", "ignite"]), help="Only write a team file for a preset team (six Claude Code panes for overlord; the IGNITE leaders and workers for ignite), to edit and then start.")
@click.option("--team", "team_name", metavar="NAME", help="With --preset: the team's name (the tmux session). [default: the preset's name]")
@click.option("--workers", type=click.IntRange(0, 64), metavar="N", help="With --preset ignite: how many workers (ignitian_1..N). [default: 3]")
@click.option("--force", is_flag=True, help="With --preset: overwrite an existing team file.")
@click.option("--trust", is_flag=True, help="Record the repository as trusted in each program's own settings first (~/.claude.json, ~/.codex/config.toml, ~/.gemini/trustedFolders.json, ~/.copilot/config.json), as the program does when you accept its folder trust question; `relayctl uninstall` takes it out again.")
@click.option("--wait", "wait", type=click.IntRange(0, 3600), default=300, show_default=True, metavar="SECONDS",
              help="How long to keep watching while a pane waits at a question that is yours (folder trust, a first-start question), to answer relay's own questions after it.")
def up(file: str | None, preset: str | None, team_name: str | None, workers: int | None, force: bool, trust: bool, wait: int) -> None:
    """Start the team of FILE (default: ./relay-team.toml): one pane per agent.

    In order: checks that every agent's program is installed (if one is not: one line per
    agent naming its npm package, exit 2, nothing started); with --trust records the
    repository as trusted in each program's own settings; creates the store if needed;
    registers each agent (program, model, task;
    the lead gets dead-letter escalations); starts relayd unless one serves the store;
    installs the pre-commit guard when the repository is a git work tree; writes each
    agent's client configuration (Claude Code: an MCP config with relay's channel and
    relay's hooks; Codex CLI: relay-mcp and hooks; Gemini CLI: relay-mcp and hooks); opens a tmux
    session named after the team with one pane per agent, RELAY_AGENT set in each, and
    registers every pane as its agent's notify target; then watches each new pane until
    its program is ready, answering the start-up questions relay's configuration makes
    the programs ask (Claude Code's development channel, Codex's review of relay's hooks).

    A pane whose program exited makes `up` exit 1 with the exit status and its last
    lines. A program asking you something at its first start (whether to trust the
    folder; Claude Code's "Make auto mode your default permission mode?") is waiting for
    you: `up` names the question with what to do and keeps watching (--wait) while you
    answer it in the pane, then gives the pane its whole start time again, so relay's own
    questions after your answer are answered too; it never answers yours. --trust
    answers the folder trust ahead, in the programs' own settings, for this repository
    only.

    A copilot agent with `extension = true` in the team file gets relay's extension
    (.github/extensions/relay/extension.mjs) and runs as `copilot --experimental`: its mail
    is then enqueued into the running session as a short notice, nothing typed into the
    pane. Copilot loads extensions only with --experimental, which its own help calls
    "Enable experimental features": it turns on its other experimental features too
    (commands such as /every and /after, --assisted-approval). Without the key Copilot
    runs as before, with relay's hooks and the pane trigger.

    Running it again starts what is missing and restarts only panes whose program
    exited. The schema of the team file is in docs/team.md.

    \b
    Examples:
      relayctl up --preset overlord          # writes relay-team.toml; edit it, then:
      relayctl up
      relayctl up --trust                    # no trust question in this repository
      tmux attach -t overlord
      relayctl up ~/teams/oathkeeper.toml
      relayctl down
    """
    # deferred imports: `relayctl --help` loads every command module; the team machinery (teamfile,
    # multiplexers, clean) loads only when up or down runs
    from .team import teamfile

    s = settings()
    path = file or teamfile.DEFAULT_FILE
    if preset:
        if os.path.exists(path) and not force:
            raise click.UsageError(f"{path} exists; start it with `relayctl up {path}`, or pass --force to overwrite it")
        if team_name is not None:
            teamfile.check_team_name(team_name, "--team")

        try:
            replace_file(path, teamfile.preset_text(preset, team_name, workers).encode())
        except OSError as exc:
            raise RelayError(f"cannot write {path}: {exc.strerror or exc}") from None
        s.note(f"wrote {path}: the {preset} team; edit it, then start it with: relayctl up" + (f" {path}" if file else ""))
        return
    if team_name or workers is not None or force:
        raise click.UsageError("--team, --workers and --force go with --preset")
    from .team.up import ProgramsMissing, bring_up

    team = teamfile.load(path)
    try:
        result = bring_up(s, team, s.note, person_wait=wait, trust=trust)
    except ProgramsMissing as missing:
        for line in missing.lines:
            echo(f"error: {line}", err=True)
        raise
    s.out(result, None)
    for line in result.get("problems", []):
        echo(f"{'error' if result['failed'] else 'warning'}: {line}", err=True)
    if result.get("failed"):
        sys.exit(1)


@click.command()
@_FILE
@click.option("--clean", is_flag=True, help="Then remove what relay wrote into the team's repository, as `relayctl uninstall` does.")
def down(file: str | None, clean: bool) -> None:
    """Stop the team of FILE (default: ./relay-team.toml): its panes, their programs, the
    session, and the relayd that `relayctl up` started. The store keeps everything.

    With --clean, then take out of the team's repository everything `up` wrote there (the
    pre-commit guard, relay's entries in the programs' project settings), each file back
    as it was before: `relayctl uninstall --help` says what goes.

    \b
    Examples:
      relayctl down
      relayctl down ~/teams/oathkeeper.toml
      relayctl down --clean
    """
    from .team import teamfile
    from .team.up import take_down

    s = settings()
    team = teamfile.load(file or teamfile.DEFAULT_FILE)
    result = take_down(s, team, s.note)
    if clean:
        from .cmd_uninstall import clean as remove_relay

        result["cleaned"] = remove_relay(team.repo, s.note)
    s.out(result, None)
