// Cancels a call with the official TypeScript SDK's client over Streamable HTTP, as Claude
// Code, VS Code and the Inspector do when a user stops a tool, and reports everything the SDK
// complained about. A cancelled request gets no response (the specification says so); a
// server that then ends the request's stream makes the SDK resume it with `Last-Event-ID`
// (twice, each answered 400 by a gateway that has nothing more to send) and report both as
// errors. Held open instead, the stream stays quiet until the client lets it go.
//
// usage: node cancel_sdk.mjs <peers dir> <url> <tool>
// Calls <tool> {ms: 5000}, aborts it after 300 ms, waits 3 s (where the resume attempts and
// their errors landed), then calls <tool> {ms: 10} on the same client. Prints
// {"rejected": bool, "errors": [...], "after": "<text of the second call>"} on stdout.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const [peers, url, tool] = process.argv.slice(2);
const sdk = (p) => pathToFileURL(join(peers, 'node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href;
const { Client } = await import(sdk('client/index.js'));
const { StreamableHTTPClientTransport } = await import(sdk('client/streamableHttp.js'));

// Whatever the SDK reports: the client's `onerror` (which the transport's errors reach too,
// through `Protocol.connect`) and anything printed to the console's error or warning streams.
const errors = [];
for (const level of ['error', 'warn']) {
  const original = console[level];
  console[level] = (...args) => {
    errors.push(`console.${level}: ${args.map(String).join(' ')}`);
    original(...args);
  };
}
const client = new Client({ name: 'cancel-test', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(url));
client.onerror = (e) => errors.push(`onerror: ${e}`);
await client.connect(transport);

const ac = new AbortController();
const call = client.callTool({ name: tool, arguments: { ms: 5000 } }, undefined, { signal: ac.signal });
setTimeout(() => ac.abort('the user stopped it'), 300);
let rejected = false;
try {
  await call;
} catch {
  rejected = true;
}
await new Promise((r) => setTimeout(r, 3000));
const after = await client.callTool({ name: tool, arguments: { ms: 10 } });
await client.close();
process.stdout.write(JSON.stringify({ rejected, errors, after: after.isError ? `error: ${JSON.stringify(after)}` : after.content?.[0]?.text }));
