// Every TypeScript SDK client era against toolgate's MCP front: each
// negotiates its newest revision, lists the tools and calls each kind of
// outcome. Ends with one line per client: client, revision, result.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';

import { calls, checkResult, clients, connect, httpEnvelope, notification } from './clients.mjs';

const headers = { 'X-Toolgate-Caller': 'ops-agent' };
const table = [];

after(() => {
  console.log('\nclient | revision | result');
  for (const row of table) console.log(`${row.client} | ${row.revision} | ${row.result}`);
});

for (const entry of clients) {
  test(`${entry.name} lists and calls every example tool at ${entry.revision}`, async () => {
    const row = { client: entry.name, revision: '?', result: 'failed' };
    table.push(row);
    const { client, revision, close } = await connect(entry, headers);
    try {
      row.revision = revision;
      assert.equal(revision, entry.revision, 'negotiated revision');
      const { tools } = await client.listTools();
      const names = tools.map((t) => t.name);
      assert.ok(names.includes('search_articles') && names.includes('send_notification'), names.join(', '));
      const seen = [];
      for (const [want, call] of Object.entries(calls)) {
        const got = checkResult(await client.callTool(call));
        assert.equal(got.status, want, got.text);
        // The text is the observation the HTTP front returns for the
        // same call; the fields are the envelope's.
        const env = await httpEnvelope(call, { ...headers, 'X-Request-Id': got.call_id });
        assert.equal(got.text, env.observation);
        for (const k of ['status', 'retryable', 'side_effect', 'replayed', 'cost', 'tool', 'call_id']) {
          assert.deepEqual(got[k], env[k], k);
        }
        seen.push(want);
      }
      const send = notification(entry.revision);
      const first = checkResult(await client.callTool(send));
      assert.equal(first.status, 'ok');
      assert.equal(first.side_effect, 'done');
      const again = checkResult(await client.callTool(send));
      assert.equal(again.replayed, true, 'the same key replays');
      assert.equal(again.cost, 0);
      assert.equal(again.text.split('\n').slice(1).join('\n'), first.text.split('\n').slice(1).join('\n'), 'the same data');
      seen.push('replay');
      await assert.rejects(client.callTool({ name: 'delete_everything', arguments: {} }), (err) => err.code === -32602);
      seen.push('unknown tool');
      row.result = `ok: ${seen.join(', ')}`;
    } finally {
      await close();
    }
  });
}
