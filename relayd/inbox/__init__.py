"""The inbox wing: storing a message in an agent's inbox and reading it back.

An inbox is `agents/<name>/inbox.jsonl`, one message per line, with a read cursor. Its
modules, lowest first:
  hooks   what the inbox tells the delivery wing above it (filled by relayd.delivery)
  cursor  the read cursor, and the inbox files opened together with it
  append  `deliver`: every writer appends and emits its arrival under the inbox lock;
          rotation
  read    the `read` and `unread` operations, and the scans the delivery wing uses
  send    the `send` operation: checking a send and planning its appends
  search  search over every message in the store (`relayctl search`, the web view)

The rule it keeps: no line is kept without its arrival event, written while its inbox is
locked (`append.Appends.commit`). This package's own file imports nothing, so loading one
module of it loads only what that module needs.
"""
