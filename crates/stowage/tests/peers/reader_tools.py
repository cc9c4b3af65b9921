"""Drives `stowage serve --stdio` with the official Python MCP client through the gateway's
reader tools, and prints one JSON object of observations for tests/reader_tools.rs to check.

The client checks every structuredContent against the outputSchema it listed, so a result or
an error that broke its tool's schema makes this script fail.

Usage: READER_TEXT=... reader_tools.py -- CMD ARGS...
"""
import asyncio
import json
import os
import re
import sys

from mcp import Client, StdioServerParameters


def text_of(result):
    return "".join(getattr(b, "text", "") for b in result.content)


def payload(result):
    """What a reader answer gives the model: in content after the header line for a client
    that reads content (the SDK's default name picks such a profile), not repeated in
    structuredContent."""
    assert "text" not in result.structured_content and "result" not in result.structured_content, result
    assert result.structured_content.get("in") == "content", result.structured_content
    return result.content[1].text if len(result.content) > 1 else ""


def matches(result):
    out = []
    for line in payload(result).splitlines():
        at, text = line.split(": ", 1)
        number, offset = at.split("@")
        out.append({"line": int(number), "offset": int(offset), "text": text})
    return out


def error(result):
    return {"is_error": bool(result.is_error), "structured": result.structured_content, "text": text_of(result)}


async def main():
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    text = os.environ["READER_TEXT"]
    out = {}
    async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as c:
        tools = await c.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        echoed = await c.call_tool("echo", {"message": text})
        out["stub"] = text_of(echoed)
        ident = re.search(r"artifact://([A-Za-z0-9_.-]+)", json.dumps(echoed.model_dump(mode="json"))).group(1)
        paged, offset, pages = "", 0, 0
        while True:
            r = await c.call_tool("artifact_read", {"id": ident, "offset": offset})
            assert not r.is_error, text_of(r)
            pages += 1
            paged += payload(r)
            if "nextOffset" not in r.structured_content:
                break
            offset = r.structured_content["nextOffset"]
        out["paged"], out["pages"] = paged, pages
        r = await c.call_tool("artifact_read", {"id": ident, "grep": "^last line"})
        out["grep"] = matches(r)
        rows = [{"id": i, "total": i * 3} for i in range(3000)]
        js = await c.call_tool("echo", {"message": json.dumps({"rows": rows})})
        json_id = re.search(r"artifact://([A-Za-z0-9_.-]+)", json.dumps(js.model_dump(mode="json"))).group(1)
        q = await c.call_tool("artifact_query", {"id": json_id, "jmespath": "[1].total"})
        out["query"] = json.loads(payload(q))
        report = await c.call_tool("get_report", {})
        pdf_id = re.search(r"artifact://([A-Za-z0-9_.-]+)", json.dumps(report.model_dump(mode="json"))).group(1)
        out["errors"] = {
            "unknown": error(await c.call_tool("artifact_read", {"id": "echo_0000000000000000"})),
            "bad_regex": error(await c.call_tool("artifact_read", {"id": ident, "grep": "(x"})),
            "binary": error(await c.call_tool("artifact_query", {"id": pdf_id, "pointer": ""})),
            "url_unknown": error(await c.call_tool("artifact_url", {"id": "echo_0000000000000000"})),
        }
    print(json.dumps(out))


asyncio.run(main())
