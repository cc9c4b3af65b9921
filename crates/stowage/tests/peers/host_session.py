"""Plays an MCP host for one session: starts a server command the way a host's config says
(command, args, env, cwd), with the official Python client (`mcp` 2.3.0), lists its tools,
makes the calls it is given in order, closes the session (which ends the server as a host
does), and prints one JSON object of what it saw for the Rust test to check.

Usage: host_session.py SPEC_JSON
  SPEC_JSON: {"command": str, "args": [str], "env": {str: str}, "cwd": str,
              "calls": [{"tool": str, "arguments": {...}} or {"kill_pid_in": path}]}
  A {"kill_pid_in": path} step kills (SIGKILL) the process whose pid the JSON file at path names
  (a store's links/server.json), waits until it is gone, and records {"killed": pid}.
Output: {"tools": [{"name", "description"}], "calls": [CallToolResult or {"error": {code, message}} or {"killed": pid}]}
"""
import asyncio
import json
import os
import signal
import sys
import time

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import Implementation


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    spec = json.loads(sys.argv[1])
    target = StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"], cwd=spec["cwd"])
    out = {"calls": []}
    # A name no host profile matches: the gateway's default shape.
    async with Client(target, client_info=Implementation(name="stowage-tests", version="1")) as c:
        tools = await c.list_tools()
        out["tools"] = [{"name": t.name, "description": t.description or ""} for t in tools.tools]
        for call in spec.get("calls", []):
            if "kill_pid_in" in call:
                with open(call["kill_pid_in"]) as f:
                    pid = json.load(f)["pid"]
                os.kill(pid, signal.SIGKILL)
                deadline = time.time() + 10
                while time.time() < deadline:
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    # A detached child of a process that is gone: reaped by init.
                    await asyncio.sleep(0.05)
                out["calls"].append({"killed": pid})
                continue
            try:
                out["calls"].append(dump(await c.call_tool(call["tool"], call["arguments"])))
            except MCPError as e:
                # A JSON-RPC error (the SDK raises it): what the host shows its model.
                out["calls"].append({"error": {"code": e.error.code, "message": e.error.message}})
    print(json.dumps(out))


asyncio.run(main())
