// toolgate's MCP front with the official TypeScript SDK client, over
// Streamable HTTP. Run by mcp_test.go with TOOLGATE_URL set to a toolgate
// serving examples/policy.yaml in front of the example backends.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

const base = process.env.TOOLGATE_URL;
assert.ok(base, 'TOOLGATE_URL must point at a running toolgate');

async function connect(headers = {}) {
  const client = new Client({ name: 'toolgate-ts-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', base), { requestInit: { headers } });
  await client.connect(transport);
  return { client, transport };
}

// withClient runs fn with a connected client and closes it afterwards.
async function withClient(headers, fn) {
  const { client, transport } = await connect(headers);
  try {
    return await fn(client, transport);
  } finally {
    await client.close();
  }
}

// checkResult asserts the shape of every tool result and returns the
// envelope: structuredContent is the envelope, the one text block is its
// observation, isError is set for every status but ok and empty.
function checkResult(result) {
  const env = result.structuredContent;
  assert.equal(typeof env, 'object', 'structuredContent must be the envelope');
  assert.ok(['ok', 'empty', 'bad_args', 'forbidden', 'not_found', 'timeout', 'upstream'].includes(env.status), env.status);
  assert.equal(result.content.length, 1);
  assert.equal(result.content[0].type, 'text');
  assert.equal(result.content[0].text, env.observation);
  assert.ok(env.observation.startsWith(`[${env.status.toUpperCase()}] `), env.observation);
  assert.equal(Boolean(result.isError), !['ok', 'empty'].includes(env.status));
  return env;
}

// httpEnvelope makes the same call on toolgate's HTTP front.
async function httpEnvelope(tool, args, headers) {
  const resp = await fetch(new URL(`/v1/tools/${tool}`, base), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(args),
  });
  return resp.json();
}

test('connects over Streamable HTTP without a session', async () => {
  await withClient({}, async (client, transport) => {
    assert.equal(transport.protocolVersion, '2025-11-25');
    assert.equal(transport.sessionId, undefined, 'toolgate is stateless');
    assert.equal(client.getServerVersion().name, 'toolgate');
    assert.ok(client.getServerCapabilities().tools, 'tools capability');
    assert.match(client.getInstructions(), /idempotency_key/);
  });
});

test('lists the tools the caller may use', async () => {
  const names = async (headers) => withClient(headers, async (c) => (await c.listTools()).tools.map((t) => t.name));
  assert.deepEqual(await names({ 'X-Toolgate-Caller': 'research-agent' }), ['search_articles']);
  const all = await names({ 'X-Toolgate-Caller': 'ops-agent' });
  assert.ok(all.includes('search_articles') && all.includes('send_notification'), all.join(','));
});

test('describes each tool from its contract', async () => {
  await withClient({ 'X-Toolgate-Caller': 'ops-agent' }, async (client) => {
    const { tools } = await client.listTools();
    const search = tools.find((t) => t.name === 'search_articles');
    const notify = tools.find((t) => t.name === 'send_notification');
    assert.match(search.description, /Search articles/);
    assert.deepEqual(search.inputSchema.required, ['q']);
    assert.equal(search.inputSchema.additionalProperties, false);
    assert.deepEqual(search.annotations, { readOnlyHint: true, destructiveHint: false, idempotentHint: true });
    assert.ok(notify.inputSchema.required.includes('idempotency_key'), 'side-effecting tools require a key');
    assert.equal(notify.inputSchema.properties.idempotency_key.type, 'string');
    assert.deepEqual(notify.annotations, { readOnlyHint: false, destructiveHint: true, idempotentHint: true });
    for (const t of [search, notify]) {
      assert.equal(t.outputSchema.type, 'object');
      assert.deepEqual(t.outputSchema.properties.status.enum,
        ['ok', 'empty', 'bad_args', 'forbidden', 'not_found', 'timeout', 'upstream']);
    }
  });
});

test('calls run the contract and answer with the envelope', async () => {
  const headers = { 'X-Toolgate-Caller': 'research-agent' };
  const cases = [
    { args: { q: 'go', limit: 3 }, status: 'ok' },
    { args: { q: '量子引力' }, status: 'empty' },
    { args: { q: 'go', limit: 50 }, status: 'bad_args' },
    { args: { q: 'secret' }, status: 'forbidden' },
    { args: { q: 'crash' }, status: 'upstream' },
  ];
  await withClient(headers, async (client) => {
    // Listing first makes the client validate structuredContent against
    // each tool's outputSchema on every call.
    await client.listTools();
    for (const { args, status } of cases) {
      const id = `ts-${status}`;
      const result = await client.callTool({ name: 'search_articles', arguments: args });
      const env = checkResult(result);
      assert.equal(env.status, status, `${JSON.stringify(args)}: ${env.observation}`);
      assert.equal(env.tool, 'search_articles');
      // The same call on the HTTP front gives the same envelope (the
      // call ids differ unless a request id is given; compare without).
      const viaHTTP = await httpEnvelope('search_articles', args, { ...headers, 'X-Request-Id': id });
      assert.deepEqual({ ...env, call_id: id }, viaHTTP);
    }
  });
});

test('a side-effecting call runs once per idempotency_key', async () => {
  await withClient({ 'X-Toolgate-Caller': 'ops-agent' }, async (client) => {
    await client.listTools();
    const args = { user_id: 'alice', text: 'Your report is ready.', idempotency_key: `ts-${Date.now()}` };
    const first = checkResult(await client.callTool({ name: 'send_notification', arguments: args }));
    assert.equal(first.status, 'ok');
    assert.equal(first.side_effect, 'done');
    assert.equal(first.replayed, false);
    const again = checkResult(await client.callTool({ name: 'send_notification', arguments: args }));
    assert.equal(again.replayed, true);
    assert.deepEqual(again.data, first.data);
    assert.equal(again.cost, 0);
    const noKey = checkResult(await client.callTool({ name: 'send_notification', arguments: { user_id: 'alice', text: 'x' } }));
    assert.equal(noKey.status, 'bad_args');
  });
});

test('an unknown tool is a JSON-RPC invalid params error', async () => {
  await withClient({}, async (client) => {
    await assert.rejects(
      client.callTool({ name: 'delete_everything', arguments: {} }),
      (err) => err instanceof McpError && err.code === ErrorCode.InvalidParams && /delete_everything/.test(err.message),
    );
  });
});
