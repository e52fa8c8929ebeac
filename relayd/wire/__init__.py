"""The wire wing: relay's Unix-socket protocol as a client speaks it, below every other wing.

Its modules, lowest first:
  handshake   the greeting a client opens a connection with, and the version check
  peer        whose socket is it: the socket file's owner and the answering process's uid,
              checked before anything is sent (any Unix socket relay connects to: relayd's,
              the wake gateway's, Claude Code's inbox)
  connection  the one connection: connect, greet, read lines, request with parts, pipeline,
              retry, a send's id; and the line framing relayd's side shares (relayd.protocol)

The rule it keeps: the standard library only (and the shared core's stdlib-only modules), so
relayctl's fast path (`relayctl/fast.py`) and hook answers reach relayd without msgspec or
the store (tests/client/test_startup_imports.py), and every wing above may use it. This
package's own file imports nothing: importing `relayd.wire.connection` loads it, and
nothing else of the wing.
"""
