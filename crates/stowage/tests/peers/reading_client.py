"""Walks the reading loop through the gateway as one named host (its clientInfo.name), in one
protocol era, with the official Python client (which checks each structuredContent against the
tool's outputSchema, where one is declared), following each answer as the model reads it (the
header line says where the next page starts), and prints what came back as JSON for
tests/reading_loop.rs.

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
    """The page a reader answer gives, as the model reads it: in content after the header line,
    for every host (hosts that would show structuredContent instead get none; the others get
    the facts there, never the page a second time)."""
    sc = result.structured_content
    if sc is not None:
        assert sc.get("in") == "content", f"facts without in=content: {sc}"
        assert "text" not in sc and "result" not in sc and "matches" not in sc, f"the page is written twice: {sc}"
    return result.content[1].text if len(result.content) > 1 else ""


def header(result):
    return result.content[0].text


def next_offset(result):
    """Where the next page starts, as the header line tells the model (`more: artifact_read
    offset=N`); the structured facts, where the host gets them, agree."""
    m = re.search(r"more: artifact_read offset=(\d+)", header(result))
    n = int(m.group(1)) if m else None
    if result.structured_content is not None:
        assert result.structured_content.get("nextOffset") == n, (header(result), result.structured_content)
    return n


def next_pages(result):
    """A PDF answer's continuation from its header (`more: pages="R" offset=N`, or `more:
    pages="R"`)."""
    m = re.search(r'more: pages="([^"]+)"(?: offset=(\d+))?', header(result))
    if not m:
        return None
    return {"pages": m.group(1), "offset": int(m.group(2) or 0)}


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
            nxt = next_offset(page)
            if nxt is None:
                break
            assert nxt == offset + len(payload(page)), "the next offset is the first character not given"
            offset = nxt
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
            nxt = next_pages(page)
            if not nxt:
                break
            args = {"id": pdf_id, "pages": nxt["pages"], "offset": nxt["offset"]}
        out["pages"]["pdf"] = answers
        out["pdf_texts"] = texts
    print(json.dumps(out))


asyncio.run(main())
