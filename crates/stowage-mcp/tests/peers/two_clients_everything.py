"""Two official Python MCP clients at once through one `stowage serve` in front of
@modelcontextprotocol/server-everything, as two different people would be: each must see its
own session resources, logs, progress, sampling answers and roots, and nothing of the other's.
A third client of Alice's, which cannot sample, is offered the tools server-everything offers
such a client (no sampling tool), as it would be talking to the server directly. Prints one JSON object of observations for the Rust test.

Usage: two_clients_everything.py URL MODE KEY_A KEY_B   (MODE: auto | legacy; KEY: an API key, or -)
"""
import asyncio
import base64
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def text(result):
    return " ".join(getattr(b, "text", "") for b in result.content)


class Person:
    def __init__(self, name, url, mode, key, samples=True):
        self.name, self.url, self.mode, self.key, self.samples = name, url, mode, key, samples
        self.logs, self.sampled, self.foreign_progress, self.progress = [], [], 0, 0

    async def sampling(self, context, params):
        self.sampled.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"reply-for-{self.name}"), model="m", stop_reason="endTurn"
        )

    async def roots(self, context):
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///home/{self.name}", name=self.name)])

    async def logging(self, params):
        self.logs.append(str(params.data))

    async def on_progress(self, progress, total, message):
        self.progress += 1

    def client(self):
        kwargs = {} if self.mode == "auto" else {"mode": self.mode}
        headers = {} if self.key == "-" else {"Authorization": f"Bearer {self.key}"}
        transport = streamable_http_client(self.url, http_client=httpx2.AsyncClient(headers=headers, timeout=60))
        sampling = {"sampling_callback": self.sampling} if self.samples else {}
        return Client(
            transport,
            **sampling,
            list_roots_callback=self.roots,
            logging_callback=self.logging,
            log_level="debug" if self.mode == "auto" else None,
            **kwargs,
        )


async def main():
    url, mode, key_a, key_b = sys.argv[1:5]
    a, b = Person("alice", url, mode, key_a), Person("bob", url, mode, key_b)
    c = Person("carol", url, mode, key_a, samples=False)
    out = {}
    async with a.client() as ca, b.client() as cb, c.client() as cc:
        out["protocol"] = ca.protocol_version
        out["alice_tools"] = sorted(t.name for t in (await ca.list_tools()).tools)
        out["carol_tools"] = sorted(t.name for t in (await cc.list_tools()).tools)
        # Alice makes a session resource; Bob must neither list nor read it.
        data = "data:text/plain;base64," + base64.b64encode(b"alice's private notes " * 50).decode()
        made = await ca.call_tool("gzip-file-as-resource", {"name": "alice-secret.gz", "data": data, "outputType": "resourceLink"})
        out["alice_made"] = text(made) + " " + json.dumps([getattr(b_, "uri", None) for b_ in made.content])
        uri = "demo://resource/session/alice-secret.gz"
        out["alice_lists_it"] = any(r.uri == uri for r in (await ca.list_resources()).resources)
        out["bob_lists_it"] = any(r.uri == uri for r in (await cb.list_resources()).resources)
        try:
            got = await ca.read_resource(uri)
            out["alice_reads_it"] = len(got.contents) > 0
        except Exception as e:  # noqa: BLE001
            out["alice_reads_it"] = f"error: {e}"
        try:
            await cb.read_resource(uri)
            out["bob_reads_it"] = True
        except Exception as e:  # noqa: BLE001
            out["bob_reads_it"] = f"error: {e}"
        # Both ask for sampling at once: each gets its own client's answer.
        ra, rb = await asyncio.gather(
            ca.call_tool("trigger-sampling-request", {"prompt": "alice asks"}),
            cb.call_tool("trigger-sampling-request", {"prompt": "bob asks"}),
        )
        out["alice_sampling"], out["bob_sampling"] = text(ra), text(rb)
        out["alice_sampled"], out["bob_sampled"] = a.sampled, b.sampled
        # Both run a long operation with progress at once.
        await asyncio.gather(
            ca.call_tool("trigger-long-running-operation", {"duration": 2, "steps": 4}, progress_callback=a.on_progress),
            cb.call_tool("trigger-long-running-operation", {"duration": 2, "steps": 4}, progress_callback=b.on_progress),
        )
        out["alice_progress"], out["bob_progress"] = a.progress, b.progress
        # Roots: each client's own.
        try:
            out["alice_roots"] = text(await ca.call_tool("get-roots-list", {}))
            out["bob_roots"] = text(await cb.call_tool("get-roots-list", {}))
        except Exception as e:  # noqa: BLE001
            out["roots_error"] = str(e)
        # Logs: Alice turns simulated logging on; Bob must hear none of it.
        if mode == "legacy":
            await ca.set_logging_level("debug")
            await cb.set_logging_level("debug")
            await ca.call_tool("toggle-simulated-logging", {})
            await asyncio.sleep(6)
            await ca.call_tool("toggle-simulated-logging", {})
        out["alice_logs"], out["bob_logs"] = a.logs, b.logs
    print(json.dumps(out))


asyncio.run(main())
