"""At most a few real agent programs start at once across all test workers.

Each of Claude Code, Codex, Gemini CLI, OpenCode and Copilot CLI loads 100-200 MB of
JavaScript or a large binary when it starts; with four workers on two cores, four of them
starting together took longer than any wait a user would accept, and the tests that waited
for a program's first hook timed out while each passed alone. A test marked `real_program`
holds one of `SLOTS` lock files (fcntl, so a killed worker frees its slot) for its whole run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

SLOTS = int(os.environ.get("RELAY_TEST_PROGRAM_SLOTS", "2"))
SLOT_DIR = Path(tempfile.gettempdir()) / f"relay-test-program-slots-{os.getuid()}"


@contextlib.contextmanager
def program_slot() -> Iterator[int]:
    """Waits for a free slot and holds it; yields its number."""
    SLOT_DIR.mkdir(mode=0o700, exist_ok=True)
    handles = [open(SLOT_DIR / f"slot-{n}.lock", "a+") for n in range(SLOTS)]
    try:
        while True:
            for n, handle in enumerate(handles):
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield n
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
                return
            time.sleep(0.2)
    finally:
        for handle in handles:
            handle.close()
