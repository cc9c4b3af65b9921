"""Drives `stowage serve --stdio` with the official Python MCP client through a blob chain over
two upstreams: `img_generate_image` writes an output slot, `edit_remove_background` (another
upstream) reads it by reference and writes another, `edit_upload_file` gets that one as base64.
Prints one JSON object of observations for tests/chaining_python.rs to check.

Usage: chaining.py MODE -- CMD ARGS...   (MODE: auto | legacy)
"""
import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    mode = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    kwargs = {} if mode == "auto" else {"mode": mode}
    out = {}
    async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:]), **kwargs) as c:
        out["protocol_version"] = c.protocol_version
        tools = {t.name: t for t in (await c.list_tools()).tools}
        out["generate_schema"] = tools["img_generate_image"].input_schema
        gen = await c.call_tool("img_generate_image", {"prompt": "a red square", "result": {"accept": "image/png"}})
        out["generate"] = dump(gen)
        uri = gen.meta["io.stowage/blobs"]["result"]["uri"]
        rb = await c.call_tool("edit_remove_background", {"image": {"uri": uri}, "result": {}})
        out["remove_background"] = dump(rb)
        cleaned = rb.meta["io.stowage/blobs"]["result"]["uri"]
        out["upload"] = dump(await c.call_tool("edit_upload_file", {"content_base64": cleaned}))
        out["missing"] = dump(await c.call_tool("edit_remove_background", {"image": {"uri": "artifact://img_generate_image_00000000deadbeef"}}))
    print(json.dumps(out))


asyncio.run(main())
