"""Butler's edges: carriers other than its HTTP port (A2A JSON-RPC on stdio, MCP)."""
