"""Calls the hosts fixture's tools through the gateway as one named host (its clientInfo.name),
in one protocol era, with the official Python client (which checks each structuredContent
against the tool's outputSchema), and prints what came back as JSON for tests/hosts.rs.

Usage: hosts_client.py CLIENT_NAME (legacy|modern) TOOLS URL
       hosts_client.py CLIENT_NAME (legacy|modern) TOOLS -- CMD ARGS...   (stdio)

TOOLS is a comma-separated list of tools to call with no arguments, or @FILE: a JSON list of
artifact_read arguments, answered under "reads".
"""
import asyncio
import json
import re
import sys

from mcp import Client, StdioServerParameters
from mcp.types import Implementation


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main():
    name, era, tools = sys.argv[1], sys.argv[2], sys.argv[3]
    rest = sys.argv[4:]
    target = StdioServerParameters(command=rest[1], args=rest[2:]) if rest[0] == "--" else rest[0]
    kwargs = {"client_info": Implementation(name=name, version="1.0.0")}
    if era == "legacy":
        kwargs["mode"] = "legacy"
    out = {}
    async with Client(target, **kwargs) as c:
        if tools.startswith("@"):
            with open(tools[1:]) as f:
                reads = json.load(f)
            out["reads"] = [dump(await c.call_tool("artifact_read", args)) for args in reads]
            print(json.dumps(out))
            return
        for tool in tools.split(","):
            out[tool] = dump(await c.call_tool(tool, {}))
        # Zoom into the screenshot and read page 2 of the report's PDF, by reference.
        shot = re.search(r"artifact://screenshot_[A-Za-z0-9_.-]+", json.dumps(out.get("screenshot", "")))
        if shot:
            uri = shot.group(0)
            region = {"x": 400, "y": 300, "width": 320, "height": 240}
            out["region"] = dump(await c.call_tool("artifact_read", {"id": uri, "region": region}))
            out["whole"] = dump(await c.call_tool("artifact_read", {"id": uri, "max_edge": 400}))
        report = re.search(r"artifact://report_[A-Za-z0-9_.-]+", json.dumps(out.get("report", "")))
        if report:
            uri = report.group(0)
            out["page2"] = dump(await c.call_tool("artifact_read", {"id": uri, "pages": "2"}))
    print(json.dumps(out))


asyncio.run(main())
