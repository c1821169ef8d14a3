// The official OpenAI SDK for Node against `g4tp serve` on the demo model: chat and completions
// (one prompt or several), non-streaming and streaming, with and without tools, tool-call history, model listing, typed
// errors (400, 401, 404), and an aborted stream. Run by tests/e2e/server_node.sh, which starts
// the server and sets G4TP_URL and G4TP_KEY.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = `${process.env.G4TP_URL}/v1`;
const apiKey = process.env.G4TP_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const ask = (country) => [{ role: 'user', content: `What is the capital of ${country}?` }];
const tools = [{
  type: 'function',
  function: {
    name: 'get_capital', description: 'Capital of a country',
    parameters: { type: 'object', properties: { country: { type: 'string' } }, required: ['country'] },
  },
}];

test('models.list names the demo model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, ['g4tp-demo']);
  assert.equal((await client.models.retrieve('g4tp-demo')).id, 'g4tp-demo');
  await assert.rejects(client.models.retrieve('nope'), (e) => e instanceof OpenAI.NotFoundError);
});

test('chat completion, non-streaming', async () => {
  const r = await client.chat.completions.create({ model: 'g4tp-demo', messages: ask('France'), temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, 'The capital of France is Paris.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat completion, streaming, with usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'g4tp-demo', messages: ask('Japan'), temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta?.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(text, 'The capital of Japan is Tokyo.');
  assert.equal(finish, 'stop');
  assert.ok(n > 3, 'several chunks');
  assert.ok(usage && usage.completion_tokens > 0);
});

test('streaming equals non-streaming (seeded sampling)', async () => {
  const req = { messages: ask('Peru'), temperature: 1.0, seed: 42, max_tokens: 16 };
  const whole = await client.chat.completions.create(req);
  let text = '';
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, whole.choices[0].message.content);
});

test('chat with tools, non-streaming and streaming', async () => {
  const r = await client.chat.completions.create({ messages: ask('France'), tools, tool_choice: 'auto', temperature: 0, max_tokens: 32 });
  const c = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason));
  for (const call of c.message.tool_calls ?? []) {
    assert.equal(call.type, 'function');
    assert.ok(call.id && call.function.name);
    JSON.parse(call.function.arguments);
  }
  if (c.finish_reason !== 'tool_calls') assert.equal(typeof c.message.content, 'string');
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ messages: ask('France'), tools, temperature: 0, max_tokens: 32, stream: true }))
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  assert.equal(finish, c.finish_reason);
});

test('tool-call history: assistant tool_calls and a tool result', async () => {
  const messages = [
    { role: 'system', content: 'Answer briefly.' },
    { role: 'user', content: 'What is the capital of Chile?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_capital', arguments: '{"country":"Chile"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'Santiago' },
  ];
  const r = await client.chat.completions.create({ messages, tools, temperature: 0, max_tokens: 16 });
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('completions, non-streaming and streaming', async () => {
  const r = await client.completions.create({ model: 'g4tp-demo', prompt: 'The capital of', max_tokens: 3, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 3);
  let text = '';
  for await (const chunk of await client.completions.create({ prompt: 'The capital of', max_tokens: 3, temperature: 0, stream: true }))
    text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

test('completions with several prompts (strings and token ids): choices prompt-major', async () => {
  const tk = await fetch(`${process.env.G4TP_URL}/tokenize`, { method: 'POST', headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: 'The capital of Peru is' }) });
  const ids = (await tk.json()).tokens;
  const prompts = ['The capital of France is', ids];
  const req = { model: 'g4tp-demo', max_tokens: 4, temperature: 1, seed: 3, n: 2, echo: true, logprobs: 1 };
  const r = await client.completions.create({ ...req, prompt: prompts });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  const alone = [];
  for (const p of prompts) alone.push(await client.completions.create({ ...req, prompt: p }));
  for (let k = 0; k < 2; k++)
    for (let i = 0; i < 2; i++) {
      const got = r.choices[2 * k + i], want = alone[k].choices[i];
      assert.equal(got.text, want.text);
      assert.deepEqual(got.logprobs, want.logprobs);
    }
  assert.ok(r.choices[2].text.startsWith('The capital of Peru is'), r.choices[2].text);
  assert.equal(r.usage.prompt_tokens, alone[0].usage.prompt_tokens + alone[1].usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, alone.reduce((a, x) => a + x.usage.completion_tokens, 0));
  const texts = ['', '', '', ''];
  for await (const chunk of await client.completions.create({ ...req, prompt: prompts, stream: true }))
    for (const c of chunk.choices) texts[c.index] += c.text;
  assert.deepEqual(texts, r.choices.map((c) => c.text));
});

test('errors arrive as typed SDK errors', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'gpt-5', messages: ask('France') }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
  await assert.rejects(client.chat.completions.create({ messages: [{ role: 'robot', content: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'messages[0].role');
  await assert.rejects(client.chat.completions.create({ messages: ask('France'), max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  const wrong = new OpenAI({ baseURL, apiKey: 'not-the-key', maxRetries: 0 });
  await assert.rejects(wrong.chat.completions.create({ messages: ask('France') }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('an aborted stream frees its sequence', async () => {
  const stream = await client.chat.completions.create({ messages: ask('Italy'), stream: true, max_tokens: 1000, temperature: 1.5, seed: 3 });
  let got = 0;
  for await (const _ of stream) if (++got === 2) { stream.controller.abort(); break; }
  assert.equal(got, 2);
  let running = -1;
  for (let i = 0; i < 100 && running !== 0; i++) {
    const m = await (await fetch(`${process.env.G4TP_URL}/metrics`)).text();
    running = Number(/^g4tp_num_requests_running (\d+)/m.exec(m)[1]);
    if (running) await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(running, 0);
});
