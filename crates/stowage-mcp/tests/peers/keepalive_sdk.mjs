// Small calls on kept-alive connections, timed with the official TypeScript SDK's client: its
// Streamable HTTP transport uses Node's fetch (undici), which reuses one connection for
// sequential requests and delays its ACKs, so a server that leaves Nagle on stalls every call
// by ~40 ms (the Python SDK's httpx does not show it).
//
// usage: node keepalive_sdk.mjs <peers dir> <calls> <label>=<url> [<label>=<url> ...]
// Connects one client per URL, warms each up, then makes <calls> rounds of one `echo` call
// per client, interleaved so that both sides see the same machine at the same moment. Prints
// {"<label>": [milliseconds per call, ...], ...} on stdout.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const [peers, callsArg, ...targets] = process.argv.slice(2);
const sdk = (p) => pathToFileURL(join(peers, 'node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href;
const { Client } = await import(sdk('client/index.js'));
const { StreamableHTTPClientTransport } = await import(sdk('client/streamableHttp.js'));

const calls = Number(callsArg);
const clients = [];
for (const target of targets) {
  const [label, url] = target.split(/=(.*)/s);
  const client = new Client({ name: 'keepalive-bench', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const { tools } = await client.listTools();
  // Through a gateway with several upstreams the tool may carry a prefix.
  const echo = tools.map((t) => t.name).find((n) => n === 'echo' || n.endsWith('_echo'));
  if (!echo) throw new Error(`${label}: no echo tool in ${tools.map((t) => t.name).join(', ')}`);
  clients.push({ label, client, echo, times: [] });
}

const call = async (c, i) => {
  const r = await c.client.callTool({ name: c.echo, arguments: { message: `call ${i}` } });
  if (r.isError || r.content?.[0]?.text !== `Echo: call ${i}`) throw new Error(`${c.label}: unexpected result ${JSON.stringify(r)}`);
};
for (let i = 0; i < 20; i++) for (const c of clients) await call(c, i);
for (let i = 0; i < calls; i++) {
  for (const c of clients) {
    const start = process.hrtime.bigint();
    await call(c, i);
    c.times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
}
for (const c of clients) await c.client.close();
process.stdout.write(JSON.stringify(Object.fromEntries(clients.map((c) => [c.label, c.times]))));
