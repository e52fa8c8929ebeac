"""relay's shared core: the store, its records and operations, and the wire protocol.

Nothing in this package's top level imports anyio or structlog, so `relayctl` and
`relay-mcp` load it in milliseconds. The asynchronous daemon lives in `relayd.daemon`.
"""

import sys

__version__ = "0.1.0"
# The name pip knows relay by (pyproject.toml [project] name): "relay" on PyPI is an
# unrelated project. The commands keep their names: relayd, relayctl, relay-mcp.
DISTRIBUTION = "relay-bus"
STORE_FORMAT = 1


def load_msgspec() -> None:
    """Import msgspec, without typing_extensions when nothing has loaded that yet: msgspec
    takes two helpers from it when it can (typing has both since 3.11), and importing it
    (with the inspect module it loads) takes 10-14 ms, a fifth of what a command running on
    the store in its own process (relayd down) loads. It stays importable for whoever
    needs it later (anyio, the mcp SDK); a msgspec that cannot do without it is imported
    again with it."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules or sys.version_info < (3, 11):
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # (None: "import fails")
    try:
        # deferred import: what the fast path never loads, for the commands that need it
        import msgspec  # noqa: F401
    except ImportError:
        pass  # (whoever imports it next loads it the usual way, with typing_extensions)
    finally:
        del sys.modules["typing_extensions"]
