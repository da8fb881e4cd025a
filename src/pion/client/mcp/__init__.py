"""``pion mcp``: an MCP server (official Python SDK, 2.x or 1.x) whose memory lives in Pion.

A client of Pion like any other (it never imports the server side): ``sdk`` hides the SDK's major
version, ``graph`` is the official memory server's knowledge graph with semantic search,
``longterm`` is agent-memory-server's long-term and working memory, ``server`` registers the
tools. The SDK is imported only when a server is built (the ``[mcp]`` extra).
"""
