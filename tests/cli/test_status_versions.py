"""relayctl status names an agent program that is older than the version relay is tested
with (as `up` does), found as a shell finds it on PATH: npm on Debian's Node 20 quietly
installs an older release of a program whose newest declares a newer Node."""

from __future__ import annotations

import json
import os
from pathlib import Path

from relayd.programs.registry import PROGRAMS


def _npm_program(root: Path, package: str, version: str, command: str) -> Path:
    """A program as npm installs it: the package's folder with its package.json, and the
    command on PATH a link into it."""
    folder = root / "lib" / "node_modules" / package
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": package, "version": version}))
    (folder / "cli.js").write_text("#!/bin/sh\n")
    (folder / "cli.js").chmod(0o755)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / command).symlink_to(folder / "cli.js")
    return bin_dir


def test_status_names_a_program_older_than_the_tested_version_and_not_a_current_one(relayctl, short_tmp: Path) -> None:
    claude, codex = PROGRAMS["claude"], PROGRAMS["codex"]
    bin_dir = _npm_program(short_tmp / "npm", claude.package, "2.1.197", "claude")
    _npm_program(short_tmp / "npm", codex.package, codex.tested, "codex")
    relayctl.setup("init")
    relayctl.setup("register", name="lead", program="claude-code")
    relayctl.setup("register", name="coder", program="codex")
    relayctl.env = dict(relayctl.env, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    shown = relayctl("status").stdout
    assert f"  warning: claude is 2.1.197, older than the {claude.tested} relay is tested with: npm install -g {claude.package}@{claude.tested}" in shown.splitlines()
    assert "codex is" not in shown
    found = {p["program"]: p for p in json.loads(relayctl("--json", "status").stdout)["programs"]}
    assert found["claude"]["older"] is True and found["codex"] == {"program": "codex", "version": codex.tested, "tested": codex.tested,
                                                                   "package": codex.package, "older": False}
