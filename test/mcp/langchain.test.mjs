// LangChain's MCP adapters (@langchain/mcp-adapters) with a LangGraph
// ToolNode against toolgate's MCP front: what the model reads for each kind
// of outcome. The adapter puts a success's text block and its
// structuredContent into the ToolMessage; an error becomes the text of a
// ToolException. Either way the model must read the whole observation and
// no more than observation_max_chars plus the status fields.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { MultiServerMCPClient } from '@langchain/mcp-adapters';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import { AIMessage } from '@langchain/core/messages';

import { base, httpEnvelope } from './clients.mjs';

const maxChars = Number(process.env.OBSERVATION_MAX_CHARS || 1800);
// What the status fields (structuredContent) and the adapter's wrapping
// add, at most.
const fieldsAllowance = 400;
const headers = { 'X-Toolgate-Caller': 'ops-agent' };

let client;
let node;

before(async () => {
  client = new MultiServerMCPClient({
    mcpServers: { toolgate: { url: new URL('/mcp', base).href, transport: 'http', headers } },
  });
  node = new ToolNode(await client.getTools());
});

after(async () => {
  await client?.close();
});

// modelText is what a chat model is given for a ToolMessage: its text
// blocks, and every other field of its blocks as JSON.
function modelText(msg) {
  if (typeof msg.content === 'string') return msg.content;
  return msg.content
    .map((block) => {
      const { type, text, ...rest } = block;
      return (text ?? '') + (Object.keys(rest).length ? JSON.stringify(rest) : '');
    })
    .join('');
}

// run calls the tools through the ToolNode, as a model's tool calls.
async function run(...calls) {
  const toolCalls = calls.map((c, i) => ({ name: c.name, args: c.arguments, id: `call-${i}`, type: 'tool_call' }));
  const out = await node.invoke({ messages: [new AIMessage({ content: '', tool_calls: toolCalls })] });
  return out.messages;
}

test('the adapter lists the tools with their argument schemas', async () => {
  const names = (await client.getTools()).map((t) => t.name);
  assert.ok(names.includes('search_articles') && names.includes('send_notification'), names.join(', '));
});

test('the model reads the observation, bounded, for every kind of outcome', async () => {
  const key = `lc-${process.pid}-${Date.now()}`;
  const send = { name: 'send_notification', arguments: { user_id: 'alice', text: 'Your report is ready.', idempotency_key: key } };
  const cases = [
    { want: 'ok', call: { name: 'search_articles', arguments: { q: 'go', limit: 20 } } },
    { want: 'empty', call: { name: 'search_articles', arguments: { q: '量子引力' } } },
    { want: 'upstream', call: { name: 'search_articles', arguments: { q: 'crash' } } },
    { want: 'ok', call: send },
    { want: 'replay', call: send },
    // The same key with other arguments: refused by toolgate (the
    // adapter's own schema check passes it).
    { want: 'bad_args', call: { ...send, arguments: { ...send.arguments, text: 'Another text.' } } },
  ];
  for (const { want, call } of cases) {
    const [msg] = await run(call);
    const seen = modelText(msg);
    // The HTTP front answers the same call with the envelope; its
    // observation is what the model must read.
    const env = await httpEnvelope(call, headers);
    const status = want === 'replay' ? 'ok' : want;
    assert.equal(env.status, status, `${want}: ${env.observation}`);
    // A side-effecting call's key is spent by then: the HTTP front's
    // answer is its replay, whose first line may say so; the data is the
    // same.
    const expected = call === send && want === 'ok' ? env.observation.slice(env.observation.indexOf('\n')) : env.observation;
    // The adapter may hand the text over JSON-encoded (with the fields
    // next to it): the model then reads the observation with its quotes
    // escaped.
    const escaped = JSON.stringify(expected).slice(1, -1);
    assert.ok(seen.includes(expected) || seen.includes(escaped),
      `${want}: the model does not read the observation:\n${seen}\n---\n${env.observation}`);
    assert.ok([...env.observation].length <= maxChars, `${want}: the observation is over ${maxChars} characters`);
    const bound = JSON.stringify(env.observation).length + fieldsAllowance;
    assert.ok(seen.length <= bound, `${want}: ${seen.length} characters reach the model, over the observation and its fields (${bound})`);
    if (env.data !== undefined && JSON.stringify(env.data).length > maxChars) {
      assert.ok(!seen.includes(JSON.stringify(env.data)), `${want}: the whole data reached the model`);
    }
    if (['ok', 'empty', 'replay'].includes(want)) {
      assert.equal(msg.status, 'success', want);
      // The fields ride next to the text, in the block or its JSON.
      const block = typeof msg.content === 'string' ? JSON.parse(msg.content) : msg.content[0];
      const fields = block.structuredContent;
      assert.equal(fields.status, status);
      assert.equal(fields.replayed, want === 'replay');
      assert.equal(fields.side_effect, env.side_effect);
    } else {
      // Errors reach the model as text only: the observation must say
      // what a model needs (retryable, side effect) itself.
      assert.equal(msg.status, 'error', want);
    }
  }
});
