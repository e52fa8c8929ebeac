"""The arrival wing: how an agent's program learns that mail came, and whether it may be told now.

  notify          the pane triggers (tmux, zellij) and the cmd trigger, typed only into a program at its prompt
  paneinput       reading a pane's screen: a person's draft, a question on screen
  program_state   what each agent's program is doing, from its hooks (the `program_state` operation)
  program_events  which state each hook event means (loaded alone by `relayctl hook`)
  for_models      mail as a model reads it (hooks, relay-mcp, a program's inbox), and the
                  one escaping of one-line fields (imports nothing: relayctl loads it alone)

It sits above the inbox and delivery wings: a trigger's outcome is reported to
relayd.delivery.receipts; nothing below imports this wing. Kept empty of imports: the
hook's fast path loads program_events through it.
"""
