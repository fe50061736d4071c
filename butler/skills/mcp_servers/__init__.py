"""MCP servers as skill providers: each tool of a server is a skill. Imported only when a
config has an ``mcp`` skill: the SDK is an optional extra."""

from butler.skills.mcp_servers.supervisor import McpServer, start_servers, stop_servers

__all__ = ["McpServer", "start_servers", "stop_servers"]
