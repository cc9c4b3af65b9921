"""Checks Stowage's MCP Apps surface (io.modelcontextprotocol/ui) over streamable HTTP with the
official Python MCP client (`mcp` 2.3.0) against a running `stowage serve`.

A client that declares the extension (capabilities.extensions["io.modelcontextprotocol/ui"] =
{"mimeTypes": ["text/html;profile=mcp-app"]}, through `Client(extensions=[advertise(...)])`) sees
the six tools with their _meta, the extension in the server's capabilities (initialize result, and
server/discover where the client negotiates 2026-07-28), the view in resources/list and
resources/read with its mime type and _meta.ui. A client without it sees none of that and cannot
call the tools or read the view. artifact_fetch chunks reassemble to the image's sha256 (and a read
past the end is empty with eof); a 3 MB random file uploaded with begin/chunk/commit hashes to the
file when fetched back; bad uploads (wrong sha256, a gap, an overlap, too much data, a commit before
all bytes, an unknown handle, a size over the limit) are refused and leave nothing behind in
artifact_list.

Usage: apps_protocol.py CONFIG.json
CONFIG: {"mcp": "http://127.0.0.1:PORT/mcp", "out": dir,
         "artifact_ids": {"image": id, "pdf": id, "csv": id}, "image_sha256": hex}
Prints ONE JSON line: {"ok": true, ...observations} or {"ok": false, "error": "..."} (exit 1).
"""
import asyncio
import base64
import hashlib
import json
import os
import sys
import traceback
from pathlib import Path

from mcp import Client
from mcp.client import advertise

EXT = "io.modelcontextprotocol/ui"
APP_MIME = "text/html;profile=mcp-app"
VIEW_URI = "ui://stowage/viewer"
MODEL_TOOL = "artifact_view"
APP_TOOLS = ["artifact_fetch", "artifact_upload_begin", "artifact_upload_chunk", "artifact_upload_commit", "artifact_viewer_asset"]
ALL_TOOLS = [MODEL_TOOL, *APP_TOOLS]
CHUNK = 1024 * 1024  # artifact_upload_chunk's limit
FETCH = 512 * 1024  # artifact_fetch's cap: a result stays under hosts' 1 MB limits
UPLOAD_BYTES = 3 * 1000 * 1000


class CheckFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def text_of(result):
    return "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def apps_client(url, **kwargs):
    return Client(url, extensions=[advertise(EXT, {"mimeTypes": [APP_MIME]})], **kwargs)


def extensions_of(client):
    caps = client.server_capabilities
    return dict(getattr(caps, "extensions", None) or {})


async def call(c, name, args):
    return dump(await c.call_tool(name, args))


async def refused(c, name, args, what):
    """A call that must fail: a tool error (isError) or a JSON-RPC error. Returns its message."""
    try:
        r = await call(c, name, args)
    except Exception as e:  # noqa: BLE001 — a JSON-RPC error is a refusal too
        return f"error: {e}"
    check(r.get("isError") is True, f"{what}: {name} was not refused: {json.dumps(r)[:400]}")
    msg = text_of(r)
    check(msg.strip(), f"{what}: {name} was refused without a message")
    return msg


async def listed_uris(c):
    uris, cursor = [], None
    for _ in range(1000):
        r = await call(c, "artifact_list", {"cursor": cursor} if cursor else {})
        check(not r.get("isError"), f"artifact_list failed: {text_of(r)}")
        sc = r.get("structuredContent") or {}
        uris += [a.get("uri") for a in sc.get("artifacts", [])]
        cursor = sc.get("nextCursor")
        if not cursor:
            return uris
    raise CheckFailed("artifact_list never ended")


async def fetch_all(c, art_id, length=FETCH):
    data = bytearray()
    total = None
    for _ in range(100_000):
        r = await call(c, "artifact_fetch", {"id": art_id, "offset": len(data), "length": length})
        check(not r.get("isError"), f"artifact_fetch {art_id} at {len(data)} failed: {text_of(r)}")
        sc = r["structuredContent"]
        check(sc["offset"] == len(data), f"artifact_fetch answered offset {sc['offset']} for {len(data)}")
        part = base64.b64decode(sc["data"])
        check(len(part) <= FETCH, f"artifact_fetch returned {len(part)} bytes, over 512 KiB")
        total = sc["total"]
        data += part
        if sc["eof"]:
            check(len(data) == total, f"eof at {len(data)} of {total}")
            return bytes(data), total
        check(part, f"artifact_fetch returned nothing at {len(data)} of {total} without eof")
    raise CheckFailed("artifact_fetch never reached eof")


async def begin(c, name, size, sha, mime="application/octet-stream"):
    r = await call(c, "artifact_upload_begin", {"name": name, "mimeType": mime, "size": size, "sha256": sha})
    check(not r.get("isError"), f"artifact_upload_begin {name} failed: {text_of(r)}")
    sc = r["structuredContent"]
    check(isinstance(sc.get("upload"), str) and sc["upload"], f"no upload handle: {sc}")
    check(sc.get("chunk_bytes") == CHUNK, f"chunk_bytes is {sc.get('chunk_bytes')}")
    check("url" in sc and "expires_at" in sc, f"begin lacks url / expires_at: {sc}")
    return sc


async def send_chunks(c, handle, data, start=0):
    for off in range(start, len(data), CHUNK):
        part = data[off:off + CHUNK]
        r = await call(c, "artifact_upload_chunk", {"upload": handle, "offset": off, "data": base64.b64encode(part).decode()})
        check(not r.get("isError"), f"chunk at {off} refused: {text_of(r)}")
        check(r["structuredContent"]["received"] == off + len(part), f"received {r['structuredContent']} after {off + len(part)}")


async def check_apps_client(url, mode, cfg, out):
    kwargs = {} if mode == "auto" else {"mode": mode}
    async with apps_client(url, **kwargs) as c:
        out[f"{mode}_protocol"] = c.protocol_version
        exts = extensions_of(c)
        check(EXT in exts, f"{mode}: the server's capabilities lack {EXT}: {exts}")

        tools = {t.name: t for t in (await c.list_tools()).tools}
        missing = [n for n in ALL_TOOLS if n not in tools]
        check(not missing, f"{mode}: an apps client does not see {missing}")
        view_meta = tools[MODEL_TOOL].meta or {}
        check((view_meta.get("ui") or {}).get("resourceUri") == VIEW_URI and view_meta.get("ui/resourceUri") == VIEW_URI,
              f"{mode}: artifact_view's _meta: {view_meta}")
        check("model" in ((view_meta.get("ui") or {}).get("visibility") or ["model", "app"]), f"artifact_view is hidden from the model: {view_meta}")
        for n in APP_TOOLS:
            m = tools[n].meta or {}
            check((m.get("ui") or {}).get("visibility") == ["app"], f"{mode}: {n}'s _meta is not app-only: {m}")
        if mode != "auto":
            return

        listed = [dump(r) for r in (await c.list_resources()).resources]
        views = [r for r in listed if r.get("uri") == VIEW_URI]
        check(len(views) == 1, f"resources/list has {len(views)} entries for {VIEW_URI}")
        check(views[0].get("mimeType") == APP_MIME, f"the listed view's mimeType: {views[0]}")
        check(isinstance((views[0].get("_meta") or {}).get("ui"), dict), f"the listed view has no _meta.ui: {views[0]}")

        read = dump(await c.read_resource(VIEW_URI))
        content = read["contents"][0]
        check(content.get("uri") == VIEW_URI and content.get("mimeType") == APP_MIME, f"the view's content: {({k: v for k, v in content.items() if k != 'text'})}")
        html = content.get("text") or ""
        check(html.lstrip().lower().startswith("<!doctype html"), f"the view is not an HTML document: {html[:80]!r}")
        ui = (content.get("_meta") or {}).get("ui") or {}
        csp = ui.get("csp")
        check(isinstance(csp, dict), f"the view has no _meta.ui.csp: {ui}")
        for key in ("connectDomains", "resourceDomains"):
            for d in csp.get(key, []):
                check(d.startswith("https://"), f"{key} names a non-https origin: {d}")
        check(ui.get("prefersBorder") is True, f"prefersBorder: {ui}")
        out["view_bytes"] = len(html.encode())
        out["csp"] = csp

        ids = cfg["artifact_ids"]
        shown = await call(c, MODEL_TOOL, {"ids": [ids["image"], f"artifact://{ids['pdf']}", ids["csv"]]})
        check(not shown.get("isError"), f"artifact_view failed: {text_of(shown)}")
        metas = shown["structuredContent"]["artifacts"]
        check([m["id"] for m in metas] == [ids["image"], ids["pdf"], ids["csv"]], f"artifact_view's artifacts: {[m.get('id') for m in metas]}")
        for m in metas:
            for k in ("id", "uri", "name", "mime_type", "kind", "size_bytes", "sha256", "created_at", "expires_at", "url"):
                check(k in m, f"artifact_view's metadata lacks {k}: {m}")
            check(m["uri"] in text_of(shown), f"artifact_view's text does not name {m['uri']}: {text_of(shown)}")
        check([m["kind"] for m in metas] == ["image", "pdf", "csv"], f"kinds: {[m['kind'] for m in metas]}")
        check(metas[0]["sha256"] == cfg["image_sha256"], f"the image's sha256 is {metas[0]['sha256']}")

        # Chunks reassemble to the image; a length over 512 KiB is capped; past the end is empty.
        data, total = await fetch_all(c, ids["image"])
        check(hashlib.sha256(data).hexdigest() == cfg["image_sha256"], "the image's chunks do not hash to its sha256")
        capped_id = ids.get("big_image", ids["image"])
        big = await call(c, "artifact_fetch", {"id": capped_id, "offset": 0, "length": 8 * CHUNK})
        big_total = big["structuredContent"]["total"]
        check(len(base64.b64decode(big["structuredContent"]["data"])) == min(big_total, FETCH), "artifact_fetch's length is not capped at 512 KiB")
        for off in (total, total + 12345):
            past = (await call(c, "artifact_fetch", {"id": ids["image"], "offset": off}))["structuredContent"]
            check(past["data"] == "" and past["eof"] is True and past["total"] == total, f"a read at {off} past the end: {past}")
        out["image"] = {"bytes": total, "sha256": cfg["image_sha256"]}
        for m in metas[1:]:
            whole, _ = await fetch_all(c, m["id"])
            check(len(whole) == m["size_bytes"] and hashlib.sha256(whole).hexdigest() == m["sha256"], f"{m['id']}'s chunks do not hash to its sha256")
        await refused(c, "artifact_fetch", {"id": "art_0000000000000000"}, "an unknown id")
        await refused(c, MODEL_TOOL, {"ids": ["art_0000000000000000"]}, "an unknown id")

        asset = await call(c, "artifact_viewer_asset", {"name": "pdfjs"})
        check(not asset.get("isError") and len(asset["structuredContent"].get("text", "")) > 10_000, "artifact_viewer_asset pdfjs returned no module")
        await refused(c, "artifact_viewer_asset", {"name": "../../etc/passwd"}, "an unknown asset")

        before = set(await listed_uris(c))

        # A good upload: begin, chunks, commit; fetched back it hashes to the file.
        payload = os.urandom(UPLOAD_BYTES)
        sha = hashlib.sha256(payload).hexdigest()
        slot = await begin(c, "random-3mb.bin", len(payload), sha)
        await send_chunks(c, slot["upload"], payload)
        done = await call(c, "artifact_upload_commit", {"upload": slot["upload"]})
        check(not done.get("isError"), f"the commit failed: {text_of(done)}")
        art = done["structuredContent"]["artifact"]
        links = [b for b in done["content"] if b.get("type") == "resource_link"]
        check(links and links[0]["uri"] == art["uri"] and art["uri"].startswith("artifact://"), f"the commit's reference: {done['content']}")
        check(art["sha256"] == sha and art["size_bytes"] == len(payload), f"the committed artifact: {art}")
        got, _ = await fetch_all(c, art["id"])
        check(hashlib.sha256(got).hexdigest() == sha, "the uploaded artifact does not hash to the file")
        await refused(c, "artifact_upload_commit", {"upload": slot["upload"]}, "a second commit of the same handle")
        out["upload"] = {"uri": art["uri"], "bytes": len(payload), "sha256": sha}

        # Bad uploads: each refused, none becomes an artifact.
        bad = {}
        small = os.urandom(CHUNK + 5000)
        small_sha = hashlib.sha256(small).hexdigest()

        s = await begin(c, "wrong-sha.bin", len(small), hashlib.sha256(b"something else").hexdigest())
        await send_chunks(c, s["upload"], small)
        bad["wrong_sha256"] = await refused(c, "artifact_upload_commit", {"upload": s["upload"]}, "a digest mismatch")
        await refused(c, "artifact_upload_commit", {"upload": s["upload"]}, "a commit after a refused commit")

        s = await begin(c, "gap.bin", len(small), small_sha)
        bad["gap"] = await refused(c, "artifact_upload_chunk", {"upload": s["upload"], "offset": CHUNK, "data": base64.b64encode(small[CHUNK:]).decode()}, "a gap")
        check("0" in bad["gap"], f"the gap's refusal does not name the expected offset 0: {bad['gap']}")
        await refused(c, "artifact_upload_commit", {"upload": s["upload"]}, "a commit after a gap")

        s = await begin(c, "overlap.bin", len(small), small_sha)
        await send_chunks(c, s["upload"], small[:CHUNK])
        bad["overlap"] = await refused(c, "artifact_upload_chunk", {"upload": s["upload"], "offset": CHUNK - 100, "data": base64.b64encode(small[CHUNK - 100:]).decode()}, "an overlap")
        check(str(CHUNK) in bad["overlap"], f"the overlap's refusal does not name the expected offset {CHUNK}: {bad['overlap']}")
        await refused(c, "artifact_upload_commit", {"upload": s["upload"]}, "a commit after an overlap")

        tiny = b"0123456789"
        s = await begin(c, "too-much.bin", len(tiny), hashlib.sha256(tiny).hexdigest())
        bad["too_much"] = await refused(c, "artifact_upload_chunk", {"upload": s["upload"], "offset": 0, "data": base64.b64encode(tiny + b"!").decode()}, "too much data")
        await refused(c, "artifact_upload_commit", {"upload": s["upload"]}, "a commit after too much data")

        s = await begin(c, "early.bin", len(small), small_sha)
        await send_chunks(c, s["upload"], small[:CHUNK])
        bad["early_commit"] = await refused(c, "artifact_upload_commit", {"upload": s["upload"]}, "a commit before all bytes")
        await refused(c, "artifact_upload_chunk", {"upload": s["upload"], "offset": CHUNK, "data": base64.b64encode(small[CHUNK:]).decode()}, "a chunk after a refused commit")

        bad["unknown_chunk"] = await refused(c, "artifact_upload_chunk", {"upload": "no-such-upload", "offset": 0, "data": "AAAA"}, "an unknown handle")
        bad["unknown_commit"] = await refused(c, "artifact_upload_commit", {"upload": "no-such-upload"}, "an unknown handle")
        bad["over_limit"] = await refused(c, "artifact_upload_begin", {"name": "huge.bin", "mimeType": "application/octet-stream", "size": 1 << 50, "sha256": small_sha}, "a size over the limit")

        after = set(await listed_uris(c))
        check(art["uri"] in after, f"the good upload {art['uri']} is not in artifact_list")
        extra = sorted(after - before - {art["uri"]})
        check(not extra, f"refused uploads left artifacts behind: {extra}")
        out["refusals"] = {k: v[:160] for k, v in bad.items()}


async def check_plain_client(url, cfg, out, mode):
    async with Client(url, **({} if mode == "auto" else {"mode": mode})) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        seen = sorted(n for n in ALL_TOOLS if n in names)
        check(not seen, f"a client without the extension sees {seen}")
        check("artifact_list" in names, f"the plain client's tools: {sorted(names)}")
        uris = [r.uri for r in (await c.list_resources()).resources]
        check(VIEW_URI not in [str(u) for u in uris], "a client without the extension lists the view")
        out[f"plain_{mode}_view_call"] = (await refused(c, MODEL_TOOL, {"ids": [cfg["artifact_ids"]["image"]]}, "artifact_view without the extension"))[:160]
        out[f"plain_{mode}_fetch_call"] = (await refused(c, "artifact_fetch", {"id": cfg["artifact_ids"]["image"]}, "artifact_fetch without the extension"))[:160]
        try:
            r = dump(await c.read_resource(VIEW_URI))
        except Exception as e:  # noqa: BLE001 — the expected outcome: resource not found
            out[f"plain_{mode}_view_read"] = str(e)[:160]
        else:
            raise CheckFailed(f"a client without the extension read the view: {json.dumps(r)[:200]}")


async def main():
    cfg = json.loads(Path(sys.argv[1]).read_text())
    if cfg.get("out"):
        Path(cfg["out"]).mkdir(parents=True, exist_ok=True)
    url = cfg["mcp"]
    out = {}
    step = "setup"
    try:
        for step, run in [("apps client (initialize)", lambda: check_apps_client(url, "legacy", cfg, out)),
                          ("apps client (negotiated)", lambda: check_apps_client(url, "auto", cfg, out)),
                          ("client without the extension (initialize)", lambda: check_plain_client(url, cfg, out, "legacy")),
                          ("client without the extension (negotiated)", lambda: check_plain_client(url, cfg, out, "auto"))]:
            await run()
    except Exception as e:  # noqa: BLE001 — any failure names its step
        if not isinstance(e, CheckFailed):
            traceback.print_exc(file=sys.stderr)
        print(json.dumps({"ok": False, "error": f"{step}: {e}", **out}))
        sys.exit(1)
    if cfg.get("out"):
        (Path(cfg["out"]) / "apps-protocol.json").write_text(json.dumps(out, indent=2))
    print(json.dumps({"ok": True, **out}))


if __name__ == "__main__":
    asyncio.run(main())
