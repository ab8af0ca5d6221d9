// The official Anthropic npm client (pinned in tools/oracle/package.json) against `kiln serve` on
// 127.0.0.1: the embedded default configuration (stories260K) for plain, multi-turn, system blocks,
// streaming, count_tokens and errors, and a scripted test model (write_scripted_model) for thinking
// and a tool_use round trip. Usage: node anthropic_client_test.mjs KILN DEFAULT_CONFIG SCRIPTED_CONFIG
// Exit 77 (skip) when the client is not installed.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';

const [kiln, defaultConfig, scriptedConfig] = process.argv.slice(2);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let Anthropic;
try {
  Anthropic = createRequire(path.join(root, '.cache/oracle/package.json'))('@anthropic-ai/sdk');
  Anthropic = Anthropic.default ?? Anthropic.Anthropic ?? Anthropic;
} catch {
  console.log('SKIP: the @anthropic-ai/sdk npm package is not installed (scripts/setup.sh installs it)');
  process.exit(77);
}

function start(config) {
  const server = spawn(kiln, ['serve', '--config', config, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const port = new Promise((resolve, reject) => {
    let log = '';
    const timer = setTimeout(() => reject(new Error('kiln serve did not start within 60 s:\n' + log)), 60000);
    server.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    server.on('exit', (code) => reject(new Error(`kiln serve exited with ${code}:\n${log}`)));
  });
  return { server, port };
}

let failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok   ${name}`); } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}

/** The content blocks and stop reason a stream of raw events reassembles to. */
async function collect(stream) {
  const types = [], blocks = [];
  let stop = null, usage = null;
  for await (const e of stream) {
    types.push(e.type);
    if (e.type === 'content_block_start') blocks[e.index] = { ...e.content_block, _json: '' };
    if (e.type === 'content_block_delta') {
      const b = blocks[e.index];
      if (e.delta.type === 'text_delta') b.text += e.delta.text;
      if (e.delta.type === 'thinking_delta') b.thinking += e.delta.thinking;
      if (e.delta.type === 'input_json_delta') b._json += e.delta.partial_json;
    }
    if (e.type === 'message_delta') { stop = e.delta.stop_reason; usage = e.usage; }
  }
  for (const b of blocks) {
    if (b.type === 'tool_use') b.input = JSON.parse(b._json || '{}');
    delete b._json;
  }
  return { types, blocks, stop, usage };
}

// ---- the default configuration: stories260K
{
  const { server, port } = start(defaultConfig);
  const client = new Anthropic({ baseURL: `http://127.0.0.1:${await port}`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const model = 'stories260K';
  const body = { model, max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: 'Tell me a story' }] };
  let plain;
  await check('messages.create: a text block, max_tokens, usage', async () => {
    plain = await client.messages.create(body);
    assert.equal(plain.type, 'message');
    assert.equal(plain.role, 'assistant');
    assert.equal(plain.content.length, 1);
    assert.equal(plain.content[0].type, 'text');
    assert.ok(plain.content[0].text.length > 0);
    assert.equal(plain.stop_reason, 'max_tokens');
    assert.equal(plain.usage.output_tokens, 24);
    assert.ok(plain.usage.input_tokens > 0);
  });
  await check('streamed: every event type in order (the client drops pings), the same text', async () => {
    const r = await collect(await client.messages.create({ ...body, stream: true }));
    assert.equal(r.types[0], 'message_start');
    assert.ok(r.types.includes('content_block_start') && r.types.includes('content_block_delta'));
    assert.ok(r.types.includes('content_block_stop'));
    assert.deepEqual(r.types.slice(-2), ['message_delta', 'message_stop']);
    assert.equal(r.blocks[0].text, plain.content[0].text);
    assert.equal(r.stop, 'max_tokens');
    assert.equal(r.usage.output_tokens, 24);
  });
  await check('messages.stream helper: finalMessage equals the non-streamed one', async () => {
    const final = await client.messages.stream(body).finalMessage();
    assert.deepEqual(final.content, plain.content);
  });
  await check('system blocks and a multi-turn history; the repeated prefix is read from the cache', async () => {
    const turn = {
      ...body,
      system: [{ type: 'text', text: 'You tell short stories.' }, { type: 'text', text: 'Keep them kind.' }],
      messages: [{ role: 'user', content: 'Once upon a time' }, { role: 'assistant', content: 'there was a dog.' },
                 { role: 'user', content: [{ type: 'text', text: 'What happened next?' }] }],
    };
    const a = await client.messages.create(turn);
    const b = await client.messages.create(turn);
    assert.deepEqual(b.content, a.content);
    assert.ok(b.usage.cache_read_input_tokens > 0);
  });
  await check('stop_sequences: stop_reason stop_sequence', async () => {
    const r = await client.messages.create({ ...body, max_tokens: 200, stop_sequences: ['.'] });
    assert.equal(r.stop_reason, 'stop_sequence');
    assert.equal(r.stop_sequence, '.');
    assert.ok(!r.content[0].text.includes('.'));
  });
  await check('count_tokens', async () => {
    const { max_tokens, ...rest } = body;
    const r = await client.messages.countTokens(rest);
    assert.equal(r.input_tokens, plain.usage.input_tokens + (plain.usage.cache_read_input_tokens ?? 0));
  });
  await check('errors: Anthropic error objects with the HTTP status', async () => {
    await assert.rejects(client.messages.create({ ...body, model: 'nope' }),
      (e) => e.status === 404 && e.error?.type === 'error' && e.error?.error?.type === 'not_found_error');
    await assert.rejects(client.messages.create({ ...body, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }),
      (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error' && /messages\[0\]\.content\[0\]/.test(e.error.error.message));
    // tool_choice any forces a call, which this model (no tool-call parser) cannot write.
    await assert.rejects(client.messages.create({ ...body, tool_choice: { type: 'any' }, tools: [{ name: 'f', input_schema: { type: 'object' } }] }),
      (e) => e.status === 400 && /tool-call parser/.test(e.error?.error?.message));
  });
  server.kill('SIGTERM');
}

// ---- the scripted model: thinking and a tool_use round trip
{
  const dir = path.dirname(scriptedConfig);
  const turn1 = JSON.parse(readFileSync(path.join(dir, 'turn1.json'), 'utf8'));
  const turn2 = JSON.parse(readFileSync(path.join(dir, 'turn2.json'), 'utf8'));
  const { server, port } = start(scriptedConfig);
  const client = new Anthropic({ baseURL: `http://127.0.0.1:${await port}`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  let first;
  await check('thinking, text and a schema-typed tool_use; stop_reason tool_use', async () => {
    first = await client.messages.create(turn1);
    assert.deepEqual(first.content.map((b) => b.type), ['thinking', 'text', 'tool_use']);
    assert.match(first.content[0].thinking, /weather in Paris/);
    assert.match(first.content[1].text, /Let me look that up/);
    assert.equal(first.content[2].name, 'get_weather');
    assert.deepEqual(first.content[2].input, { city: 'Paris', days: 3, metric: true });
    assert.equal(first.stop_reason, 'tool_use');
  });
  await check('streamed: thinking_delta, text_delta, input_json_delta reassemble to the message', async () => {
    const r = await collect(await client.messages.create({ ...turn1, stream: true }));
    assert.equal(r.stop, 'tool_use');
    assert.deepEqual(r.blocks.map((b) => b.type), ['thinking', 'text', 'tool_use']);
    assert.equal(r.blocks[0].thinking, first.content[0].thinking);
    assert.equal(r.blocks[1].text, first.content[1].text);
    assert.deepEqual(r.blocks[2].input, first.content[2].input);
  });
  await check('the tool_result round trip: the answer after the result', async () => {
    const r = await client.messages.create(turn2);
    assert.equal(r.stop_reason, 'end_turn');
    assert.equal(r.content.at(-1).type, 'text');
    assert.match(r.content.at(-1).text, /It is sunny in Paris\./);
  });
  server.kill('SIGTERM');
}

if (failed) { console.log(`${failed} check(s) failed`); process.exit(1); }
console.log('all passed');
