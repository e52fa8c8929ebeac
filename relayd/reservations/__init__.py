"""The reservations wing: which agent holds which files, and the guard's view of it.

Its modules, lowest first:
  globs        glob patterns as automata, and an exact answer to "can one path match both?"
  guard_index  the reservations the pre-commit guard checks one repository against, and
               their per-repository index (only a cache)
  reserve      the `reserve`, `release` and `reservations` operations

The rule it keeps: two reservations conflict exactly when some path matches both patterns
(never a guess from their text), and the check and the create happen under one store-wide
lock, so two overlapping reserves cannot both win; the guard's index never changes an
answer. The pre-commit guard itself, `relayd/guard.py`, stays at the top of `relayd/`:
hooks already installed in users' repositories run it by that path and module name.
This package's own file imports nothing, so the hook loads only the modules it uses.
"""
