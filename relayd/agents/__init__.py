"""The agents wing: who is on the team, and who of it is alive.

Its modules, lowest first:
  presence  heartbeat files: the one place that writes and reads `agents/<name>/heartbeat`
            (no msgspec, no store handle: relay-mcp marks its role present with it at once)
  roster    the `register`, `heartbeat`, `set_status`, `agents` and `touch` operations: an
            agent's identity, its status, and who is alive

The rule it keeps: an agent's files (`agents/<name>/meta.json`, `heartbeat`) are written
here and nowhere else. It builds on the shared core only; the inbox, delivery, arrival and
team wings read an agent through it. This package's own file imports nothing, so loading
one module of it loads only what that module needs.
"""
