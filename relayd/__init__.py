"""relay's shared core: the store, its records and operations, and the wire protocol.

Nothing in this package's top level imports anyio or structlog, so `relayctl` and
`relay-mcp` load it in milliseconds. The asynchronous daemon lives in `relayd.daemon`.
"""

__version__ = "0.1.0"
# The name pip knows relay by (pyproject.toml [project] name): "relay" on PyPI is an
# unrelated project. The commands keep their names: relayd, relayctl, relay-mcp.
DISTRIBUTION = "relay-bus"
STORE_FORMAT = 1
