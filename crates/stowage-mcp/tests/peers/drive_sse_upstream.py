"""The official Python MCP client (mcp 2.3.0) through a Stowage gateway whose upstream is the
FastMCP server of sse_server.py on the legacy HTTP+SSE transport. Prints one JSON object of
observations for tests/upstream_sse.rs.

Usage: drive_sse_upstream.py GATEWAY_URL
"""
import asyncio
import json
import sys

from mcp import Client
from mcp.types import Implementation


async def main():
    url = sys.argv[1]
    logs, progress = [], []

    async def on_log(params):
        logs.append(str(params.data))

    async def on_progress(value, total, message):
        progress.append([value, total, message])

    out = {}
    # A name no host profile matches: the gateway's default shape (the SDK's own default
    # name, "mcp", picks the `sdk` profile, which turns links into lines).
    client_info = Implementation(name="stowage-tests", version="1")
    async with Client(url, logging_callback=on_log, client_info=client_info) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        echo = await c.call_tool("echo", {"message": "python over sse"})
        out["echo"] = echo.content[0].text
        snap = await c.call_tool("snapshot", {})
        out["snapshot"] = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in snap.content]
        work = await c.call_tool("work", {"tag": "py", "steps": 3}, progress_callback=on_progress)
        out["work"] = work.content[0].text
        await asyncio.sleep(0.2)
    out["logs"], out["progress"] = logs, progress
    print(json.dumps(out))


asyncio.run(main())
