"""Git hook managers from npm that the pre-commit guard must chain to, installed for tests.

husky and lefthook are pinned in tests/tools/package.json and installed there the way
tests/support/agent_programs.py installs the agent programs (npm, registry only); a test that needs
one fails when it cannot be installed. (pre-commit, the Python one, is a test extra.)
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

from .paths import TESTS

TOOLS_DIR = TESTS / "tools"


def _installed(package: str) -> bool:
    pinned = json.loads((TOOLS_DIR / "package.json").read_text())["dependencies"][package]
    try:
        return json.loads((TOOLS_DIR / "node_modules" / package / "package.json").read_text())["version"] == pinned
    except (OSError, ValueError, KeyError):
        return False


def _install() -> None:
    if not all(_installed(p) for p in ("husky", "lefthook")):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("the hook manager tests need node and npm (Debian: apt-get install nodejs npm)")
        with open(TOOLS_DIR / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not all(_installed(p) for p in ("husky", "lefthook")):
                # --ignore-scripts: lefthook's postinstall would install its hooks into the
                # repository around tests/tools (this checkout).
                subprocess.run([npm, "install", "--ignore-scripts", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error"],
                               cwd=TOOLS_DIR, check=True, timeout=600)


def husky() -> Path:
    """husky's command (bin.js): `node husky` in a repository sets it up."""
    _install()
    return TOOLS_DIR / "node_modules" / "husky" / "bin.js"


def lefthook() -> Path:
    """lefthook's command (the binary its npm package ships): `lefthook install` sets it up."""
    _install()
    return TOOLS_DIR / "node_modules" / ".bin" / "lefthook"
