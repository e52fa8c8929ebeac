"""The client wing: how a program reaches relayd's store, or waits on it, above the one
connection of the wire wing (relayd.wire).

Its modules, lowest first:
  tail        reading an inbox as it grows: the complete lines appended since the last look
  watch       the one way to wait for a change: relayd's events, else inotify
  full        the full client of relayctl, relay-mcp and the web view: relayd when it
              runs, else the very same operation run on the store in this process

The rule it keeps: a client that finds no relayd runs the very same operation on the
store, with the same results. This package's own file imports nothing.
"""
