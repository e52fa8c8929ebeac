"""The programs the suite runs for real, and the Debian package of each.

tests/conftest.py checks them before the first test, so a machine without one stops at
once with the command that fixes it rather than failing here and there through a
15-minute run (.ci/run installs them first).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PROGRAMS = {
    "tmux": "tmux",
    "git": "git",
    "socat": "socat",  # docs/protocol.md's examples
    "chromium": "chromium",  # the web view's browser tests
    "w3m": "w3m",  # relayctl web --open with a browser in the foreground
    "nats-server": "nats-server",  # the bridge (Debian puts it in /usr/sbin)
    "node": "nodejs",  # the agent programs from npm
    "npm": "npm",
}


def missing_programs(path: str | None = None) -> list[str]:
    """The Debian packages of PROGRAMS not found on PATH (or in /usr/sbin)."""
    search = os.pathsep.join([path if path is not None else os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [package for program, package in PROGRAMS.items() if shutil.which(program, path=search) is None]


def path_without(programs: tuple[str, ...], path: str, scratch: Path) -> str:
    """`path` with none of `programs` on it, for a test about a program not installed, on a
    machine where it is (relay's own users have Claude Code installed globally): each folder
    of `path` that holds one becomes a folder in `scratch` of links to everything else in it."""
    folders = []
    for index, folder in enumerate(path.split(os.pathsep)):
        found = [p for p in programs if os.path.isfile(os.path.join(folder, p))]
        if found:
            copy = scratch / f"{index}-{Path(folder).name}"
            copy.mkdir(parents=True)
            for entry in os.listdir(folder):
                if entry not in programs:
                    (copy / entry).symlink_to(os.path.join(folder, entry))
            folder = str(copy)
        folders.append(folder)
    return os.pathsep.join(folders)
