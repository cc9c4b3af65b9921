"""Opens a 2026-07-28 `subscriptions/listen` stream through `stowage serve` (fronting
@modelcontextprotocol/server-everything) with the official Python MCP client, subscribes to
one resource, turns on the server's simulated updates, and prints one JSON object of what it
saw for the Rust test to check.

Usage: listen_everything.py URL
"""
import asyncio
import json
import sys

import anyio
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated


async def main():
    out = {}
    async with Client(sys.argv[1]) as c:
        out["protocol_version"] = c.protocol_version
        resources = await c.list_resources()
        uri = str(resources.resources[0].uri)
        out["uri"] = uri
        async with c.listen(tools_list_changed=True, resource_subscriptions=[uri]) as sub:
            out["honored"] = sub.honored.model_dump(by_alias=True, mode="json", exclude_none=True)
            await c.call_tool("toggle-subscriber-updates", {})
            with anyio.fail_after(15):
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        out["updated"] = event.uri
                        break
    print(json.dumps(out))


asyncio.run(main())
