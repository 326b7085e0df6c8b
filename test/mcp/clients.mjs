// The MCP clients agents use, behind one small interface, for the tests in
// this directory: the official TypeScript SDK of three 1.x releases (each
// speaking the newest revision it knows) and the v2 client, with legacy and
// automatic version negotiation.
import assert from 'node:assert/strict';

import { Client as Client111 } from 'mcp-sdk-1.11/client/index.js';
import { StreamableHTTPClientTransport as Transport111 } from 'mcp-sdk-1.11/client/streamableHttp.js';
import { Client as Client117 } from 'mcp-sdk-1.17/client/index.js';
import { StreamableHTTPClientTransport as Transport117 } from 'mcp-sdk-1.17/client/streamableHttp.js';
import { Client as Client132 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as Transport132 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';

export const base = process.env.TOOLGATE_URL;
assert.ok(base, 'TOOLGATE_URL must point at a running toolgate');

// The protocol revision of the last MCP exchange: the MCP-Protocol-Version
// header a client sends after the handshake, or the version an initialize
// answer settled on. Every client here calls the global fetch.
let lastRevision;
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init = {}) => {
  const headers = new Headers(init.headers);
  const resp = await realFetch(url, init);
  if (String(url).endsWith('/mcp')) {
    const sent = headers.get('mcp-protocol-version');
    if (sent) {
      lastRevision = sent;
    } else if (resp.headers.get('content-type')?.startsWith('application/json')) {
      const body = await resp.clone().json().catch(() => undefined);
      if (body?.result?.protocolVersion) lastRevision = body.result.protocolVersion;
    }
  }
  return resp;
};

const info = { name: 'toolgate-client-test', version: '1.0.0' };

// clients: each makes a connected client with headers on every request.
export const clients = [
  { name: 'TS SDK 1.11', revision: '2025-03-26', make: () => [new Client111(info), Transport111] },
  { name: 'TS SDK 1.17', revision: '2025-06-18', make: () => [new Client117(info), Transport117] },
  { name: 'TS SDK 1.32', revision: '2025-11-25', make: () => [new Client132(info), Transport132] },
  { name: 'TS client 2.x, legacy negotiation', revision: '2025-11-25', make: () => [new ClientV2(info), TransportV2] },
  {
    name: 'TS client 2.x, auto negotiation',
    revision: '2026-07-28',
    make: () => [new ClientV2(info, { versionNegotiation: { mode: 'auto' } }), TransportV2],
  },
];

// connect returns { client, revision, close } for one entry of clients.
export async function connect(entry, headers = {}) {
  const [client, Transport] = entry.make();
  lastRevision = undefined;
  const transport = new Transport(new URL('/mcp', base), { requestInit: { headers } });
  await client.connect(transport);
  // One request after the handshake shows the revision in use.
  await client.listTools();
  return { client, transport, revision: lastRevision, close: () => client.close() };
}

// The example tools' calls, one per kind of outcome.
export const calls = {
  ok: { name: 'search_articles', arguments: { q: 'go', limit: 3 } },
  empty: { name: 'search_articles', arguments: { q: '量子引力' } },
  bad_args: { name: 'search_articles', arguments: { q: 'go', limit: 50 } },
  upstream: { name: 'search_articles', arguments: { q: 'crash' } },
};

// notification is a side-effecting call with a fresh key.
export function notification(tag) {
  return {
    name: 'send_notification',
    arguments: { user_id: 'alice', text: 'Your report is ready.', idempotency_key: `${tag}-${process.pid}-${Date.now()}` },
  };
}

// httpEnvelope makes the same call on toolgate's HTTP front.
export async function httpEnvelope(call, headers = {}) {
  const resp = await realFetch(new URL(`/v1/tools/${call.name}`, base), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(call.arguments),
  });
  return resp.json();
}

// checkResult asserts the shape of every tool result and returns its
// structured fields and text: one text block, the observation, starting
// with [STATUS]; structuredContent with the status fields (no data, no
// observation); isError for every status but ok and empty.
export function checkResult(result) {
  assert.equal(result.content.length, 1, JSON.stringify(result));
  assert.equal(result.content[0].type, 'text');
  const text = result.content[0].text;
  const fields = result.structuredContent;
  assert.equal(typeof fields, 'object', 'structuredContent carries the status fields');
  assert.ok(['ok', 'empty', 'bad_args', 'forbidden', 'not_found', 'timeout', 'upstream'].includes(fields.status), fields.status);
  assert.ok(text.startsWith(`[${fields.status.toUpperCase()}] `), text);
  assert.deepEqual(Object.keys(fields).filter((k) => ['data', 'message', 'observation'].includes(k)), []);
  for (const k of ['retryable', 'side_effect', 'replayed', 'cost', 'tool', 'call_id']) {
    assert.ok(k in fields, `structuredContent lacks ${k}`);
  }
  assert.equal(Boolean(result.isError), !['ok', 'empty'].includes(fields.status));
  return { ...fields, text };
}
