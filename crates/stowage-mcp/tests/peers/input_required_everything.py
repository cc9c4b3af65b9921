"""Calls server-everything's sampling and elicitation tools through `stowage serve` with the
official Python MCP client speaking 2026-07-28, where a server asks for input by returning
`input_required` rather than by sending requests. Prints one JSON object for the Rust test.

Usage: input_required_everything.py URL
       input_required_everything.py --stdio -- CMD ARGS...
"""
import asyncio
import json
import sys

import mcp_types as types
from mcp import Client, StdioServerParameters

asked = {}


async def sampling(context, params):
    asked["sampling"] = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="stowage-sampled-reply"),
        model="test-model",
        stop_reason="endTurn",
    )


async def elicitation(context, params):
    asked["elicitation"] = params.message
    return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})


def text(result):
    return " ".join(b.text for b in result.content if getattr(b, "type", "") == "text")


async def main():
    out = {}
    args = sys.argv[1:]
    if args[0] == "--stdio":
        cmd = args[args.index("--") + 1 :]
        target = StdioServerParameters(command=cmd[0], args=cmd[1:])
    else:
        target = args[0]
    async with Client(target, sampling_callback=sampling, elicitation_callback=elicitation) as c:
        out["protocol_version"] = c.protocol_version
        out["sampling_result"] = text(await c.call_tool("trigger-sampling-request", {"prompt": "say hi"}))
        out["elicitation_result"] = text(await c.call_tool("trigger-elicitation-request", {}))
    out["asked"] = asked
    print(json.dumps(out))


asyncio.run(main())
