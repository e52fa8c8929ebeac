"""relay's hook entries in an agent program's project settings: install and uninstall.

Each program reads its hooks from a JSON file in the project, in one shape:
`{"hooks": {EVENT: [{"matcher"?: ..., "hooks": [{"type": "command", "command": ...}]}]}}`
(Claude Code `.claude/settings.json`, Codex CLI `.codex/hooks.json`, Gemini CLI
`.gemini/settings.json`). `install` reads the file, puts relay's command under each event
of `cmd_hook.PROGRAMS` (replacing a relay entry already there, in place, and touching no
other hook or key), and writes it back atomically only when something changed;
`uninstall` takes out relay's commands alone. A file that is not a JSON object is
refused with one line and left as it is.

A relay entry is any command hook that runs `relayctl ... hook <program>`, so entries a
person pasted from the docs are recognised too (and not duplicated).

`relayctl hooks install|uninstall` (cmd_hooks.py) is the command line over these functions.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any, NamedTuple

from relayd.errors import RelayError, UsageError
from relayd.fsio import replace_file

from .cmd_hook import PROGRAMS
from .context import installed_command

SETTINGS_FILE = {
    "claude": os.path.join(".claude", "settings.json"),
    "codex": os.path.join(".codex", "hooks.json"),
    "gemini": os.path.join(".gemini", "settings.json"),
}
GEMINI_HOOK_NAME = "relay"  # Gemini CLI lists hooks by name: `/hooks disable relay`

_RELAY_HOOK = re.compile(r"(?:^|[\s/'\"])relayctl['\"]?\s(?:.*\s)?hook\s+(?:claude|codex|gemini)\s*$")


class Change(NamedTuple):
    path: str  # the settings file
    changed: bool  # False: it already said exactly this (nothing written)
    events: tuple[str, ...]  # the events relay's entries were put under / taken from


def hook_command(program: str, store_dir: str | None = None, socket: str | None = None) -> str:
    """The shell command a hook entry runs: this installation's relayctl, with a store or
    socket other than the default spelled out. Never an agent name: the settings file is
    the project's, shared by every session in it, so the hook speaks for the RELAY_AGENT
    (OVLD_ROLE) of the session that runs it, and for nobody (silently) in a session relay
    did not start."""
    words = [*installed_command("relayctl", "relayctl")]
    if store_dir:
        words += ["--dir", store_dir]
    if socket:
        words += ["--socket", socket]
    return shlex.join([*words, "hook", program])


def is_relay_hook(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("command"), str) and bool(_RELAY_HOOK.search(entry["command"]))


def settings_path(program: str, project: str) -> str:
    _check_program(program)
    return os.path.join(os.path.abspath(project), SETTINGS_FILE[program])


def install(program: str, project: str = ".", store_dir: str | None = None, socket: str | None = None) -> Change:
    """Merge relay's hook entries into `program`'s settings in `project`."""
    path = settings_path(program, project)
    command = hook_command(program, store_dir, socket)
    data = _load(path)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise RelayError(f"{path}: \"hooks\" is not a JSON object; fix it by hand (relay did not change the file)")
    spec = PROGRAMS[program]
    events = (*spec.context, spec.stop)
    for event in events:
        entry: dict[str, Any] = {"type": "command", "command": command}
        if program == "gemini":
            entry = {"name": GEMINI_HOOK_NAME, **entry}
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise RelayError(f"{path}: hooks.{event} is not a list; fix it by hand (relay did not change the file)")
        if not _replace_in_place(groups, entry):
            group: dict[str, Any] = {"hooks": [entry]}
            if event in spec.matcher:
                group = {"matcher": spec.matcher[event], **group}
            groups.append(group)
    return Change(path, _save(path, data), events)


def relay_alone(program: str, project: str) -> int | None:
    """How many hook entries the project's settings hold, when every one is relay's; None
    when the file holds anyone else's hooks too (or cannot be read)."""
    try:
        hooks = _load(settings_path(program, project)).get("hooks")
    except RelayError:
        return None
    if not isinstance(hooks, dict):
        return None
    entries = [h for groups in hooks.values() if isinstance(groups, list) for g in groups if isinstance(g, dict)
               for h in (g.get("hooks") if isinstance(g.get("hooks"), list) else [None])]
    return len(entries) if entries and all(is_relay_hook(h) for h in entries) else None


def put_gemini_server(project: str, name: str, entry: dict[str, Any]) -> Change:
    """Put one MCP server under `mcpServers` of the project's `.gemini/settings.json`
    (Gemini CLI keeps its MCP servers in the same file as its hooks), touching no other key."""
    path = settings_path("gemini", project)
    data = _load(path)
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise RelayError(f"{path}: \"mcpServers\" is not a JSON object; fix it by hand (relay did not change the file)")
    servers[name] = entry
    return Change(path, _save(path, data), ())


def uninstall(program: str, project: str = ".") -> Change:
    """Take relay's hook entries out of `program`'s settings in `project`; nothing else."""
    path = settings_path(program, project)
    if not os.path.exists(path):
        return Change(path, False, ())
    data = _load(path)
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return Change(path, False, ())
    touched = []
    for event, groups in list(hooks.items()):
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(is_relay_hook(h) for h in inner):
                kept.append(group)
                continue
            touched.append(event)
            rest = [h for h in inner if not is_relay_hook(h)]
            if rest:
                kept.append({**group, "hooks": rest})
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not touched:
        return Change(path, False, ())
    if not hooks:
        del data["hooks"]
    return Change(path, _save(path, data), tuple(dict.fromkeys(touched)))


def _replace_in_place(groups: list, entry: dict[str, Any]) -> bool:
    """Put `entry` where the first relay hook of this event is and drop any other relay
    hook, so that installing twice, or over hand-written entries, leaves one."""
    placed = False
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        updated = []
        for h in inner:
            if not is_relay_hook(h):
                updated.append(h)
            elif not placed:
                updated.append(entry)
                placed = True
        inner[:] = updated
    groups[:] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
    return placed


def _check_program(program: str) -> None:
    if program not in SETTINGS_FILE:
        raise UsageError(f"unknown agent program {program!r}: use one of {', '.join(SETTINGS_FILE)}")


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise RelayError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RelayError(f"{path} is not valid JSON ({exc}); fix it by hand (relay did not change the file)") from None
    if not isinstance(data, dict):
        raise RelayError(f"{path} is not a JSON object; fix it by hand (relay did not change the file)")
    return data


def _save(path: str, data: dict[str, Any]) -> bool:
    """Write `data` to `path` (temp file + fsync + rename) unless it already holds exactly
    that. A symlinked settings file is written where it points, keeping the link."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    target = os.path.realpath(path)
    try:
        with open(target, encoding="utf-8") as fh:
            if json.loads(fh.read() or "null") == data:
                return False
    except (OSError, ValueError):
        pass
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        replace_file(target, text.encode("utf-8"))
    except OSError as exc:
        raise RelayError(f"cannot write {path}: {exc.strerror or exc}") from None
    except RelayError as exc:
        raise RelayError(f"cannot write {path}: {exc.message}") from None
    return True
