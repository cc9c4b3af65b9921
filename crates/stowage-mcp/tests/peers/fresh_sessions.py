"""N official Python MCP clients at once, each on a fresh session whose first call makes the
server ask it for sampling (and log) on the server's standalone stream. Prints one JSON
object: per client, the call's text (or its error) and the log lines it heard.

Usage: fresh_sessions.py URL N
"""
import asyncio
import json
import sys

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def one(url, i):
    heard = []

    async def sampling(context, params):
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"answer-{i}"), model="m", stop_reason="endTurn"
        )

    async def logging(params):
        heard.append(str(params.data))

    try:
        async with Client(streamable_http_client(url), sampling_callback=sampling, logging_callback=logging, mode="legacy") as c:
            r = await asyncio.wait_for(c.call_tool("ask", {"prompt": f"question-{i}"}), 20)
            text = " ".join(getattr(b, "text", "") for b in r.content)
            await asyncio.sleep(0.2)
    except Exception as e:  # noqa: BLE001
        text = f"error: {type(e).__name__}: {e}"
    return {"text": text, "logs": heard}


async def main():
    url, n = sys.argv[1], int(sys.argv[2])
    print(json.dumps(await asyncio.gather(*(one(url, i) for i in range(n)))))


asyncio.run(main())
