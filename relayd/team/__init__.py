"""The team wing: what orchestrating a team of agents needs beyond mail.

Its modules, lowest first:
  prompt    the short instructions an agent needs to work in a relay team, defined once
  openclaw  finding the OpenClaw gateway when config.json names none
  commands  slash commands: `commands/<ulid>.json`, pending -> consumed -> done
  wake      waking the orchestrator: gateway command, gateway socket, file trigger

The rule it keeps: a slash command is consumed by exactly one consumer (an O_EXCL claim
before the atomic rewrite), and a wake that no gateway took is never lost: the file layer,
a store operation, always works while the store is writable. It builds on the shared core
only; of the other wings only upkeep imports it (`gc` removes finished commands), and
`status` (relayd.overview) shows pending commands. This package's own file imports
nothing, so relay-mcp loads `prompt` alone at start-up.
"""
