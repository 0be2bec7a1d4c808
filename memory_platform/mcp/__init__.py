"""The platform as an MCP server: five tools an agent calls (``tools``), over stdio
(``manage.py mcp``) and over streamable HTTP at ``/mcp`` on the web server (``endpoint``).

Every tool is one or two calls of the REST API, made in process through Django's own request
handler (``dispatch``): the key, its tenant and scopes, validation, rate limits, metrics and
errors are the API's, with nothing decided twice. The key comes from the transport (the
``Authorization`` header, or ``MEMORY_API_KEY`` for stdio), never from a tool's arguments.
"""
