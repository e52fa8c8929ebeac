"""What a settings file held before relay first wrote into it, so uninstall puts it back.

Relay writes its entries into files that are the person's (a project's
`.claude/settings.json`, `.codex/hooks.json`, `.gemini/settings.json`, a program's own
settings in the home directory). Writing JSON back reformats it; so before relay's first
write to a file, `remember(path)` keeps its exact bytes (or that it did not exist, and which
of its directories relay made) under `$XDG_STATE_HOME/relay/originals/` (default
`~/.local/state/relay/originals/`), one record per file, never replaced by a later write.
`put_back(path, data, equal)` is uninstall's last step for a file: when what is left once
relay's entries are out is what the record held (`equal`), the file gets the recorded bytes
back, or is removed with the directories relay made; otherwise (the person changed the file
since) the file keeps what is left. Either way the record goes.

For a file relay writes whole (OpenCode's plugin), `wrote(path, data)` also notes a digest
of what relay wrote, so `changed_since(path)` tells a file the person edited afterwards
(kept at uninstall, and not overwritten) from relay's own.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Callable

from relayd.errors import RelayError
from relayd.fsio import replace_file
from relayd.layout import sha256_hex

from . import settings_io


def records_dir() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "relay", "originals")


def _record_path(path: str) -> str:
    return os.path.join(records_dir(), sha256_hex(os.path.realpath(path).encode())[:32] + ".json")


def remember(path: str) -> None:
    """Keep `path` as it is now, unless a record of it is kept already. Call it before a write."""
    record = _record_path(path)
    if os.path.exists(record):
        return
    target = os.path.realpath(path)
    made, folder = [], os.path.dirname(target)
    while not os.path.isdir(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        with open(target, "rb") as fh:
            entry: dict[str, Any] = {"path": target, "existed": True, "bytes": base64.b64encode(fh.read()).decode()}
    except FileNotFoundError:
        entry = {"path": target, "existed": False, "made_dirs": made}
    _write(path, entry)


def _write(path: str, entry: dict[str, Any]) -> None:
    try:
        os.makedirs(records_dir(), mode=0o700, exist_ok=True)
        replace_file(_record_path(path), (json.dumps(entry) + "\n").encode())
    except OSError as exc:
        raise RelayError(f"cannot keep the original of {path} in {records_dir()}: {exc.strerror or exc}") from None


def put_back(path: str, equal: Callable[[bytes], bool]) -> bool:
    """Give `path` its recorded bytes when `equal(recorded bytes)` says that what is left in
    it is what the record held; True when it did. The record is dropped either way."""
    entry = _read(path)
    if entry is None:
        return False
    target = os.path.realpath(path)
    recorded = base64.b64decode(entry["bytes"]) if entry.get("existed") else b""
    restored = equal(recorded)
    if restored:
        if entry.get("existed"):
            settings_io.replace(target, recorded, path)
        else:
            settings_io.remove(target, path)
            for folder in entry.get("made_dirs", []):
                try:
                    os.rmdir(folder)
                except OSError:
                    break  # something of the person's is in it now
    forget(path)
    return restored


def recorded(path: str) -> bytes | None:
    """The bytes `path` had before relay's first write (b"" when it did not exist); None
    when no record is kept."""
    entry = _read(path)
    if entry is None:
        return None
    return base64.b64decode(entry["bytes"]) if entry.get("existed") else b""


def wrote(path: str, data: bytes) -> None:
    """Note that relay just wrote `data` to `path` whole (after `remember`)."""
    entry = _read(path)
    if entry is not None:
        entry["wrote"] = sha256_hex(data)
        _write(path, entry)


def changed_since(path: str, data: bytes) -> bool | None:
    """Whether `data` (what `path` holds now) differs from what relay last wrote there;
    None when relay kept no note of that (a file written before relay kept them)."""
    entry = _read(path)
    digest = entry.get("wrote") if entry is not None else None
    return None if not isinstance(digest, str) else sha256_hex(data) != digest


def forget(path: str) -> None:
    try:
        os.unlink(_record_path(path))
    except FileNotFoundError:
        return
    for folder in (records_dir(), os.path.dirname(records_dir())):  # relay's own directories, when empty
        try:
            os.rmdir(folder)
        except OSError:
            break


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(_record_path(path), encoding="utf-8") as fh:
            entry = json.load(fh)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("path") == os.path.realpath(path) else None
