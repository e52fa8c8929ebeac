"""A folder of npm packages pinned in its package.json (tests/agents, tests/tools), installed
on first use by whichever test needs it first.

Every look at the folder takes its install lock: shared to check that the pinned versions
and their commands are there, exclusive for the whole `npm install`. npm writes each
package's package.json long before it links `node_modules/.bin/` and runs the install
scripts, so a pytest-xdist worker that looked without the lock saw the pinned versions in
place and a command still missing.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path


class NpmKit:
    def __init__(self, directory: Path, packages: Iterable[str], commands: Iterable[str], npm_options: Iterable[str] = (), needed_by: str = "these tests") -> None:
        self.directory = directory
        self.packages = tuple(packages)  # whose pinned version must be installed
        self.commands = tuple(commands)  # what must be in node_modules/.bin once they are
        self.npm_options = tuple(npm_options)
        self.needed_by = needed_by

    def pinned_version(self, package: str) -> str:
        return json.loads((self.directory / "package.json").read_text())["dependencies"][package]

    def installed_version(self, package: str) -> str | None:
        try:
            return json.loads((self.directory / "node_modules" / package / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            return None

    def ready(self) -> bool:
        """Meaningful only under the lock: an npm running here may have written some of it."""
        return (all(self.installed_version(p) == self.pinned_version(p) for p in self.packages)
                and all((self.directory / "node_modules" / ".bin" / c).exists() for c in self.commands))

    def install(self) -> None:
        """npm install here unless every pinned version and command is already in place; a
        second caller (another worker, another run in this checkout) waits for the first's
        whole install."""
        with open(self.directory / ".install.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            if self.ready():
                return
            fcntl.flock(lock, fcntl.LOCK_EX)  # not atomic: another caller may install first
            if self.ready():
                return
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError(f"{self.needed_by} need node and npm (Debian: apt-get install nodejs npm)")
            subprocess.run([npm, "install", *self.npm_options, "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=self.directory, check=True, timeout=900)
            if not self.ready():
                raise RuntimeError(f"npm install in {self.directory} ended without {', '.join(self._missing())}")

    def command(self, name: str) -> Path:
        """node_modules/.bin/NAME, installing the pinned set first if needed."""
        self.install()
        path = self.directory / "node_modules" / ".bin" / name
        if not path.exists():
            raise RuntimeError(f"npm installed {self.directory.name}'s packages but {path} is missing")
        return path

    def _missing(self) -> list[str]:
        return ([p for p in self.packages if self.installed_version(p) != self.pinned_version(p)]
                + [f".bin/{c}" for c in self.commands if not (self.directory / "node_modules" / ".bin" / c).exists()])
