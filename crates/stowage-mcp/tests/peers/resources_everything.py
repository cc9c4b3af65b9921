"""Reads @modelcontextprotocol/server-everything's resources through `stowage serve` with the
official Python MCP client (2026-07-28): lists and templates, text and blob reads, a read
answered from the gateway's cache, and the read after a subscribed update (which must reach
the server again). Prints one JSON object of what it saw for the Rust test to check.

Usage: resources_everything.py URL
"""
import asyncio
import json
import sys

import anyio
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated

TEXT = "demo://resource/dynamic/text/1"
BLOB = "demo://resource/dynamic/blob/1"


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    out = {}
    async with Client(sys.argv[1]) as c:
        out["protocol_version"] = c.protocol_version
        listed = await c.list_resources()
        out["uris"] = [str(r.uri) for r in listed.resources]
        templates = await c.list_resource_templates()
        out["templates"] = [t.uri_template for t in templates.resource_templates]
        out["text"] = dump(await c.read_resource(TEXT))
        out["blob"] = dump(await c.read_resource(BLOB))
        out["docs"] = {}
        for uri in out["uris"]:
            if uri.startswith("demo://resource/static/document/"):
                out["docs"][uri] = dump(await c.read_resource(uri))
        out["text_again"] = dump(await c.read_resource(TEXT))
        async with c.listen(resource_subscriptions=[TEXT]) as sub:
            # The server's text carries the time to the second: let it move on.
            await asyncio.sleep(1.2)
            await c.call_tool("toggle-subscriber-updates", {})
            with anyio.fail_after(15):
                async for event in sub:
                    if isinstance(event, ResourceUpdated) and event.uri == TEXT:
                        out["updated"] = event.uri
                        break
            await c.call_tool("toggle-subscriber-updates", {})
        out["text_after_update"] = dump(await c.read_resource(TEXT))
    print(json.dumps(out))


asyncio.run(main())
