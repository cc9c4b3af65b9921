"""Plays an MCP host: starts a server command the way a host's config says, with the official
Python client (`mcp` 2.3.0), lists its tools, calls one, and prints one JSON object of what it
saw for the Rust test to check.

Usage: host_client.py SPEC_JSON
  SPEC_JSON: {"command": str, "args": [str], "env": {str: str}, "cwd": str,
              "tool": str, "arguments": {...}}
"""
import asyncio
import json
import sys

from mcp import Client, StdioServerParameters
from mcp.types import Implementation


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    spec = json.loads(sys.argv[1])
    target = StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"], cwd=spec["cwd"])
    out = {}
    # A name no host profile matches: these tests check the gateway's default shape (the SDK's
    # own default name, "mcp", picks the `sdk` profile, which turns links into lines).
    async with Client(target, client_info=Implementation(name="stowage-tests", version="1")) as c:
        out["protocol_version"] = c.protocol_version
        tools = await c.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["result"] = dump(await c.call_tool(spec["tool"], spec["arguments"]))
    print(json.dumps(out))


asyncio.run(main())
