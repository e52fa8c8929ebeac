"""Which version of an agent program is installed, against the version relay is tested with.

`up` and `relayctl status` say in one line when a program found on PATH is older than its
module's `tested` version (npm on Debian's Node 20 quietly installs an older release of a
package whose newest declares a newer Node). The version is the one in the npm package's own
package.json, found from the command's real path. Standard library only, and none of its
slower modules (no shutil, no json): `relayctl status` runs on relayctl's fast path.
"""

from __future__ import annotations

import os

from relayd import jsonline

from .program import Program


def on_path(command: str, path: str | None = None) -> str | None:
    """The executable `command` names on PATH (or the path given), as a shell finds it."""
    if os.sep in command:
        return command if os.access(command, os.X_OK) and not os.path.isdir(command) else None
    for folder in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep):
        found = os.path.join(folder or ".", command)
        if os.access(found, os.X_OK) and not os.path.isdir(found):
            return found
    return None


def version(spec: Program, command: str | None = None) -> str | None:
    """The version of `spec`'s npm package behind `command` (default: the program's name) on
    PATH; None when there is no such command or it is not that package."""
    found = on_path(command or spec.name)
    if found is None:
        return None
    folder = os.path.dirname(os.path.realpath(found))
    while folder != os.path.dirname(folder):
        try:
            with open(os.path.join(folder, "package.json"), "rb") as fh:
                manifest = jsonline.loads(fh.read())
        except (OSError, ValueError):
            manifest = None
        if isinstance(manifest, dict) and manifest.get("name") == spec.package:
            return str(manifest.get("version") or "") or None
        folder = os.path.dirname(folder)
    return None


def older(found: str, tested: str) -> bool:
    return _key(found) < _key(tested)


def warning(spec: Program, command: str | None = None) -> str | None:
    """One line when the installed program is older than the version relay is tested with."""
    found = version(spec, command)
    if not found or not older(found, spec.tested):
        return None
    return f"{command or spec.name} is {found}, older than the {spec.tested} relay is tested with: npm install -g {spec.package}@{spec.tested}"


def _key(text: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in text.split("-")[0].split("."))
