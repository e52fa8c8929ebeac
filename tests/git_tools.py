"""Git hook managers from npm that the pre-commit guard must chain to, installed for tests.

The version is pinned in tests/tools/package.json and installed there the way
tests/agent_programs.py installs the agent programs (npm, registry only); a test that needs
one fails when it cannot be installed.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

TOOLS_DIR = Path(__file__).parent / "tools"


def _installed(package: str) -> bool:
    pinned = json.loads((TOOLS_DIR / "package.json").read_text())["dependencies"][package]
    try:
        return json.loads((TOOLS_DIR / "node_modules" / package / "package.json").read_text())["version"] == pinned
    except (OSError, ValueError, KeyError):
        return False


def husky() -> Path:
    """husky's command (bin.js), installed if needed: `node husky` in a repository sets it up."""
    if not _installed("husky"):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("the husky tests need node and npm (Debian: apt-get install nodejs npm)")
        with open(TOOLS_DIR / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _installed("husky"):
                subprocess.run([npm, "install", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error"],
                               cwd=TOOLS_DIR, check=True, timeout=600)
    return TOOLS_DIR / "node_modules" / "husky" / "bin.js"
