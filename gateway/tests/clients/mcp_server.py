"""An MCP server built with the reference Python SDK (`mcp` on PyPI), for the tests
that connect the gateway's MCP tool sources to a server that is not this project's
code.

    mcp_server.py stdio          speaks MCP on stdin/stdout
    mcp_server.py http           streamable HTTP on 127.0.0.1, a free port; prints
                                 `listening <port>` on stdout once it accepts

Tools: `add`, `echo`, `fail` (an error result), `sleep`, `exit` (the process ends
without answering), `idempotency_key` (the key the call carried in `_meta`),
`traceparent` (the trace context it carried there), and `calls` (how many calls this process has answered before,
so a test can tell whether a call reached it).
"""

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("awaken-test-tools", log_level="WARNING")
answered = 0


def count() -> None:
    global answered
    answered += 1


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> int:
    count()
    return a + b


@server.tool(description="Returns the text it was given.")
def echo(text: str) -> str:
    count()
    return text


@server.tool(description="Always fails with the given reason.")
def fail(reason: str) -> str:
    count()
    raise ToolError(reason)


@server.tool(description="Waits for the given number of milliseconds.")
async def sleep(ms: int) -> str:
    count()
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} ms"


@server.tool(description="Ends this server's process without answering.")
def exit() -> str:
    os._exit(0)


def meta_field(ctx: Context, key: str) -> str:
    """The text under `key` in the call's `_meta`, or "" without one."""
    meta = ctx.request_context.meta
    if meta is None:
        return ""
    fields = meta if isinstance(meta, dict) else meta.model_dump(by_alias=True)
    return str(fields.get(key, ""))


@server.tool(description="Returns the idempotency key the call carried in `_meta`.")
def idempotency_key(ctx: Context) -> str:
    return meta_field(ctx, "io.awaken/idempotency-key")


@server.tool(description="Returns the W3C trace context the call carried in `_meta`.")
def traceparent(ctx: Context) -> str:
    return meta_field(ctx, "traceparent")


@server.tool(name="calls", description="How many calls this server answered before.")
def calls() -> int:
    return answered


def serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    http = uvicorn.Server(config)
    print(f"listening {port}", flush=True)
    asyncio.run(http.serve(sockets=[sock]))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        serve_http()
    else:
        sys.exit(f"unknown mode {mode!r}: use stdio or http")
