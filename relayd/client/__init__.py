"""The client wing: how a program reaches relayd, or waits on the store.

Its modules, lowest first:
  handshake   the greeting a client opens a connection with, and the version check
  peer        whose socket is it: the socket file's owner and the answering process's uid,
              checked before anything is sent (any Unix socket relay connects to)
  connection  the one connection: connect, greet, read lines, request with parts, retry,
              a send's id; and the line framing relayd's side shares (relayd.protocol)
  tail        reading an inbox as it grows: the complete lines appended since the last look
  watch       the one way to wait for a change: relayd's events, else inotify
  full        the full client of relayctl, relay-mcp and the web view: relayd when it
              runs, else the very same operation run on the store in this process

The rule it keeps: `handshake`, `peer` and `connection` use the standard library only, so
relayctl's fast path (`relayctl/fast.py`) and hook answers reach relayd without msgspec or
the store (tests/client/test_startup_imports.py). This package's own file imports nothing:
importing `relayd.client.connection` loads it, and nothing else of the wing.
"""
