"""Walks the reading loop through the gateway as one named host (its clientInfo.name), in one
protocol era, with the official Python client (which checks each structuredContent against the
tool's outputSchema), and prints what came back as JSON for tests/reading_loop.rs.

The loop: FastMCP texts of 24, 26, 32 and 120 KB; a 2 MB CSV read back page by page with
artifact_read; artifact_query on 15,000 structured rows; a 39 KB error trace; twelve
screenshots in one result; a PDF whose page 5 is longer than a page, read on from where each
answer stopped. Whether the pages put back together are the original text is checked here,
against the fixture's own functions (imported from its file).

Usage: reading_client.py CLIENT_NAME (legacy|modern) FIXTURE_PY URL
       reading_client.py CLIENT_NAME (legacy|modern) FIXTURE_PY -- CMD ARGS...   (stdio)
"""
import asyncio
import importlib.util
import json
import re
import sys

from mcp import Client, StdioServerParameters
from mcp.types import Implementation


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def artifact_of(result, prefix):
    m = re.search(r"artifact://" + prefix + r"_[A-Za-z0-9_.-]+", json.dumps(dump(result)))
    assert m, f"no artifact://{prefix}_… in {dump(result)}"
    return m.group(0)


def payload(result):
    """The page a reader answer gives: in structuredContent for a host that reads only that,
    else in content after the header line (and then not repeated in structuredContent)."""
    sc = result.structured_content or {}
    if sc.get("in") == "content":
        assert "text" not in sc and "result" not in sc and "pages" not in sc, f"the page is written twice: {sc}"
        return result.content[1].text if len(result.content) > 1 else ""
    for key in ("text", "result", "pages"):
        if key in sc:
            v = sc[key]
            if key == "pages":
                return "".join(f"--- page {p['page']}{' from character ' + str(p['from']) if p.get('from') else ''} ---\n{p['text']}" for p in v)
            return v if isinstance(v, str) else json.dumps(v)
    raise AssertionError(f"no page in {dump(result)}")


async def main():
    name, era, fixture_py = sys.argv[1], sys.argv[2], sys.argv[3]
    rest = sys.argv[4:]
    spec = importlib.util.spec_from_file_location("reading_fixture", fixture_py)
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    target = StdioServerParameters(command=rest[1], args=rest[2:]) if rest[0] == "--" else rest[0]
    kwargs = {"client_info": Implementation(name=name, version="1.0.0")}
    if era == "legacy":
        kwargs["mode"] = "legacy"
    out = {"answers": {}, "pages": {}}
    async with Client(target, **kwargs) as c:
        for kb in (24, 26, 32, 120):
            r = await c.call_tool("text", {"kb": kb})
            out["answers"][f"text{kb}"] = dump(r)
            out[f"text{kb}_whole"] = fixture.prose(kb)

        # The CSV: offloaded, then read back a page at a time from where each page stopped.
        r = await c.call_tool("export_csv", {})
        out["answers"]["export_csv"] = dump(r)
        csv_id = artifact_of(r, "export_csv")
        got, offset, answers = "", 0, []
        for _ in range(2000):
            page = await c.call_tool("artifact_read", {"id": csv_id, "offset": offset})
            assert not page.is_error, dump(page)
            answers.append(dump(page))
            got += payload(page)
            sc = page.structured_content
            if "nextOffset" not in sc:
                break
            assert sc["nextOffset"] == offset + len(payload(page)), "nextOffset is the first character not given"
            offset = sc["nextOffset"]
        out["pages"]["csv"] = answers
        out["csv_whole"] = got == fixture.csv_text()
        out["csv_pages"] = len(answers)

        # 15,000 structured rows: the artifact is the whole object, queried as the tool shaped it.
        r = await c.call_tool("rows", {"n": 15000})
        out["answers"]["rows"] = dump(r)
        rows_id = artifact_of(r, "rows")
        q = await c.call_tool("artifact_query", {"id": rows_id, "jmespath": "length(result)"})
        out["rows_length"] = json.loads(payload(q))
        q = await c.call_tool("artifact_query", {"id": rows_id, "jmespath": "result[?total > `29990`].id"})
        out["rows_filter"] = json.loads(payload(q))
        out["answers"]["query"] = dump(q)

        r = await c.call_tool("crash", {})
        out["answers"]["crash"] = dump(r)

        r = await c.call_tool("screenshots", {})
        out["answers"]["screenshots"] = dump(r)

        # The PDF: page 5 read on from where each answer stopped.
        r = await c.call_tool("report_pdf", {})
        out["answers"]["report_pdf"] = dump(r)
        pdf_id = artifact_of(r, "report_pdf")
        args, answers, texts = {"id": pdf_id, "pages": "5"}, [], []
        for _ in range(100):
            page = await c.call_tool("artifact_read", args)
            assert not page.is_error, dump(page)
            answers.append(dump(page))
            texts.append(payload(page))
            nxt = (page.structured_content or {}).get("next")
            if not nxt:
                break
            args = {"id": pdf_id, "pages": nxt["pages"], "offset": nxt["offset"]}
        out["pages"]["pdf"] = answers
        out["pdf_texts"] = texts
    print(json.dumps(out))


asyncio.run(main())
