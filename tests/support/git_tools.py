"""Git hook managers from npm that the pre-commit guard must chain to, installed for tests.

husky and lefthook are pinned in tests/tools/package.json and installed there the way
tests/support/agent_programs.py installs the agent programs (npm, registry only); a test that needs
one fails when it cannot be installed. (pre-commit, the Python one, is a test extra.)
"""

from __future__ import annotations

from pathlib import Path

from .npm_kit import NpmKit
from .paths import TESTS

TOOLS_DIR = TESTS / "tools"


# --ignore-scripts: lefthook's postinstall would install its hooks into the repository
# around tests/tools (this checkout).
KIT = NpmKit(TOOLS_DIR, ("husky", "lefthook"), ("husky", "lefthook"), npm_options=("--ignore-scripts",), needed_by="the hook manager tests")


def husky() -> Path:
    """husky's command (bin.js): `node husky` in a repository sets it up."""
    KIT.install()
    return TOOLS_DIR / "node_modules" / "husky" / "bin.js"


def lefthook() -> Path:
    """lefthook's command (the binary its npm package ships): `lefthook install` sets it up."""
    KIT.install()
    return TOOLS_DIR / "node_modules" / ".bin" / "lefthook"
