// An MCP server on the official TypeScript SDK (Streamable HTTP, one session per client) that
// asks its client for sampling, and logs, on the standalone GET stream, not tied to the call
// that caused it, as the conformance suite's reference server does. A request sent before the
// client opened that stream is lost by the SDK, so the call then hangs: what a gateway must
// never let happen on a client's fresh upstream session.
//
// Usage: node standalone_asker.js PEERS_DIR   (prints {"port": N} once listening on 127.0.0.1)
const { randomUUID } = require('node:crypto');
const http = require('node:http');
const peers = require('node:module').createRequire(process.argv[2] + '/package.json');
const { Server } = peers('@modelcontextprotocol/sdk/server/index.js');
const { StreamableHTTPServerTransport } = peers('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { CallToolRequestSchema, ListToolsRequestSchema } = peers('@modelcontextprotocol/sdk/types.js');

function makeServer() {
  const server = new Server({ name: 'standalone-asker', version: '1.0.0' }, { capabilities: { tools: {}, logging: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [{
      name: 'ask',
      description: 'Asks the client to sample the prompt (on the standalone stream) and returns the answer',
      inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
    }],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const prompt = String(req.params.arguments?.prompt ?? '');
    // No relatedRequestId: both go out on the standalone stream.
    await server.sendLoggingMessage({ level: 'info', data: `asking: ${prompt}` });
    const r = await server.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 16 });
    return { content: [{ type: 'text', text: `sampled: ${r.content.text}` }] };
  });
  return server;
}

const sessions = new Map();
const httpServer = http.createServer(async (req, res) => {
  const sid = req.headers['mcp-session-id'];
  let transport = sid ? sessions.get(sid) : undefined;
  if (!transport) {
    if (sid || req.method !== 'POST') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'session not found' } }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await makeServer().connect(transport);
  }
  await transport.handleRequest(req, res);
});
httpServer.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: httpServer.address().port })));
