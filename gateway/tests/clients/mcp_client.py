"""Drives the gateway's MCP endpoint with the reference Python SDK client (`mcp` on
PyPI), so the endpoint is checked against a client that is not this project's code.

    mcp_client.py URL MODE [--token T] list
    mcp_client.py URL MODE [--token T] call TOOL ARGUMENTS_JSON

MODE is the client's connect mode: `auto` (probe `server/discover`, fall back to the
initialize handshake) or `legacy` (the initialize handshake). Prints one JSON line:
the protocol version and the tools, or the call's result.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(argv: list[str]) -> None:
    url, mode, rest = argv[0], argv[1], argv[2:]
    headers = {}
    if rest[:1] == ["--token"]:
        headers["Authorization"] = f"Bearer {rest[1]}"
        rest = rest[2:]
    http = create_mcp_http_client(headers=headers)
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode=mode) as client:
        version = client.session.protocol_version
        if rest[0] == "list":
            listed = await client.list_tools()
            tools = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools]
            print(json.dumps({"protocol_version": version, "tools": tools}))
        elif rest[0] == "call":
            result = await client.call_tool(rest[1], json.loads(rest[2]))
            print(json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True)))
        else:
            sys.exit(f"unknown command {rest[0]!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
