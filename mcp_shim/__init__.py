"""relay-mcp: a hand-written MCP stdio server giving one agent pane the relay tools."""
