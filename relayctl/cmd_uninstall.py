"""uninstall: take everything relay wrote out of a project and the programs' settings."""

from __future__ import annotations

from typing import Callable

import click

from relayd.errors import NotFound, RelayError, UsageError

from .context import settings


def clean(project: str, say: Callable[[str], None]) -> dict:
    """Remove relay's pre-commit guard (putting back the hook it chained) and relay's
    entries in each agent program's project settings (each file back to its bytes from
    before relay, when nothing else changed in it). What was done, by item."""
    # deferred imports: `relayctl --help` loads every command module; the guard, hook settings and
    # trust records load only when clean runs
    from relayd import guard

    from relayd.programs.registry import PROGRAMS

    from . import hook_settings

    done: dict[str, object] = {}
    try:
        removed = guard.uninstall(project)
        done["guard"] = removed["removed"]
        say(f"guard removed: {removed['removed']}" + (" (the hook it chained is back in its place)" if removed["restored"] else ""))
    except NotFound:
        done["guard"] = None
    except UsageError as exc:  # not a git work tree, or a pre-commit hook that is not relay's
        done["guard"] = None
        say(f"guard: nothing to remove ({exc.message})")
    files, kept = [], []
    for program in PROGRAMS:
        try:
            gone = hook_settings.uninstall_extension(program, project)  # first: the folders relay made for both go with the last
        except RelayError as exc:
            gone = hook_settings.Change("", False, ())
            kept.append(exc.message)
            say(f"left as it is: {exc.message}")
        if gone.changed:
            files.append(gone.path)
            say(f"relay's extension removed: {gone.path}")
        if gone.note:
            kept.append(gone.note)
            say(gone.note)
        try:
            change = hook_settings.uninstall(program, project, everything=True)
        except RelayError as exc:  # one file relay may not write (a link out of the project, a hard link): the others still go
            kept.append(exc.message)
            say(f"left as it is: {exc.message}")
            continue
        if change.changed:
            files.append(change.path)
            say(f"relay's entries removed from {change.path} ({', '.join(change.events)})")
        if change.note:
            kept.append(change.note)
            say(change.note)
    done["settings"] = files
    if kept:
        done["kept"] = kept
    from .team.trust import forget, forget_hook_trust

    done["trust"] = forget(project)
    for title, path in forget_hook_trust(project):
        done["trust"].append(f"{title}'s trust in relay's hooks removed from {path}")
    for line in done["trust"]:
        say(line)
    return done


@click.command()
@click.option("--project", default=".", show_default=True, type=click.Path(exists=True, file_okay=False),
              help="The project (repository) relay was used in.")
def uninstall(project: str) -> None:
    """Remove everything relay wrote into a project, as it was before relay.

    \b
      the pre-commit guard      .git/hooks/pre-commit (or core.hooksPath's); the hook it
                                chained is put back in its place
      hooks, MCP servers,       relay's entries in .claude/settings.json, .codex/hooks.json,
      allow rules, plugin       .gemini/settings.json and opencode.json (relay's hook
                                commands, Gemini CLI's and OpenCode's relay-mcp server,
                                Claude Code's mcp__relay rules); relay's own files
                                .github/hooks/relay.json (Copilot CLI) and
                                .opencode/plugin/relay.js (OpenCode)
      trust records             what `relayctl up --trust` added for this project to
                                ~/.claude.json, ~/.codex/config.toml and
                                ~/.gemini/trustedFolders.json, and Codex's trust in
                                relay's hooks once their file is gone

    Only relay's own entries go; a file relay wrote into gets back the exact bytes it had
    before relay's first write when nothing else in it changed since (kept under
    $XDG_STATE_HOME/relay/originals, default ~/.local/state/relay/originals), and a file or folder relay made is removed.
    Every key you added stays in the table you put it in; a trust decision of your own
    (Gemini CLI's DO_NOT_TRUST, Claude Code's hasTrustDialogAccepted = false, a Codex
    trust_level of yours) stays as it is; relay.js changed since relay wrote it stays,
    with a line saying so; a file relay may not write (a symlink out of the project, a
    file with several hard links) is left as it is, with a line. The store
    (~/.relay or --dir), the team file and relay itself stay: stop a team with
    `relayctl down` first (`relayctl down --clean` does both), remove the store by hand, and
    relay with `pip uninstall relay-bus`. Running it twice changes nothing.

    \b
    Examples:
      relayctl uninstall
      relayctl uninstall --project ~/oathkeeper
    """
    s = settings()
    result = clean(project, s.note)
    if not result["guard"] and not result["settings"] and not result["trust"] and not result.get("kept"):
        s.note(f"nothing of relay's in {project}")
    s.out(result, None)
