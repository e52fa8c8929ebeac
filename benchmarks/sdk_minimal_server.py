"""Reference point for bench_mcp: the smallest useful MCP stdio server on the official SDK
(one tool), started the same way relay-mcp is."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk-minimal")


@server.tool()
def send_message(to: str, subject: str, body: str) -> str:
    """Send a message to another agent."""
    return f"sent to {to}"


if __name__ == "__main__":
    server.run("stdio")
