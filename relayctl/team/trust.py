"""`relayctl up --trust`: the team's repository recorded as trusted in each program's own
settings, as the program records it when the person accepts its folder trust question.

Where each program keeps it and in which shape is its own module's (relayd.programs;
`Trust`); the shapes, written and taken out here:

  projects-flag   `projects["<repo>"].hasTrustDialogAccepted = true` (Claude Code's ~/.claude.json)
  projects-table  `[projects."<repo>"]` with `trust_level = "trusted"` (Codex CLI's config.toml)
  folder-map      `"<repo>": "TRUST_FOLDER"` (Gemini CLI's trustedFolders.json)
  folder-list     `"<repo>"` in the `trustedFolders` list below `//` lines (Copilot CLI's config.json)

A program with no `Trust` (OpenCode) asks no folder trust question. Only with the flag:
trusting a folder is the person's decision, and a decision the person already made is never
overridden: Codex's `trust_level` of any other value, Claude Code's
`hasTrustDialogAccepted = false`, Gemini CLI's `DO_NOT_TRUST` (on the repository or on the
folder above it whose rule Gemini applies: its longest matching path) stay as they are, and
`up` says so in a line (the program then asks, or runs untrusted, as it would without relay).
Each record relay adds is noted in a ledger, `$XDG_STATE_HOME/relay/trusted.json`, and each
file's bytes from before relay's first write are kept (relayctl.originals), so `relayctl
uninstall` takes out exactly what relay added: only relay's own value (one the person changed
since stays), and in Codex's TOML only relay's line, every key the person added in that table
staying in it (relayctl.toml_tables). Writes go through relayctl.settings_io (a file with
several hard links is refused, not cut off from its other names).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from typing import Any

from relayctl import hook_settings, originals, settings_io
from relayctl.toml_tables import TomlEditError, add_key, remove_key
from relayd.errors import RelayError
from relayd.programs.registry import PROGRAMS as REGISTRY

from .teamfile import Team

PROGRAMS = tuple(name for name, spec in REGISTRY.items() if spec.trust is not None)


def settings_file(program: str, env: dict[str, str]) -> str:
    """Where `program` keeps its folder trust, for a pane with environment `env`."""
    return REGISTRY[program].trust.file(env)


def record(team: Team) -> list[str]:
    """Record trust for the team's repository for each program the team runs; what was
    written (or found already there), one line each."""
    said, done = [], set()
    for agent in team.agents:
        if agent.kind not in PROGRAMS:
            continue
        path = settings_file(agent.kind, {**os.environ, **agent.env})
        if (agent.kind, path) in done:
            continue
        done.add((agent.kind, path))
        try:
            added = _TRUST[REGISTRY[agent.kind].trust.format](path, team.repo)
        except RelayError as exc:  # the person's own decision, or a file relay may not write: the program asks, as without relay
            said.append(f"not trusted: {team.repo} for {agent.kind} in {path}: {exc.message}")
            continue
        if added is not None:
            _ledger_add(agent.kind, path, team.repo, added)
        said.append(f"{'trusted' if added is not None else 'already trusted'}: {team.repo} for {agent.kind} in {path}")
    return said


def forget(project: str) -> list[str]:
    """Take out the trust records `record` added for `project`; the files, one line each."""
    project = os.path.realpath(project)
    entries = _ledger()
    said = []
    for entry in [e for e in entries if e["project"] == project]:
        program, path = entry["program"], entry["path"]
        try:
            _UNTRUST[REGISTRY[program].trust.format](path, project, entry)
            said.append(f"trust record for {project} removed from {path}")
        except RelayError as exc:
            said.append(f"trust record for {project} left in {path}: {exc.message}")
        entries.remove(entry)
    if said:
        _ledger_write(entries)
    return said


# -- each program's record ---------------------------------------------------------------------


def _root(path: str) -> str:
    # A program's own settings live in the home directory, often as a link into dotfiles:
    # the link is followed wherever it goes (unlike a project's settings).
    return os.path.dirname(os.path.realpath(path))


# Each _TRUST function: None when the program already trusts the repository, else what the
# ledger keeps beside the record (what uninstall needs to take exactly that out again); a
# RelayError when it must not be written (the person's own decision, a file relay may not write).

def _theirs(path: str, said: str) -> RelayError:
    return RelayError(f"{path} says {said}: that is your choice, and relay leaves it; change it there yourself")


def _claude(path: str, repo: str) -> dict | None:
    data = hook_settings.load_json(path)
    projects = data.setdefault("projects", {})
    if not isinstance(projects, dict) or not isinstance(projects.get(repo, {}), dict):
        raise RelayError(f"{path}: \"projects\" is not what Claude Code writes; fix it by hand (relay did not change the file)")
    accepted = projects.get(repo, {}).get("hasTrustDialogAccepted")
    if accepted is True:
        return None
    if accepted is not None:
        raise _theirs(path, f"hasTrustDialogAccepted = {json.dumps(accepted)} for {repo}")
    projects[repo] = {**projects.get(repo, {}), "hasTrustDialogAccepted": True}
    hook_settings.save_json(path, data, _root(path))
    return {}


def _claude_forget(path: str, repo: str, entry: dict) -> None:
    data = hook_settings.load_json(path)
    project = data.get("projects", {}).get(repo)
    if isinstance(project, dict) and project.get("hasTrustDialogAccepted") is True:  # relay's value: one changed since is the person's
        del project["hasTrustDialogAccepted"]
        if not project:
            del data["projects"][repo]
            if not data["projects"]:
                del data["projects"]
    _put_back_or_save(path, data)


def gemini_decision(rules: dict[str, Any], repo: str) -> tuple[str, Any] | None:
    """The rule Gemini CLI applies to `repo` (0.61.0, LoadedTrustedFolders.isPathTrusted), as
    (its path, its level): the longest path among the rules whose folder holds `repo`
    (TRUST_PARENT's folder is the one above its path); None when no rule does."""
    found: tuple[str, Any] | None = None
    for rule, value in rules.items():
        folder = os.path.realpath(os.path.dirname(rule) if value == "TRUST_PARENT" else rule)
        if (repo == folder or repo.startswith(folder.rstrip("/") + "/")) and (found is None or len(rule) > len(found[0])):
            found = (rule, value)
    return found


def _gemini(path: str, repo: str) -> dict | None:
    data = hook_settings.load_json(path)
    rule = gemini_decision(data, repo)
    if rule is not None and rule[1] in ("TRUST_FOLDER", "TRUST_PARENT"):
        return None
    if rule is not None:
        raise _theirs(path, f"{rule[1]} for {rule[0]}" + ("" if rule[0] == repo else f", which holds {repo}"))
    new = not os.path.exists(path)
    data[repo] = "TRUST_FOLDER"
    hook_settings.save_json(path, data, _root(path))
    if new:
        os.chmod(path, 0o600)  # as Gemini CLI creates it
    return {}


def _gemini_forget(path: str, repo: str, entry: dict) -> None:
    data = hook_settings.load_json(path)
    if data.get(repo) == "TRUST_FOLDER":  # relay's value: DO_NOT_TRUST written since is the person's
        del data[repo]
    _put_back_or_save(path, data)


def _copilot_parse(text: str, path: str) -> tuple[str, dict[str, Any]]:
    """Copilot CLI's config.json: the `//` comment lines it writes above one JSON object,
    and that object."""
    lines = text.splitlines(keepends=True)
    head = 0
    while head < len(lines) and lines[head].lstrip().startswith("//"):
        head += 1
    body = "".join(lines[head:])
    try:
        data = json.loads(body) if body.strip() else {}
    except ValueError as exc:
        raise RelayError(f"{path} is not what Copilot CLI writes ({exc}); fix it by hand (relay did not change the file)") from None
    if not isinstance(data, dict) or not isinstance(data.get("trustedFolders", []), list):
        raise RelayError(f"{path}: \"trustedFolders\" is not the list Copilot CLI writes; fix it by hand (relay did not change the file)")
    return "".join(lines[:head]), data


def _copilot_write(path: str, header: str, data: dict[str, Any]) -> None:
    _write(path, (header + json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode())


def _write(path: str, data: bytes) -> None:
    """A program's own settings file, the original kept first (relayctl.originals)."""
    target = settings_io.landing(path, None)
    settings_io.refuse_shared(target, path)
    originals.remember(target)
    settings_io.replace(target, data, path)


def _copilot(path: str, repo: str) -> dict | None:
    header, data = _copilot_parse(_read_text(path), path)
    folders = data.setdefault("trustedFolders", [])
    if repo in folders:
        return None
    folders.append(repo)
    _copilot_write(path, header, data)
    return {}


def _copilot_forget(path: str, repo: str, entry: dict) -> None:
    header, data = _copilot_parse(_read_text(path), path)
    folders = data.get("trustedFolders", [])
    if repo not in folders:
        return
    folders.remove(repo)
    if not folders:
        del data["trustedFolders"]
    if not originals.put_back(path, lambda before: _copilot_parse(before.decode(errors="replace"), path)[1] == data):
        _copilot_write(path, header, data)


def _put_back_or_save(path: str, data: dict[str, Any]) -> None:
    hook_settings.keep_their_empty(path, data)
    if not originals.put_back(path, lambda before: hook_settings.same_json(before, data)):
        hook_settings.save_json(path, data, _root(path))


def _codex_table(repo: str) -> tuple[str, str]:
    return ("projects", repo)


def _codex(path: str, repo: str) -> dict | None:
    text = _read_text(path)
    try:
        projects = tomllib.loads(text).get("projects", {})
    except tomllib.TOMLDecodeError as exc:
        raise RelayError(f"{path} is not valid TOML ({exc}); fix it by hand (relay did not change the file)") from None
    level = projects.get(repo, {}).get("trust_level") if isinstance(projects.get(repo), dict) else None
    if level == "trusted":
        return None
    if level is not None:
        raise _theirs(path, f"trust_level = {json.dumps(level)} for {repo}")
    try:
        new, made = add_key(text, _codex_table(repo), "trust_level", "trusted")
    except TomlEditError as exc:
        raise RelayError(f"{path}: {exc}; add trust_level = \"trusted\" under [projects.\"{repo}\"] yourself (relay did not change the file)") from None
    _write(path, new.encode())
    return {"made_table": True} if made else {}


def _codex_forget(path: str, repo: str, entry: dict) -> None:
    """relay's `trust_level` line out of the repository's table; the table goes with it only
    when relay made it and nothing else is in it now (what the person added stays under it)."""
    text = _read_text(path)
    try:
        kept = remove_key(text, _codex_table(repo), "trust_level", "trusted", drop_table=bool(entry.get("made_table")))
    except TomlEditError as exc:
        raise RelayError(f"{exc}; take trust_level out of [projects.\"{repo}\"] yourself (relay did not change the file)") from None
    if kept is None:
        return  # gone already, or changed since: the person's
    if not originals.put_back(path, lambda before: before.decode(errors="replace") == kept):
        _write(path, kept.encode())


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise RelayError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


# By the record's shape (Trust.format).
_TRUST = {"projects-flag": _claude, "projects-table": _codex, "folder-map": _gemini, "folder-list": _copilot}
_UNTRUST = {"projects-flag": _claude_forget, "projects-table": _codex_forget, "folder-map": _gemini_forget,
            "folder-list": _copilot_forget}


def forget_hook_trust(project: str) -> list[tuple[str, str]]:
    """Each program's record that the person (or relay, at `up`) trusted relay's hooks, taken
    out once the project's hooks file is gone; (the program's title, the file) for each
    file something was taken out of."""
    said = []
    for spec in REGISTRY.values():
        if spec.trust is not None and spec.trust.hook_review:
            path = _forget_hook_review(spec.name, spec.trust.hook_review, project)
            if path:
                said.append((spec.title, path))
    return said


def _forget_hook_review(program: str, table: str, project: str) -> str | None:
    """`[<table>."<project>/<hooks file>:<event>:..."]` tables in the program's TOML settings
    (Codex's `[hooks.state."..."]`), taken out once that hooks file is gone (what they
    trusted no longer exists). The file, when something was taken out."""
    hooks_file = os.path.join(os.path.realpath(project), REGISTRY[program].settings.hooks_file)
    if os.path.exists(hooks_file):
        return None
    path = settings_file(program, dict(os.environ))
    text = _read_text(path)
    prefix = f"[{table}.{json.dumps(hooks_file, ensure_ascii=False)[:-1]}:"
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            skipping = line.startswith(prefix)
        if not skipping:
            kept.append(line)
    stripped = re.sub(r"\[" + re.escape(table) + r"\]\n\n?(?=\[|$)", "", "".join(kept))  # a parent table left empty
    stripped = re.sub(r"\n{3,}", "\n\n", stripped).rstrip("\n") + "\n" if stripped.strip() else ""
    if stripped == text or "".join(kept) == text:
        return None
    _write(path, stripped.encode())
    return path


# -- the ledger of what relay trusted ------------------------------------------------------------


def _ledger_path() -> str:
    return os.path.join(os.path.dirname(originals.records_dir()), "trusted.json")


def _ledger() -> list[dict[str, str]]:
    try:
        with open(_ledger_path(), encoding="utf-8") as fh:
            entries = json.load(fh)
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict) and {"program", "path", "project"} <= e.keys()] if isinstance(entries, list) else []


def _ledger_add(program: str, path: str, project: str, facts: dict) -> None:
    entries = _ledger()
    entry = {"program": program, "path": path, "project": project}
    if not any(all(e.get(k) == v for k, v in entry.items()) for e in entries):
        _ledger_write([*entries, {**entry, **facts}])


def _ledger_write(entries: list[dict[str, str]]) -> None:
    path = _ledger_path()
    if not entries:
        try:
            os.unlink(path)
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    settings_io.replace(path, (json.dumps(entries, indent=2) + "\n").encode())
