// The official openai npm client (pinned in tools/oracle/package.json) against `kiln serve` on
// 127.0.0.1 with the embedded default configuration. Usage: node openai_client_test.mjs KILN CONFIG
// Exit 77 (skip) when the client is not installed.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';

const [kiln, config] = process.argv.slice(2);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let OpenAI;
try {
  OpenAI = createRequire(path.join(root, '.cache/oracle/package.json'))('openai');
} catch {
  console.log('SKIP: the openai npm package is not installed (scripts/setup.sh installs it)');
  process.exit(77);
}

const server = spawn(kiln, ['serve', '--config', config, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
const port = await new Promise((resolve, reject) => {
  let log = '';
  const timer = setTimeout(() => reject(new Error('kiln serve did not start within 60 s:\n' + log)), 60000);
  server.stderr.on('data', (d) => {
    log += d;
    const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
    if (m) { clearTimeout(timer); resolve(Number(m[1])); }
  });
  server.on('exit', (code) => reject(new Error(`kiln serve exited with ${code}:\n${log}`)));
});

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const model = 'stories260K';
let failed = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok   ${name}`); } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}

await check('models.list', async () => {
  const page = await client.models.list();
  assert.equal(page.data[0].id, model);
});

const chatBody = { model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 24, temperature: 0 };
let chatText = '';
await check('chat, not streamed', async () => {
  const r = await client.chat.completions.create(chatBody);
  chatText = r.choices[0].message.content;
  assert.ok(chatText.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
});

await check('chat, streamed: the same text, usage last', async () => {
  const stream = await client.chat.completions.create({ ...chatBody, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chatText);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 24);
});

await check('completions: stop string across tokens', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [' girl'] });
  assert.equal(r.choices[0].text, ', there was a little');
  assert.equal(r.choices[0].finish_reason, 'stop');
});

await check('completions, streamed with a seed: reproducible', async () => {
  const body = { model, prompt: 'Once upon a time', max_tokens: 30, temperature: 1, seed: 42 };
  const a = (await client.completions.create(body)).choices[0].text;
  let b = '';
  for await (const chunk of await client.completions.create({ ...body, stream: true })) b += chunk.choices[0]?.text ?? '';
  assert.equal(a, b);
});

await check('logprobs', async () => {
  const r = await client.chat.completions.create({ ...chatBody, max_tokens: 3, logprobs: true, top_logprobs: 2 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 3);
  for (const t of lp) {
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.logprob <= 0);
  }
});

async function expectError(name, body, status, param) {
  await check(name, async () => {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.equal(e.status, status, String(e));
      if (param) assert.equal(e.param ?? e.error?.param, param, JSON.stringify(e.error));
      return true;
    });
  });
}
await expectError('unknown model is 404', { ...chatBody, model: 'nope' }, 404, 'model');
await expectError('temperature out of range is 400', { ...chatBody, temperature: 5 }, 400, 'temperature');
await expectError('top_logprobs over 20 is 400', { ...chatBody, logprobs: true, top_logprobs: 21 }, 400, 'top_logprobs');
await expectError('wrong type is 400', { ...chatBody, max_tokens: 'many' }, 400, 'max_tokens');
await expectError('tool_choice required on a model without a tool-call parser is 400',
  { ...chatBody, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], tool_choice: 'required' },
  400, 'tool_choice');

// The Responses API (/v1/responses) through the client's own helpers.
const respBody = { model, input: 'Tell me a story', max_output_tokens: 24, temperature: 0 };
let respText = '';
await check('responses.create: the chat route\'s text for the same conversation', async () => {
  const r = await client.responses.create(respBody);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output_text, chatText);
  assert.equal(r.usage.output_tokens, 24);
  respText = r.output_text;
});

await check('responses.stream: its final response is the non-streamed one', async () => {
  const stream = client.responses.stream(respBody);
  let deltas = '';
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const final = await stream.finalResponse();
  assert.equal(final.output_text, respText);
  assert.equal(deltas, respText);
  assert.equal(final.status, 'incomplete');
});

await check('responses: previous_response_id reuses the cached prefix; retrieve and delete', async () => {
  const story = 'Once upon a time there was a little girl named Lily who loved to play in the park with her friends';
  const a = await client.responses.create({ model, input: story, max_output_tokens: 16, temperature: 0 });
  const b = await client.responses.create({ model, previous_response_id: a.id, input: 'And then?', max_output_tokens: 8, temperature: 0 });
  assert.equal(b.previous_response_id, a.id);
  assert.ok(b.usage.input_tokens > a.usage.input_tokens + 16);
  assert.ok(b.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(b.usage));
  const got = await client.responses.retrieve(a.id);
  assert.equal(got.id, a.id);
  assert.equal(got.output_text, a.output_text);
  await client.responses.delete(a.id);
  await assert.rejects(client.responses.retrieve(a.id), (e) => e instanceof OpenAI.APIError && e.status === 404);
});

await check('responses: strict text.format output validates', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 8 } }, required: ['name'], additionalProperties: false };
  const r = await client.responses.create({ model, input: 'Name a cat', max_output_tokens: 64, temperature: 0.7, seed: 3,
    text: { format: { type: 'json_schema', name: 'cat', schema, strict: true } } });
  const v = JSON.parse(r.output_text);
  assert.deepEqual(Object.keys(v), ['name']);
  assert.ok(typeof v.name === 'string' && [...v.name].length <= 8);
});

await check('responses: a function call round trip through function_call_output', async () => {
  const qwen = 'tiny-qwen3.5';
  const tools = [{ type: 'function', name: 'get_weather', strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 6 } }, required: ['city'], additionalProperties: false } }];
  const a = await client.responses.create({ model: qwen, input: 'Weather in Paris?', tools, tool_choice: 'required',
    max_output_tokens: 200, temperature: 0, reasoning: { effort: 'minimal' } });
  const call = a.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(a.output));
  assert.equal(call.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  const b = await client.responses.create({ model: qwen, previous_response_id: a.id, tools, max_output_tokens: 4, temperature: 0,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' }] });
  assert.ok(['completed', 'incomplete'].includes(b.status));
  assert.ok(b.usage.input_tokens > a.usage.input_tokens);
});

await check('responses: errors are APIErrors naming the field', async () => {
  await assert.rejects(client.responses.create({ model, input: 'x', tools: [{ type: 'web_search' }] }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === 'tools[0].type');
  await assert.rejects(client.responses.create({ model, input: 'x', previous_response_id: 'resp_none' }),
    (e) => e instanceof OpenAI.APIError && e.status === 404);
});

server.kill('SIGTERM');
await new Promise((r) => server.on('exit', r));
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
