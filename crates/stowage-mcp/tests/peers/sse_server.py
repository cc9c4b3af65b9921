"""A FastMCP 4.1.2 server over the legacy HTTP+SSE transport (2024-11-05), the upstream of
tests/upstream_sse.rs. Usage: sse_server.py PORT"""
import asyncio
import os
import sys

from fastmcp import Context, FastMCP
from fastmcp.utilities.types import Image

mcp = FastMCP("sse-peer")


@mcp.tool
def echo(message: str) -> str:
    """Returns the message."""
    return message


@mcp.tool
def snapshot() -> Image:
    """A 20 KB PNG: over the inline threshold, so the gateway offloads it."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + os.urandom(20_000), format="png")


@mcp.tool
def big_text(size: int) -> str:
    """`size` bytes of text in one result."""
    return "x" * size


@mcp.tool
async def work(tag: str, steps: int, ctx: Context) -> str:
    """Reports progress and logs a line per step, each naming `tag`."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"{tag} step {i + 1}")
        await ctx.info(f"{tag} log {i + 1}")
        await asyncio.sleep(0.05)
    return f"{tag} done"


@mcp.tool
async def sleep(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return "slept"


@mcp.tool
def whoami(ctx: Context) -> str:
    """The id of the MCP session this call came on."""
    return ctx.session_id


mcp.run(transport="sse", host="127.0.0.1", port=int(sys.argv[1]), show_banner=False)
