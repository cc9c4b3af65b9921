"""Drives `stowage serve --stdio` with the official Python MCP client: a PDF made by one
upstream (src) is passed as its artifact:// URI to tools of another (dst, tiny) that declare
nothing for Stowage. Checks that the catalog the client was given validates (the SDK's own
models for the negotiated protocol, the 2026-07-28 and 2025-11-25 wire models, and each
inputSchema against the JSON Schema draft-07 and 2020-12 meta-schemas), and prints one JSON
object of observations for tests/chaining_auto.rs.

Usage: chaining_auto.py MODE -- CMD ARGS...   (MODE: auto | legacy)
"""
import asyncio
import json
import re
import sys

import jsonschema
from mcp import Client, StdioServerParameters
from mcp_types import _v2025_11_25 as v2025, _v2026_07_28 as v2026


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def check_catalog(tools):
    problems = []
    for t in tools:
        for version, models in (("2026-07-28", v2026), ("2025-11-25", v2025)):
            try:
                models.Tool.model_validate(t)
            except Exception as e:  # noqa: BLE001 - reported to the test
                problems.append(f"{t['name']}: {version}: {e}")
        for validator in (jsonschema.Draft7Validator, jsonschema.Draft202012Validator):
            try:
                validator.check_schema(t["inputSchema"])
            except jsonschema.SchemaError as e:
                problems.append(f"{t['name']}: {validator.__name__}: {e.message}")
    return problems


async def main():
    mode = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    kwargs = {} if mode == "auto" else {"mode": mode}
    out = {}
    async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:]), **kwargs) as c:
        out["protocol_version"] = c.protocol_version
        # Three Python upstreams can take longer to start than the gateway's start-up grace on
        # a busy machine: list again until every one's tools are there, as a host does when
        # told the list changed.
        want = {"src_make_pdf", "dst_upload_file", "tiny_upload_file"}
        for _ in range(150):
            listed = (await c.list_tools()).tools
            if want <= {t.name for t in listed}:
                break
            await asyncio.sleep(0.2)
        tools = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in listed]
        out["tools"] = {t["name"]: t for t in tools}
        out["catalog_problems"] = check_catalog(tools)
        made = dump(await c.call_tool("src_make_pdf", {}))
        out["make_pdf"] = made
        uri = re.search(r"artifact://[A-Za-z0-9_.-]+", json.dumps(made)).group(0)
        out["uri"] = uri
        calls = {
            "upload_file": ("dst_upload_file", {"content_base64": uri}),
            "ocr": ("dst_ocr", {"image": uri}),
            "archive": ("dst_archive", {"blob": uri}),
            "send": ("dst_send", {"to": "ops@example.com", "attachments": [{"content_base64": uri}]}),
            "transcribe": ("dst_transcribe", {"audio_url": uri}),
            "note": ("dst_note", {"title": "t", "content": uri}),
            "too_long": ("dst_stamp", {"pdf_base64": uri}),
            "wrong_type": ("dst_avatar", {"image_base64": uri}),
            "over_body_limit": ("tiny_upload_file", {"content_base64": uri}),
            "missing": ("dst_ocr", {"image": "artifact://src_make_pdf_00000000deadbeef"}),
        }
        for key, (tool, args) in calls.items():
            out[key] = dump(await c.call_tool(tool, args))
    print(json.dumps(out))


asyncio.run(main())
