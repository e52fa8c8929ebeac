"""`relayctl up --trust`: the team's repository recorded as trusted in each program's own
settings, as the program records it when the person accepts its folder trust question.

Where each program keeps it and in which shape is its own module's (relayd.programs;
`Trust`); the shapes, written and taken out here:

  projects-flag   `projects["<repo>"].hasTrustDialogAccepted = true` (Claude Code's ~/.claude.json)
  projects-table  `[projects."<repo>"]` with `trust_level = "trusted"` (Codex CLI's config.toml)
  folder-map      `"<repo>": "TRUST_FOLDER"` (Gemini CLI's trustedFolders.json)
  folder-list     `"<repo>"` in the `trustedFolders` list below `//` lines (Copilot CLI's config.json)

A program with no `Trust` (OpenCode) asks no folder trust question. Only with the flag:
trusting a folder is the person's decision. Each record relay adds is noted in a ledger,
`$XDG_STATE_HOME/relay/trusted.json`, and each file's bytes from before relay's first write
are kept (relayctl.originals), so `relayctl uninstall` takes out exactly what relay added.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from typing import Any

from relayctl import hook_settings, originals
from relayd.errors import RelayError
from relayd.fsio import replace_file
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
        added = _TRUST[REGISTRY[agent.kind].trust.format](path, team.repo)
        if added:
            _ledger_add(agent.kind, path, team.repo)
        said.append(f"{'trusted' if added else 'already trusted'}: {team.repo} for {agent.kind} in {path}")
    return said


def forget(project: str) -> list[str]:
    """Take out the trust records `record` added for `project`; the files, one line each."""
    project = os.path.realpath(project)
    entries = _ledger()
    said = []
    for entry in [e for e in entries if e["project"] == project]:
        program, path = entry["program"], entry["path"]
        try:
            _UNTRUST[REGISTRY[program].trust.format](path, project)
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


def _claude(path: str, repo: str) -> bool:
    data = hook_settings.load_json(path)
    projects = data.setdefault("projects", {})
    if not isinstance(projects, dict) or not isinstance(projects.get(repo, {}), dict):
        raise RelayError(f"{path}: \"projects\" is not what Claude Code writes; fix it by hand (relay did not change the file)")
    if projects.get(repo, {}).get("hasTrustDialogAccepted") is True:
        return False
    projects[repo] = {**projects.get(repo, {}), "hasTrustDialogAccepted": True}
    hook_settings.save_json(path, data, _root(path))
    return True


def _claude_forget(path: str, repo: str) -> None:
    data = hook_settings.load_json(path)
    entry = data.get("projects", {}).get(repo)
    if isinstance(entry, dict) and entry.pop("hasTrustDialogAccepted", None) is not None:
        if not entry:
            del data["projects"][repo]
            if not data["projects"]:
                del data["projects"]
    _put_back_or_save(path, data)


def _gemini(path: str, repo: str) -> bool:
    data = hook_settings.load_json(path)
    if data.get(repo) == "TRUST_FOLDER":
        return False
    new = not os.path.exists(path)
    data[repo] = "TRUST_FOLDER"
    hook_settings.save_json(path, data, _root(path))
    if new:
        os.chmod(path, 0o600)  # as Gemini CLI creates it
    return True


def _gemini_forget(path: str, repo: str) -> None:
    data = hook_settings.load_json(path)
    data.pop(repo, None)
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
    target = os.path.realpath(path)
    originals.remember(target)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    replace_file(target, (header + json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode())


def _copilot(path: str, repo: str) -> bool:
    header, data = _copilot_parse(_read_text(path), path)
    folders = data.setdefault("trustedFolders", [])
    if repo in folders:
        return False
    folders.append(repo)
    _copilot_write(path, header, data)
    return True


def _copilot_forget(path: str, repo: str) -> None:
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
    if not originals.put_back(path, lambda before: hook_settings.same_json(before, data)):
        hook_settings.save_json(path, data, _root(path))


def _codex_block(repo: str) -> str:
    return f'\n[projects.{json.dumps(repo, ensure_ascii=False)}]\ntrust_level = "trusted"\n'


def _codex(path: str, repo: str) -> bool:
    text = _read_text(path)
    try:
        projects = tomllib.loads(text).get("projects", {})
    except tomllib.TOMLDecodeError as exc:
        raise RelayError(f"{path} is not valid TOML ({exc}); fix it by hand (relay did not change the file)") from None
    level = projects.get(repo, {}).get("trust_level") if isinstance(projects.get(repo), dict) else None
    if level == "trusted":
        return False
    if level is not None:
        raise RelayError(f"{path} says trust_level = {level!r} for {repo}: that is your choice; change it there yourself")
    originals.remember(path)
    os.makedirs(os.path.dirname(os.path.realpath(path)), exist_ok=True)
    replace_file(os.path.realpath(path), (text + ("\n" if text and not text.endswith("\n") else "") + _codex_block(repo)).encode())
    return True


def _codex_forget(path: str, repo: str) -> None:
    text = _read_text(path)
    header = re.escape(f"[projects.{json.dumps(repo, ensure_ascii=False)}]")
    kept = re.sub(r"\n?" + header + r"\n(?:trust_level\s*=\s*\"trusted\"\s*\n?)", "", text, count=1)
    if not originals.put_back(path, lambda before: before.decode(errors="replace") == kept):
        replace_file(os.path.realpath(path), kept.encode())


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
    replace_file(os.path.realpath(path), stripped.encode())
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


def _ledger_add(program: str, path: str, project: str) -> None:
    entries = _ledger()
    entry = {"program": program, "path": path, "project": project}
    if entry not in entries:
        _ledger_write([*entries, entry])


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
    replace_file(path, (json.dumps(entries, indent=2) + "\n").encode())
