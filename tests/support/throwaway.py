"""relay installed into a venv of its own, which a test then deletes: relay removed as a
person removes it (the venv or the clone gone), to show what relay left behind still works."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from .paths import ROOT


def throwaway_install(root: Path) -> Path:
    """relay installed as `pip install .` would into a venv of its own at `root` (its packages
    copied into the venv's site-packages; the dependencies from this venv through a .pth
    line): the venv's python, which a test deletes afterwards."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    source = ROOT
    for package in ("relayd", "relayctl"):
        shutil.copytree(source / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "relay-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python
