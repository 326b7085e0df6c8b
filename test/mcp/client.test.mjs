// toolgate's MCP front with the official TypeScript SDK client (1.32),
// over Streamable HTTP. Run by mcp_test.go with TOOLGATE_URL set to a
// toolgate serving examples/policy.yaml in front of the example backends.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

import { base, checkResult, httpEnvelope } from './clients.mjs';

// withClient runs fn with a connected client and closes it afterwards.
async function withClient(headers, fn) {
  const client = new Client({ name: 'toolgate-ts-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', base), { requestInit: { headers } });
  await client.connect(transport);
  try {
    return await fn(client, transport);
  } finally {
    await client.close();
  }
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
      assert.equal(t.outputSchema.additionalProperties, false);
      assert.ok(!('data' in t.outputSchema.properties), 'the data is in the text, for the model');
    }
  });
});

test('calls run the contract: the text is the observation, the fields are the envelope\'s', async () => {
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
      const call = { name: 'search_articles', arguments: args };
      const { text, ...fields } = checkResult(await client.callTool(call));
      assert.equal(fields.status, status, `${JSON.stringify(args)}: ${text}`);
      assert.equal(fields.tool, 'search_articles');
      // The same call on the HTTP front, with the same request id, gives
      // the same envelope.
      const env = await httpEnvelope(call, { ...headers, 'X-Request-Id': fields.call_id });
      assert.equal(text, env.observation);
      assert.deepEqual(fields, Object.fromEntries(Object.keys(fields).map((k) => [k, env[k]])));
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
    assert.equal(again.text.slice(again.text.indexOf('\n')), first.text.slice(first.text.indexOf('\n')), 'the same data');
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
