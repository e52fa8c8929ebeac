"""Where things are: the repository and its tests/ folder, named once for every test,
helper and benchmark that reads a doc, runs a script by path or installs a copy of relay."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
SUPPORT = TESTS / "support"
DOCS = ROOT / "docs"
PACKAGES = ("relayd", "relayctl", "mcp_shim", "relayweb")  # relay's own code, as pyproject installs it
