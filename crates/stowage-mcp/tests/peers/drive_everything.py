"""Drives `stowage serve` (fronting @modelcontextprotocol/server-everything) with the official
Python MCP client and prints one JSON object of observations for the Rust test to check.

Usage: drive_everything.py URL [auto|legacy]
       drive_everything.py --stdio [auto|legacy] -- CMD ARGS...
"""
import asyncio
import json
import sys

from mcp import Client, StdioServerParameters
from mcp.types import Implementation


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    args = sys.argv[1:]
    if args[0] == "--stdio":
        mode = args[1]
        cmd = args[args.index("--") + 1 :]
        target = StdioServerParameters(command=cmd[0], args=cmd[1:])
    else:
        target, mode = args[0], args[1]
    kwargs = {} if mode == "auto" else {"mode": mode}
    # A name no host profile matches: these tests check the gateway's default shape (the SDK's
    # own default name, "mcp", picks the `sdk` profile, which turns links into lines).
    kwargs["client_info"] = Implementation(name="stowage-tests", version="1")
    out = {}
    async with Client(target, **kwargs) as c:
        out["protocol_version"] = c.protocol_version
        tools = await c.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        echo = await c.call_tool("echo", {"message": "hello from python"})
        out["echo"] = dump(echo)
        out["tiny_image"] = dump(await c.call_tool("get-tiny-image", {}))
        out["resource_reference"] = dump(await c.call_tool("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}))
        out["resource_links"] = dump(await c.call_tool("get-resource-links", {"count": 3}))
        out["structured"] = dump(await c.call_tool("get-structured-content", {"location": "Chicago"}))
        prompts = await c.list_prompts()
        out["prompts"] = sorted(p.name for p in prompts.prompts)
        out["simple_prompt"] = dump(await c.get_prompt("simple-prompt", {}))
    print(json.dumps(out))


asyncio.run(main())
