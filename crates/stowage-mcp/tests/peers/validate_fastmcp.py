"""Calls the FastMCP shapes server (tests/fixtures/fastmcp_shapes.py) through Stowage with the
official Python client, which validates every result's structuredContent against the tool's
outputSchema (it raises on a mismatch), and prints one JSON object of what it got.

Usage: validate_fastmcp.py URL N
"""
import asyncio
import json
import sys

from mcp import Client


async def main():
    url, n = sys.argv[1], int(sys.argv[2])
    out = {}
    async with Client(url) as c:
        tools = await c.list_tools()
        out["schemas"] = {t.name: t.output_schema for t in tools.tools}
        for tool in ["rows", "table", "report", "closed"]:
            r = await c.call_tool(tool, {"n": n})
            out[tool] = r.model_dump(by_alias=True, mode="json", exclude_none=True)
    print(json.dumps(out))


asyncio.run(main())
