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

GitHub Copilot CLI (1.0.102) reads every `.github/hooks/*.json` of the repository, in its
own shape: `{"version": 1, "hooks": {EVENT: [{"type": "command", "bash": ...}]}}`, with no
matcher groups. relay writes its entries into a file of its own there, `relay.json`, with
the same merge rules; uninstalling removes the file once nothing else is left in it.

OpenCode (1.18.33) has no command hooks but loads every `.opencode/plugin/*.js`: relay
installs its plugin (relayctl/opencode_plugin.js) there as `relay.js`, with this
installation's `relayctl ... hook opencode` command written into it; uninstalling removes
that file (only when it is relay's plugin).

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
from relayd.names import check_agent_name

from .cmd_hook import PROGRAMS
from .context import installed_command

SETTINGS_FILE = {
    "claude": os.path.join(".claude", "settings.json"),
    "codex": os.path.join(".codex", "hooks.json"),
    "gemini": os.path.join(".gemini", "settings.json"),
    "copilot": os.path.join(".github", "hooks", "relay.json"),
    "opencode": os.path.join(".opencode", "plugin", "relay.js"),
}
OPENCODE_PLUGIN = os.path.join(os.path.dirname(__file__), "opencode_plugin.js")
_PLUGIN_MARK = "// relay's OpenCode plugin"  # the first line: a file relay may replace or remove
COPILOT_HOOKS_VERSION = 1  # the "version" Copilot CLI's hook files carry
GEMINI_HOOK_NAME = "relay"  # Gemini CLI lists hooks by name: `/hooks disable relay`
# Claude Code's permission rule for every tool of the MCP server named "relay" (relayctl
# mcp-config's key): without it, each relay tool call in Claude Code's default "auto"
# mode (2.1.332) first waits for its safety check, an extra model request. relay's
# tools only read and write relay's own store. Codex and Gemini get theirs in the MCP
# entry itself (relayctl mcp-config).
CLAUDE_ALLOW = "mcp__relay"

_RELAY_HOOK = re.compile(r"(?:^|[\s/'\"])relayctl['\"]?\s(?:.*\s)?hook\s+(?:(?:claude|codex|gemini)|copilot\s+[A-Za-z]+)\s*$")


class Change(NamedTuple):
    path: str  # the settings file
    changed: bool  # False: it already said exactly this (nothing written)
    events: tuple[str, ...]  # the events relay's entries were put under / taken from


def hook_command(program: str, agent: str | None, store_dir: str | None = None, socket: str | None = None, event: str | None = None) -> str:
    """The shell command a hook entry runs: this installation's relayctl, with the agent
    (and a store or socket other than the default) spelled out, since an agent program
    starts its hooks with its own environment. With agent None the hook speaks for the
    RELAY_AGENT of the program's environment: several agents of a team (`relayctl up`)
    share one project's settings, each pane with its own RELAY_AGENT."""
    words = [*installed_command("relayctl", "relayctl")]
    if agent is not None:
        words += ["--agent", check_agent_name(agent)]
    if store_dir:
        words += ["--dir", store_dir]
    if socket:
        words += ["--socket", socket]
    return shlex.join([*words, "hook", program, *([event] if event else [])])


def is_relay_hook(entry: Any) -> bool:
    command = entry.get("command", entry.get("bash")) if isinstance(entry, dict) else None
    return isinstance(command, str) and bool(_RELAY_HOOK.search(command))


def settings_path(program: str, project: str) -> str:
    _check_program(program)
    return os.path.join(os.path.abspath(project), SETTINGS_FILE[program])


def install(program: str, agent: str | None, project: str = ".", store_dir: str | None = None, socket: str | None = None) -> Change:
    """Merge relay's hook entries for `agent` into `program`'s settings in `project`."""
    if program == "copilot":
        return _install_copilot(agent, project, store_dir, socket)
    if program == "opencode":
        return _install_opencode(agent, project, store_dir, socket)
    path = settings_path(program, project)
    command = hook_command(program, agent, store_dir, socket)
    data = _load(path)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise RelayError(f"{path}: \"hooks\" is not a JSON object; fix it by hand (relay did not change the file)")
    spec = PROGRAMS[program]
    events = spec.installed
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
    if program == "claude":
        _allow_relay_tools(path, data)
    return Change(path, _save(path, data), events)


def _install_copilot(agent: str | None, project: str, store_dir: str | None, socket: str | None) -> Change:
    path = settings_path("copilot", project)
    data = _load(path)
    data.setdefault("version", COPILOT_HOOKS_VERSION)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise RelayError(f"{path}: \"hooks\" is not a JSON object; fix it by hand (relay did not change the file)")
    events = PROGRAMS["copilot"].installed
    for event in events:
        entry = {"type": "command", "bash": hook_command("copilot", agent, store_dir, socket, event)}
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise RelayError(f"{path}: hooks.{event} is not a list; fix it by hand (relay did not change the file)")
        relay_at = [i for i, h in enumerate(entries) if is_relay_hook(h)]
        if relay_at:
            entries[relay_at[0]] = entry
            entries[:] = [h for i, h in enumerate(entries) if i not in relay_at[1:]]
        else:
            entries.append(entry)
    return Change(path, _save(path, data), events)


def _with_hooks(path: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The settings file's data and its "hooks" object; None when there is nothing to take out."""
    if not os.path.exists(path):
        return None
    data = _load(path)
    hooks = data.get("hooks")
    return (data, hooks) if isinstance(hooks, dict) else None


def _uninstall_copilot(project: str) -> Change:
    path = settings_path("copilot", project)
    found = _with_hooks(path)
    if found is None:
        return Change(path, False, ())
    data, hooks = found
    touched = []
    for event, entries in list(hooks.items()):
        if isinstance(entries, list) and any(is_relay_hook(h) for h in entries):
            touched.append(event)
            hooks[event] = [h for h in entries if not is_relay_hook(h)]
            if not hooks[event]:
                del hooks[event]
    if not touched:
        return Change(path, False, ())
    if not hooks and set(data) <= {"version", "hooks"}:
        try:
            os.unlink(path)  # relay's own file, with nothing of anyone else's left in it
        except OSError as exc:
            raise RelayError(f"cannot remove {path}: {exc.strerror or exc}") from None
        return Change(path, True, tuple(touched))
    return Change(path, _save(path, data), tuple(touched))


def opencode_plugin(agent: str | None, store_dir: str | None = None, socket: str | None = None) -> str:
    """relay's OpenCode plugin with this installation's hook command (and agent) in it."""
    with open(OPENCODE_PLUGIN, encoding="utf-8") as fh:
        text = fh.read()
    argv = shlex.split(hook_command("opencode", agent, store_dir, socket))
    text, argv_done = re.subn(r"/\* relay: relayctl argv \*/.*?/\* end \*/", lambda m: json.dumps(argv), text, count=1)
    text, agent_done = re.subn(r"/\* relay: agent \*/.*?/\* end \*/", lambda m: json.dumps(agent), text, count=1)
    if not (argv_done and agent_done):
        raise RelayError(f"{OPENCODE_PLUGIN} has lost its relay: markers; reinstall relay")
    return text


def _install_opencode(agent: str | None, project: str, store_dir: str | None, socket: str | None) -> Change:
    path = settings_path("opencode", project)
    text = opencode_plugin(agent, store_dir, socket)
    try:
        with open(path, encoding="utf-8") as fh:
            old = fh.read()
    except FileNotFoundError:
        old = None
    except (OSError, UnicodeDecodeError) as exc:
        raise RelayError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if old is not None and not old.startswith(_PLUGIN_MARK):
        raise RelayError(f"{path} is not relay's plugin; move it away or rename it (relay did not change the file)")
    events = PROGRAMS["opencode"].installed
    if old == text:
        return Change(path, False, events)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        replace_file(path, text.encode("utf-8"))
    except OSError as exc:
        raise RelayError(f"cannot write {path}: {exc.strerror or exc}") from None
    return Change(path, True, events)


def _uninstall_opencode(project: str) -> Change:
    path = settings_path("opencode", project)
    try:
        with open(path, encoding="utf-8") as fh:
            ours = fh.read().startswith(_PLUGIN_MARK)
    except FileNotFoundError:
        return Change(path, False, ())
    except (OSError, UnicodeDecodeError) as exc:
        raise RelayError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not ours:
        return Change(path, False, ())
    try:
        os.unlink(path)
    except OSError as exc:
        raise RelayError(f"cannot remove {path}: {exc.strerror or exc}") from None
    return Change(path, True, PROGRAMS["opencode"].installed)


def _allow_relay_tools(path: str, data: dict[str, Any]) -> None:
    permissions = data.setdefault("permissions", {})
    if not isinstance(permissions, dict) or not isinstance(permissions.setdefault("allow", []), list):
        raise RelayError(f"{path}: \"permissions.allow\" is not a list; fix it by hand (relay did not change the file)")
    if CLAUDE_ALLOW not in permissions["allow"]:
        permissions["allow"].append(CLAUDE_ALLOW)


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


def put_opencode_server(project: str, name: str, entry: dict[str, Any]) -> Change:
    """Put one MCP server under `mcp` of the project's opencode.json, touching no other key."""
    path = os.path.join(os.path.abspath(project), "opencode.json")
    data = _load(path)
    servers = data.setdefault("mcp", {})
    if not isinstance(servers, dict):
        raise RelayError(f"{path}: \"mcp\" is not a JSON object; fix it by hand (relay did not change the file)")
    servers[name] = entry
    return Change(path, _save(path, data), ())


def uninstall(program: str, project: str = ".") -> Change:
    """Take relay's hook entries out of `program`'s settings in `project`; nothing else."""
    if program == "copilot":
        return _uninstall_copilot(project)
    if program == "opencode":
        return _uninstall_opencode(project)
    path = settings_path(program, project)
    found = _with_hooks(path)
    if found is None:
        return Change(path, False, ())
    data, hooks = found
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
    permissions = data.get("permissions")
    if program == "claude" and isinstance(permissions, dict) and isinstance(permissions.get("allow"), list) and CLAUDE_ALLOW in permissions["allow"]:
        permissions["allow"] = [rule for rule in permissions["allow"] if rule != CLAUDE_ALLOW]
        if not permissions["allow"]:
            del permissions["allow"]
        if not permissions:
            del data["permissions"]
        touched.append("permissions.allow")
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
