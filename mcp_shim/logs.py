"""Log lines on stderr (stdout belongs to MCP). The logging package is left out on purpose:
it costs relay-mcp start-up time and memory for two kinds of line."""

from __future__ import annotations

import os
import sys

DEBUG = bool(os.environ.get("RELAY_DEBUG"))


def info(text: str) -> None:
    try:
        sys.stderr.write(f"relay-mcp: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # nowhere to log to: not a reason to stop serving


def debug(text: str) -> None:
    if DEBUG:
        info(text)
