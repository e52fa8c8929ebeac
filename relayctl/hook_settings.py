"""relay's hook entries in an agent program's project settings: install and uninstall.

Each program reads its hooks from a JSON file in the project, in one shape:
`{"hooks": {EVENT: [{"matcher"?: ..., "hooks": [{"type": "command", "command": ...}]}]}}`
(Claude Code `.claude/settings.json`, Codex CLI `.codex/hooks.json`, Gemini CLI
`.gemini/settings.json`). `install` reads the file, puts relay's command under each event
of its program's `Hooks` (relayd.programs; replacing a relay entry already there, in place, and touching no
other hook or key), and writes it back atomically only when something changed;
`uninstall` takes out relay's commands alone. A file that is not a JSON object is
refused with one line and left as it is.

A relay entry is a command hook whose whole command is relay's own form: a `relayctl`
(or `python -m relayctl`), then only `--agent`, `--dir`, `--socket` with their values,
then `hook <program>`, optionally behind `[ ! -x RELAYCTL ] || exec` and, for an event with nothing to do in an
agent's session (`Hooks.agentless`), behind `[ -n "$OVLD_ROLE$RELAY_AGENT$BBS_AGENT_ROLE" ] ||` (entries a person pasted from the docs are recognised too, and not
duplicated); a command of the person's that merely mentions it (`... && relayctl hook
claude | tee log`) is theirs. Relay's other entries: `mcpServers.relay` running relay-mcp
(Gemini CLI), `permissions.allow` entries for relay's MCP tools (`mcp__relay`,
`mcp__relay__*`; Claude Code).

Files are strict JSON both ways: NaN, Infinity or a number too large for a double is
refused rather than written back as something the programs cannot parse. Every write and
removal goes through relayctl.settings_io: a settings file, or a folder on its way, that is
a symlink is followed only while it stays inside the project, and a file with several hard
links is refused. Before relay's first write to a file, relayctl.originals keeps its bytes,
which `uninstall(..., everything=True)` (`relayctl uninstall`) puts back once relay's
entries are out; otherwise what is left keeps every key of the person's where it was.

GitHub Copilot CLI (1.0.102) reads every `.github/hooks/*.json` of the repository, in its
own shape: `{"version": 1, "hooks": {EVENT: [{"type": "command", "bash": ...}]}}`, with no
matcher groups. relay writes its entries into a file of its own there, `relay.json`, with
the same merge rules; uninstalling removes the file once nothing else is left in it.

OpenCode (1.18.33) has no command hooks but loads every `.opencode/plugin/*.js`: relay
installs its plugin (relayctl/opencode_plugin.js) there as `relay.js`, with this
installation's `relayctl ... hook opencode` command written into it; uninstalling removes
that file when it is relay's plugin as relay wrote it (relayctl.originals notes a digest of
what relay wrote): one the person changed since stays, with a note in the Change, and
`install` does not overwrite it.

GitHub Copilot CLI's door (relayd.arrival.copilot_extension) is relay's extension
(relayctl/copilot_extension.mjs), written whole into `.github/extensions/relay/extension.mjs`
when asked for (`install_extension`: `hooks install --for copilot --extension`, `up` with
`extension = true`), with this installation's `relayctl ... hook copilot sessionStart` in
it, and removed by `uninstall_extension` (`hooks uninstall`, `relayctl uninstall`) under the
plugin's rules: relay's file as relay wrote it goes, one the person changed stays.

`relayctl hooks install|uninstall` (cmd_hooks.py) is the command line over these functions.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from typing import Any, NamedTuple

from relayd.errors import RelayError, UsageError
from relayd.layout import AGENT_VARIABLES

from relayd.programs.program import SERVER_NAME, Program
from relayd.programs.registry import PROGRAMS

from . import originals, settings_io
from .context import installed_command

# Each program's files, layout, extra entry fields and allow rules are its own module's
# (relayd.programs; `Settings`). The files of each layout:
OPENCODE_PLUGIN = os.path.join(os.path.dirname(__file__), "opencode_plugin.js")  # the "plugin" layout's source
_PLUGIN_MARK = "// relay's OpenCode plugin"  # the first line: a file relay may replace or remove
_EXTENSION_MARK = "// relay's GitHub Copilot CLI extension"  # the same, for an Extension's file
_ARGV_MARK = r"/\* relay: relayctl argv \*/.*?/\* end \*/"
COPILOT_HOOKS_VERSION = 1  # the "version" an "own-file" hooks file carries (Copilot CLI's)

_HOOK_OPTIONS = ("--agent", "--dir", "--socket")
# A session with an agent name (relayd.layout.AGENT_VARIABLES) skips an `agentless` event's hook.
_AGENTLESS_GUARD = '[ -n "' + "".join(f"${name}" for name in AGENT_VARIABLES) + '" ]'
_AGENTLESS_WORDS = shlex.split(_AGENTLESS_GUARD) + ["||"]


class Change(NamedTuple):
    path: str  # the settings file
    changed: bool  # False: it already said exactly this (nothing written)
    events: tuple[str, ...]  # the events relay's entries were put under / taken from
    note: str = ""  # what the person should know about a file relay left as it is


def hook_argv(program: str, store_dir: str | None = None, socket: str | None = None, event: str | None = None) -> list[str]:
    """What a hook runs: this installation's relayctl, with a store or socket other than the
    default spelled out, then `hook PROGRAM` (and the event, for Copilot CLI, whose events
    do not name themselves on stdin). Never an agent name: the settings file is the
    project's, shared by every session in it, so the hook speaks for the RELAY_AGENT
    (OVLD_ROLE) of the session that runs it, and for nobody (silently) in a session relay
    did not start."""
    words = [*installed_command("relayctl", "relayctl")]
    if store_dir:
        words += ["--dir", store_dir]
    if socket:
        words += ["--socket", socket]
    return [*words, "hook", program, *([event] if event else [])]


def hook_command(program: str, store_dir: str | None = None, socket: str | None = None, event: str | None = None) -> str:
    """hook_argv as the shell command a hook entry runs. It starts with `[ ! -x RELAYCTL ] ||`:
    once relay is gone (its venv deleted, uninstalled before `relayctl uninstall` ran) the
    hook does nothing, silently, instead of an error at every prompt of every session in
    the project."""
    argv = hook_argv(program, store_dir, socket, event)
    command = f"[ ! -x {shlex.quote(argv[0])} ] || exec {shlex.join(argv)}"
    if event is not None and event in PROGRAMS[program].hooks.agentless:
        return f"{_AGENTLESS_GUARD} || {command}"  # nothing to do in an agent's session: no process
    return command


def is_relay_hook(entry: Any) -> bool:
    command = entry.get("command", entry.get("bash")) if isinstance(entry, dict) else None  # Copilot CLI's entries say "bash"
    return isinstance(command, str) and _is_relay_command(command)


def _is_relay_command(command: str) -> bool:
    """Whether `command` is, whole, the form hook_command writes (see the module docstring)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if words[:len(_AGENTLESS_WORDS)] == _AGENTLESS_WORDS:
        words = words[len(_AGENTLESS_WORDS):]  # hook_command's guard for an `agentless` event
    if words[:3] == ["[", "!", "-x"] and words[4:7] == ["]", "||", "exec"] and words[7:8] == words[3:4]:
        words = words[7:]  # hook_command's guard for a relay that is gone
    if len(words) > 2 and words[1:3] == ["-m", "relayctl"]:
        words = words[3:]
    elif words and os.path.basename(words[0]) == "relayctl":
        words = words[1:]
    else:
        return False
    if len(words) > 2 and words[-3] == "hook" and words[-2] in PROGRAMS and PROGRAMS[words[-2]].hooks.named_by_entry:
        words = words[:-1]  # the entries of a program whose events do not name themselves name their event
    if len(words) < 2 or words[-2] != "hook" or words[-1] not in PROGRAMS:
        return False
    options = words[:-2]
    return len(options) % 2 == 0 and all(options[i] in _HOOK_OPTIONS for i in range(0, len(options), 2))


def is_relay_permission(rule: Any) -> bool:
    """A `permissions.allow` rule relay wrote for its MCP server's tools (Claude Code's
    `mcp__relay`), or one for a single tool of it (`mcp__relay__send_message`)."""
    prefixes = {allow for spec in PROGRAMS.values() for allow in spec.settings.allow}
    return isinstance(rule, str) and any(rule == prefix or rule.startswith(prefix + "__") for prefix in prefixes)


def is_relay_server(entry: Any) -> bool:
    """An MCP server entry that runs relay-mcp (`relay-mcp` by path, or `python -m mcp_shim`):
    a command and its args, or OpenCode's one argv list under "command"."""
    if not isinstance(entry, dict):
        return False
    argv = entry.get("command")
    if isinstance(argv, str):
        argv = [argv, *(entry.get("args") if isinstance(entry.get("args"), list) else [])]
    if not isinstance(argv, list) or not argv or not all(isinstance(word, str) for word in argv):
        return False
    return os.path.basename(argv[0]) == "relay-mcp" or argv[1:3] == ["-m", "mcp_shim"]


def settings_path(program: str, project: str) -> str:
    _check_program(program)
    return os.path.join(os.path.abspath(project), PROGRAMS[program].settings.hooks_file)


def install(program: str, project: str = ".", store_dir: str | None = None, socket: str | None = None) -> Change:
    """Merge relay's hook entries into `program`'s settings in `project`."""
    _check_program(program)
    layout = PROGRAMS[program].settings.layout
    if layout == "own-file":
        return _install_own_file(PROGRAMS[program], project, store_dir, socket)
    if layout == "plugin":
        return _install_plugin(PROGRAMS[program], project, store_dir, socket)
    path = settings_path(program, project)
    command = hook_command(program, store_dir, socket)
    data = load_json(path)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise RelayError(f"{path}: \"hooks\" is not a JSON object; fix it by hand (relay did not change the file)")
    spec = PROGRAMS[program].hooks
    events = spec.installed
    for event in events:
        entry: dict[str, Any] = {**spec.entry_fields, "type": "command", "command": command}  # Gemini CLI's `name`
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise RelayError(f"{path}: hooks.{event} is not a list; fix it by hand (relay did not change the file)")
        if not _replace_in_place(groups, entry):
            group: dict[str, Any] = {"hooks": [entry]}
            if event in spec.matcher:
                group = {"matcher": spec.matcher[event], **group}
            groups.append(group)
    if PROGRAMS[program].settings.allow:
        _allow_relay_tools(path, data, PROGRAMS[program].settings.allow)
    return Change(path, save_json(path, data, project), events)


def _install_own_file(spec: Program, project: str, store_dir: str | None, socket: str | None) -> Change:
    """relay's own hooks file, each entry naming its event (Copilot CLI's .github/hooks/relay.json)."""
    path = settings_path(spec.name, project)
    data = load_json(path)
    data.setdefault("version", COPILOT_HOOKS_VERSION)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise RelayError(f"{path}: \"hooks\" is not a JSON object; fix it by hand (relay did not change the file)")
    events = spec.hooks.installed
    for event in events:
        entry = {"type": "command", "bash": hook_command(spec.name, store_dir, socket, event)}
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise RelayError(f"{path}: hooks.{event} is not a list; fix it by hand (relay did not change the file)")
        relay_at = [i for i, h in enumerate(entries) if is_relay_hook(h)]
        if relay_at:
            entries[relay_at[0]] = entry
            entries[:] = [h for i, h in enumerate(entries) if i not in relay_at[1:]]
        else:
            entries.append(entry)
    return Change(path, save_json(path, data, project), events)


def _with_hooks(path: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The settings file's data and its "hooks" object; None when there is nothing to take out."""
    if not os.path.exists(path):
        return None
    data = load_json(path)
    hooks = data.get("hooks")
    return (data, hooks) if isinstance(hooks, dict) else None


def _uninstall_own_file(spec: Program, project: str) -> Change:
    path = settings_path(spec.name, project)
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
        _remove_own_file(path, project)  # relay's own file, with nothing of anyone else's left in it
        return Change(path, True, tuple(touched))
    return Change(path, save_json(path, data, project), tuple(touched))


def plugin_text(program: str, store_dir: str | None = None, socket: str | None = None) -> str:
    """relay's plugin (OpenCode's) with this installation's hook command in it (no agent: the
    plugin speaks for the RELAY_AGENT of the session that loads it)."""
    with open(OPENCODE_PLUGIN, encoding="utf-8") as fh:
        text = fh.read()
    argv = hook_argv(program, store_dir, socket)
    text, argv_done = re.subn(r"/\* relay: relayctl argv \*/.*?/\* end \*/", lambda m: json.dumps(argv), text, count=1)
    text, agent_done = re.subn(r"/\* relay: agent \*/.*?/\* end \*/", lambda m: json.dumps(None), text, count=1)
    if not (argv_done and agent_done):
        raise RelayError(f"{OPENCODE_PLUGIN} has lost its relay: markers; reinstall relay")
    return text


def _install_plugin(spec: Program, project: str, store_dir: str | None, socket: str | None) -> Change:
    path = settings_path(spec.name, project)
    target = _checked_target(path, project)
    text = plugin_text(spec.name, store_dir, socket)
    old = _read_plugin(path, target)
    if old is not None and not old.startswith(_PLUGIN_MARK):
        raise RelayError(f"{path} is not relay's plugin; move it away or rename it (relay did not change the file)")
    events = spec.hooks.installed
    if old == text:
        return Change(path, False, events)
    if old is not None and originals.changed_since(target, old.encode("utf-8")):
        raise RelayError(f"{path} has changed since relay installed it; relay keeps your version: move it away to get "
                         "relay's (relay did not change the file)")
    data = text.encode("utf-8")
    settings_io.refuse_shared(target, path)
    originals.remember(target)  # the folders made for it, for uninstall
    settings_io.replace(target, data, path)
    originals.wrote(target, data)
    return Change(path, True, events)


def _read_plugin(path: str, target: str) -> str | None:
    try:
        with open(target, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RelayError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _uninstall_plugin(spec: Program, project: str) -> Change:
    """relay's plugin goes unless the person changed it since relay wrote it (then it stays,
    and the Change says so); a plugin relay wrote before it noted what it wrote is taken
    for relay's when it is this relay's plugin with some hook command in it."""
    path = settings_path(spec.name, project)
    target = _checked_target(path, project)
    old = _read_plugin(path, target)
    if old is None or not old.startswith(_PLUGIN_MARK):
        return Change(path, False, ())
    changed = originals.changed_since(target, old.encode("utf-8"))
    if changed or (changed is None and not _plugin_pattern().fullmatch(old)):
        originals.forget(target)
        return Change(path, False, (), f"kept {path}: it has changed since relay installed it (remove it yourself if you no longer want it)")
    _remove_own_file(path, project)
    return Change(path, True, spec.hooks.installed)


def _plugin_pattern() -> re.Pattern[str]:
    """relay's OpenCode plugin as opencode_plugin writes it, for any hook command."""
    with open(OPENCODE_PLUGIN, encoding="utf-8") as fh:
        text = fh.read()
    parts = re.split(r"/\* relay: (?:relayctl argv|agent) \*/.*?/\* end \*/", text)
    return re.compile("[^\n]*?".join(re.escape(part) for part in parts))


def extension_path(program: str, project: str) -> str:
    spec = PROGRAMS[program]
    if spec.extension is None:
        raise UsageError(f"relay has no extension for {spec.title}")
    return os.path.join(os.path.abspath(project), spec.extension.file)


def _extension_source(spec: Program) -> str:
    return os.path.join(os.path.dirname(__file__), spec.extension.source)


def extension_text(program: str, store_dir: str | None = None, socket: str | None = None) -> str:
    """relay's extension with this installation's command for its report in it (no agent:
    it speaks for the RELAY_AGENT of the session that loads it)."""
    spec = PROGRAMS[program]
    source = _extension_source(spec)
    with open(source, encoding="utf-8") as fh:
        text = fh.read()
    argv = hook_argv(program, store_dir, socket, spec.door.events[0])
    text, done = re.subn(_ARGV_MARK, lambda m: json.dumps(argv), text, count=1)
    if not done:
        raise RelayError(f"{source} has lost its relay: marker; reinstall relay")
    return text


def install_extension(program: str, project: str = ".", store_dir: str | None = None, socket: str | None = None) -> Change:
    """Write relay's extension for `program` into `project` (replacing relay's own, never the person's)."""
    _check_program(program)
    path = extension_path(program, project)
    target = _checked_target(path, project)
    text = extension_text(program, store_dir, socket)
    old = _read_plugin(path, target)
    if old is not None and not old.startswith(_EXTENSION_MARK):
        raise RelayError(f"{path} is not relay's extension; move it away or rename it (relay did not change the file)")
    if old == text:
        return Change(path, False, ())
    if old is not None and originals.changed_since(target, old.encode("utf-8")):
        raise RelayError(f"{path} has changed since relay installed it; relay keeps your version: move it away to get "
                         "relay's (relay did not change the file)")
    data = text.encode("utf-8")
    settings_io.refuse_shared(target, path)
    originals.remember(target)  # the folders made for it, for uninstall
    settings_io.replace(target, data, path)
    originals.wrote(target, data)
    return Change(path, True, ())


def uninstall_extension(program: str, project: str = ".") -> Change:
    """relay's extension goes unless the person changed it since relay wrote it (then it
    stays, and the Change says so); nothing for a program relay has no extension for."""
    _check_program(program)
    spec = PROGRAMS[program]
    if spec.extension is None:
        return Change("", False, ())
    path = extension_path(program, project)
    if not os.path.lexists(path):
        return Change(path, False, ())  # nothing there, even through a linked folder: nothing to check or remove
    target = _checked_target(path, project)
    old = _read_plugin(path, target)
    if old is None or not old.startswith(_EXTENSION_MARK):
        return Change(path, False, ())
    changed = originals.changed_since(target, old.encode("utf-8"))
    if changed or (changed is None and not _whole_file_pattern(_extension_source(spec)).fullmatch(old)):
        originals.forget(target)
        return Change(path, False, (), f"kept {path}: it has changed since relay installed it (remove it yourself if you no longer want it)")
    _remove_own_file(path, project)
    return Change(path, True, ())


def _whole_file_pattern(source: str) -> re.Pattern[str]:
    """A file relay writes whole from `source`, for any relayctl command in its marker."""
    with open(source, encoding="utf-8") as fh:
        parts = re.split(_ARGV_MARK, fh.read())
    return re.compile("[^\n]*?".join(re.escape(part) for part in parts))


def _remove_own_file(path: str, project: str) -> None:
    """Remove a file relay wrote whole, and the folders it made for it (relayctl.originals
    knows which: a folder that was there before stays)."""
    target = _checked_target(path, project)
    if originals.put_back(target, lambda before: not before):
        return  # relay made it: gone, with the folders made for it
    settings_io.remove(target, path)


def _uninstall_project_server(spec: Program, project: str) -> Change:
    """relay-mcp out of the program's project file of its own for servers (OpenCode's
    opencode.json: `relayctl up` put it there), the file back to its bytes from before relay
    when nothing else changed, or gone when relay made it."""
    path = os.path.join(os.path.abspath(project), spec.settings.server_file)
    key = spec.settings.server_key
    if not os.path.lexists(path):
        originals.forget(path)
        return Change(path, False, ())
    data = load_json(path)
    servers = data.get(key)
    if not (isinstance(servers, dict) and is_relay_server(servers.get(SERVER_NAME))):
        originals.forget(path)
        return Change(path, False, ())
    del servers[SERVER_NAME]
    if not servers:
        del data[key]
    keep_their_empty(path, data)
    if originals.put_back(_checked_target(path, project), lambda before: same_json(before, data)):
        return Change(path, True, (key,))
    return Change(path, save_json(path, data, project), (key,))


def _allow_relay_tools(path: str, data: dict[str, Any], rules: tuple[str, ...]) -> None:
    permissions = data.setdefault("permissions", {})
    if not isinstance(permissions, dict) or not isinstance(permissions.setdefault("allow", []), list):
        raise RelayError(f"{path}: \"permissions.allow\" is not a list; fix it by hand (relay did not change the file)")
    for rule in rules:
        if rule not in permissions["allow"]:
            permissions["allow"].append(rule)


def relay_alone(program: str, project: str) -> int | None:
    """How many hook entries the project's settings hold, when every one is relay's; None
    when the file holds anyone else's hooks too (or cannot be read)."""
    try:
        hooks = load_json(settings_path(program, project)).get("hooks")
    except RelayError:
        return None
    if not isinstance(hooks, dict):
        return None
    entries = [h for groups in hooks.values() if isinstance(groups, list) for g in groups if isinstance(g, dict)
               for h in (g.get("hooks") if isinstance(g.get("hooks"), list) else [None])]
    return len(entries) if entries and all(is_relay_hook(h) for h in entries) else None


def put_server(program: str, project: str, name: str, entry: dict[str, Any]) -> Change:
    """Put one MCP server into the project file where `program` reads its servers
    (`Settings.server_file`: Gemini CLI's `mcpServers` of .gemini/settings.json, beside its
    hooks; OpenCode's `mcp` of opencode.json), touching no other key."""
    spec = PROGRAMS[program].settings
    return _put_server(os.path.join(os.path.abspath(project), spec.server_file), spec.server_key, project, name, entry)


def _put_server(path: str, key: str, project: str, name: str, entry: dict[str, Any]) -> Change:
    data = load_json(path)
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise RelayError(f"{path}: \"{key}\" is not a JSON object; fix it by hand (relay did not change the file)")
    servers[name] = entry
    return Change(path, save_json(path, data, project), ())


def uninstall(program: str, project: str = ".", everything: bool = False) -> Change:
    """Take relay's hook entries out of `program`'s settings in `project`; nothing else.
    With `everything` (`relayctl uninstall`) relay's other entries go too (Gemini CLI's
    relay-mcp server, Claude Code's allow rules for relay's tools), and the file gets back
    the bytes it had before relay first wrote into it when nothing else changed since
    (relayctl.originals), or goes, when relay made it."""
    _check_program(program)
    spec = PROGRAMS[program]
    if spec.settings.layout == "own-file":
        return _uninstall_own_file(spec, project)
    if spec.settings.layout == "plugin":
        plugin = _uninstall_plugin(spec, project)
        if not everything or spec.settings.server_file is None:
            return plugin
        config = _uninstall_project_server(spec, project)
        return plugin if not config.changed else Change(config.path, True, (*plugin.events, *config.events), plugin.note)
    path = settings_path(program, project)
    if not os.path.lexists(path):
        if everything:
            originals.forget(path)
        return Change(path, False, ())
    data = load_json(path)
    touched = _strip_hooks(data)
    if everything:
        touched += _strip_others(data)
    elif spec.settings.allow:
        touched += _strip_allow(data)  # written by install with the hooks, so it goes with them
    if not touched:
        if everything:
            originals.forget(path)
        return Change(path, False, ())
    for key in ("hooks", "mcpServers", "permissions"):
        if data.get(key) == {}:
            del data[key]
    keep_their_empty(path, data)
    if everything and originals.put_back(_checked_target(path, project), lambda before: same_json(before, data)):
        return Change(path, True, tuple(dict.fromkeys(touched)))
    return Change(path, save_json(path, data, project), tuple(dict.fromkeys(touched)))


def _strip_hooks(data: dict[str, Any]) -> list[str]:
    """Take relay's hook entries out of `data`; the events they were under."""
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return []
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
    return touched


def _strip_others(data: dict[str, Any]) -> list[str]:
    """Take relay's MCP server and its allow rules out of `data`; what went ("mcpServers",
    "permissions.allow")."""
    touched = []
    servers = data.get("mcpServers")
    if isinstance(servers, dict) and is_relay_server(servers.get(SERVER_NAME)):
        del servers[SERVER_NAME]
        touched.append("mcpServers")
    return touched + _strip_allow(data)


def _strip_allow(data: dict[str, Any]) -> list[str]:
    """Take relay's allow rules out of Claude Code's `permissions.allow`."""
    touched = []
    permissions = data.get("permissions")
    allow = permissions.get("allow") if isinstance(permissions, dict) else None
    if isinstance(allow, list) and any(is_relay_permission(rule) for rule in allow):
        kept = [rule for rule in allow if not is_relay_permission(rule)]
        if kept:
            permissions["allow"] = kept
        else:
            del permissions["allow"]
        touched.append("permissions.allow")
    return touched


def keep_their_empty(path: str, data: dict[str, Any]) -> None:
    """Put back into `data` the objects and lists that were in the file before relay and
    that taking relay's entries out left empty (and so removed): only a table relay made
    goes once nothing but relay's keys was in it. Without a record of the file (relayctl.originals)
    every emptied one is taken for relay's."""
    before = originals.recorded(os.path.realpath(path))
    try:
        old = _strict_loads(before.decode("utf-8")) if before and before.strip() else {}
    except (ValueError, UnicodeDecodeError):
        return
    if isinstance(old, dict):
        _restore_empty(old, data)


def _restore_empty(old: dict[str, Any], now: dict[str, Any]) -> None:
    for key, value in old.items():
        if key not in now and _empty(value):
            now[key] = json.loads(json.dumps(value))
        elif isinstance(value, dict) and isinstance(now.get(key), dict):
            _restore_empty(value, now[key])


def _empty(value: Any) -> bool:
    """An empty object or list, or an object holding only such."""
    return value in ({}, []) or (isinstance(value, dict) and all(_empty(v) for v in value.values()))


def same_json(recorded: bytes, data: dict[str, Any]) -> bool:
    if not recorded.strip():
        return data == {}
    try:
        return _strict_loads(recorded.decode("utf-8")) == data
    except ValueError:
        return False


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
    if program not in PROGRAMS:
        raise UsageError(f"unknown agent program {program!r}: use one of {', '.join(PROGRAMS)}")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is too large for the programs that read this file")
    return value


def _strict_loads(text: str) -> Any:
    """json.loads without Python's extensions: NaN, Infinity and -Infinity are refused, and
    so is a number that overflows a double (1e400), which json would read as infinity."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite)


def load_json(path: str) -> dict[str, Any]:
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
        data = _strict_loads(text)
    except ValueError as exc:
        raise RelayError(f"{path} is not valid JSON ({exc}); fix it by hand (relay did not change the file)") from None
    if not isinstance(data, dict):
        raise RelayError(f"{path} is not a JSON object; fix it by hand (relay did not change the file)")
    return data


def _checked_target(path: str, project: str) -> str:
    """Where writing `path` lands: a symlinked settings file (or a symlinked folder on its
    way) is followed only while it stays inside the project (a link into someone's dotfiles,
    or a repository's `.opencode -> /elsewhere`, is not relay's to write)."""
    return settings_io.landing(path, project)


def save_json(path: str, data: dict[str, Any], project: str) -> bool:
    """Write `data` to `path` (temp file + fsync + rename) unless it already holds exactly
    that, keeping the original first (relayctl.originals). A symlinked settings file is
    written where it points, keeping the link, when that is inside the project."""
    target = _checked_target(path, project)
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as exc:
        raise RelayError(f"cannot write {path}: {exc}") from None
    try:
        with open(target, encoding="utf-8") as fh:
            if _strict_loads(fh.read() or "null") == data:
                return False
    except (OSError, ValueError):
        pass
    settings_io.refuse_shared(target, path)
    originals.remember(target)
    settings_io.replace(target, text.encode("utf-8"), path)
    return True
