"""The upkeep wing: the store as a whole, and keeping it tidy.

Its modules:
  admin  `init` (with the team presets), `reset` and `version`
  gc     `gc`: expired reservations, stale agents, finished commands, old
         acknowledgements and (with `--keep`) read mail; relayd runs it on a timer

The rule it keeps: it removes only what the owning wing's own terms call finished, decided
with that wing's functions and under its lock (an expired reservation is re-checked under
the reservations lock, so one that replaced it meanwhile stays; a stale agent is archived
by the agents wing's `archive`). It sits above the agents, reservations, team and delivery
wings (and uses the client wing's protocol version); none of them imports it. This
package's own file imports nothing.
"""
