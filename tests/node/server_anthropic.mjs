// The official Anthropic SDK for Node (@anthropic-ai/sdk) against `g4tp serve` on the demo
// model: messages.create whole and streamed (raw events and the MessageStream helper), system
// prompts, stop sequences, thinking, tools with tool_use / tool_result history, tool_choice
// any / tool / none with disable_parallel_tool_use, output_config.format json_schema (inputs
// and text validated by ajv), count_tokens,
// and typed errors in Anthropic's shape (400, 401, 404). Run by tests/e2e/server_anthropic.sh,
// which starts the server and sets G4TP_URL and G4TP_KEY (sent as x-api-key).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv/dist/2020.js';

const client = new Anthropic({ baseURL: process.env.G4TP_URL, apiKey: process.env.G4TP_KEY, maxRetries: 0, timeout: 120000 });
const model = 'g4tp-demo';
const ask = (country) => [{ role: 'user', content: `What is the capital of ${country}?` }];
const tools = [{
  name: 'get_capital', description: 'Capital of a country',
  input_schema: { type: 'object', properties: { country: { type: 'string' } }, required: ['country'] },
}];

test('messages.create, whole answer', async () => {
  const m = await client.messages.create({ model, max_tokens: 64, temperature: 0, messages: ask('France') });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.ok(m.id.startsWith('msg_'));
  assert.deepEqual(m.content, [{ type: 'text', text: 'The capital of France is Paris.' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.output_tokens > 0 && m.usage.input_tokens + m.usage.cache_read_input_tokens > 0);
});

test('system prompt (text blocks) and count_tokens', async () => {
  const req = { model, system: [{ type: 'text', text: 'Answer in one sentence.' }], messages: ask('Japan') };
  const m = await client.messages.create({ ...req, max_tokens: 64, temperature: 0 });
  assert.equal(m.content[0].text, 'The capital of Japan is Tokyo.');
  const c = await client.messages.countTokens(req);
  assert.equal(c.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('streaming: raw events in order, and the MessageStream helper', async () => {
  const stream = await client.messages.create({ model, max_tokens: 64, temperature: 0, messages: ask('Peru'), stream: true });
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.equal(types.at(-3), 'content_block_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(text, 'The capital of Peru is Lima.');
  const helper = client.messages.stream({ model, max_tokens: 64, temperature: 0, messages: ask('Peru') });
  let streamed = '';
  helper.on('text', (t) => { streamed += t; });
  const final = await helper.finalMessage();
  assert.equal(streamed, text);
  assert.deepEqual(final.content, [{ type: 'text', text, citations: undefined }].map(({ citations, ...b }) => b));
  assert.equal(final.stop_reason, 'end_turn');
  assert.ok(final.usage.output_tokens > 0);
});

test('stop_sequences: stop_reason stop_sequence with the string', async () => {
  const m = await client.messages.create({ model, max_tokens: 64, temperature: 0, messages: ask('France'), stop_sequences: ['Paris', 'Rome'] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, 'Paris');
  assert.equal(m.content[0].text, 'The capital of France is');
  const s = client.messages.stream({ model, max_tokens: 64, temperature: 0, messages: ask('France'), stop_sequences: ['Paris'] });
  const f = await s.finalMessage();
  assert.equal(f.stop_reason, 'stop_sequence');
  assert.equal(f.stop_sequence, 'Paris');
});

test('max_tokens cuts the answer: stop_reason max_tokens', async () => {
  const m = await client.messages.create({ model, max_tokens: 3, temperature: 0, messages: ask('France') });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 3);
});

test('thinking enabled', async () => {
  const m = await client.messages.create({ model, max_tokens: 1500, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: ask('France') });
  assert.ok(m.content.some((b) => b.type === 'text' && b.text === 'The capital of France is Paris.'));
  for (const b of m.content) assert.ok(['thinking', 'text'].includes(b.type));
});

test('tools, with tool_use and tool_result history (whole and streamed)', async () => {
  const messages = [
    ...ask('France'),
    { role: 'assistant', content: [{ type: 'text', text: 'Let me look it up.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_capital', input: { country: 'France' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'Paris' }] }] },
  ];
  const m = await client.messages.create({ model, max_tokens: 32, temperature: 0, tools, tool_choice: { type: 'auto' }, messages });
  assert.equal(m.type, 'message');
  assert.ok(m.content.length >= 1 && m.content.every((b) => ['text', 'tool_use', 'thinking'].includes(b.type)));
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason));
  const s = client.messages.stream({ model, max_tokens: 32, temperature: 0, tools, messages });
  const f = await s.finalMessage();
  assert.deepEqual(f.content, m.content);
  const c = await client.messages.countTokens({ model, tools, messages });
  assert.equal(c.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  const none = await client.messages.countTokens({ model, tools, tool_choice: { type: 'none' }, messages });
  assert.ok(none.input_tokens < c.input_tokens, 'tool_choice none keeps the tools out of the prompt');
});

test('typed errors in the Anthropic shape', async () => {
  await assert.rejects(client.messages.create({ model: 'claude-nope', max_tokens: 8, messages: ask('France') }), (e) => {
    assert.ok(e instanceof Anthropic.NotFoundError);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'not_found_error');
    return true;
  });
  await assert.rejects(client.messages.create({ model, max_tokens: 0, messages: ask('France') }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError);
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.error.error.message, /max_tokens/);
    return true;
  });
  await assert.rejects(client.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /image/.test(e.error.error.message));
  const wrong = new Anthropic({ baseURL: process.env.G4TP_URL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model, max_tokens: 8, messages: ask('France') }), (e) => {
    assert.ok(e instanceof Anthropic.AuthenticationError);
    assert.equal(e.error.error.type, 'authentication_error');
    return true;
  });
});

// tool_choice any / tool / none and disable_parallel_tool_use: enforced by the grammar on the
// demo model (which calls tools only when made to); every input validated by ajv
const ajv = new Ajv({ strict: false, allErrors: true });
const wtools = [
  { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer', minimum: 1, maximum: 7 }, units: { enum: ['c', 'f'] } }, required: ['city', 'days'], additionalProperties: false } },
  { name: 'now', description: 'The time', input_schema: { type: 'object', properties: {}, additionalProperties: false } },
];
const say = [{ role: 'user', content: 'Describe something.' }];
function checkUses(m, names) {
  // calls may repeat until max_tokens cuts one: then only the whole ones before it count
  const uses = m.stop_reason === 'max_tokens' ? m.content.filter((b) => b.type === 'tool_use') : m.content;
  if (m.stop_reason !== 'max_tokens') assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
  assert.ok(uses.length >= 1 && uses.every((b) => b.type === 'tool_use'), JSON.stringify(m.content));
  for (const b of uses) {
    assert.ok(names.includes(b.name), b.name);
    const check = ajv.compile(wtools.find((t) => t.name === b.name).input_schema);
    assert.ok(check(b.input), `${b.name}: ${JSON.stringify(check.errors)} in ${JSON.stringify(b.input)}`);
  }
  return uses.length;
}

test('tool_choice any, tool, none; disable_parallel_tool_use', async () => {
  for (let k = 0; k < 3; k++)
    checkUses(await client.messages.create({ model, max_tokens: 200, temperature: 1, tools: wtools, tool_choice: { type: 'any' }, messages: say }), ['get_weather', 'now']);
  for (let k = 0; k < 3; k++)
    checkUses(await client.messages.create({ model, max_tokens: 200, temperature: 1, tools: wtools, tool_choice: { type: 'tool', name: 'get_weather' }, messages: say }), ['get_weather']);
  // unconstrained, about a third of these answers hold several calls
  for (let k = 0; k < 10; k++) {
    const m = await client.messages.create({ model, max_tokens: 200, temperature: 1, tools: wtools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: say });
    assert.equal(checkUses(m, ['get_weather', 'now']), 1, JSON.stringify(m.content));
  }
  const none = await client.messages.create({ model, max_tokens: 40, temperature: 1, tools: wtools, tool_choice: { type: 'none' }, messages: say });
  assert.ok(none.content.every((b) => b.type === 'text'));
  assert.notEqual(none.stop_reason, 'tool_use');
});

test('tool_choice tool, streamed: the same blocks as the whole answer', async () => {
  const req = { model, max_tokens: 200, temperature: 0, tools: wtools, tool_choice: { type: 'tool', name: 'get_weather' }, messages: say };
  const m = await client.messages.create(req);
  checkUses(m, ['get_weather']);
  const f = await client.messages.stream(req).finalMessage();
  assert.deepEqual(f.content.map(({ id, ...b }) => b), m.content.map(({ id, ...b }) => b));
  assert.equal(f.stop_reason, 'tool_use');
});

test('tool_choice errors', async () => {
  const bad = [
    [{ tools: wtools, tool_choice: { type: 'tool', name: 'nope' } }, /not among the tools/],
    [{ tools: wtools, tool_choice: { type: 'tool' } }, /needs a string 'name'/],
    [{ tool_choice: { type: 'any' } }, /needs 'tools'/],
    [{ tools: wtools, tool_choice: { type: 'any', disable_parallel_tool_use: 'yes' } }, /true or false/],
    [{ tools: wtools, tool_choice: { type: 'sometimes' } }, /must be/],
    [{ tools: [{ name: 'f', input_schema: { type: 'object', properties: { x: { not: {} } } } }], tool_choice: { type: 'any' } }, /'not' is not supported/],
  ];
  for (const [extra, msg] of bad)
    await assert.rejects(client.messages.create({ model, max_tokens: 8, messages: say, ...extra }), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, JSON.stringify(extra));
      assert.match(e.error.error.message, msg);
      return true;
    });
});

test('output_config.format json_schema: the text validates, streamed the same', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer', minimum: 1, maximum: 7 }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } }, required: ['city', 'days', 'tags'], additionalProperties: false };
  const check = ajv.compile(schema);
  for (let k = 0; k < 4; k++) {
    const m = await client.messages.create({ model, max_tokens: 300, temperature: 1, output_config: { format: { type: 'json_schema', schema } }, messages: say });
    assert.equal(m.stop_reason, 'end_turn', JSON.stringify(m.content));
    assert.equal(m.content.length, 1);
    assert.ok(check(JSON.parse(m.content[0].text)), `${JSON.stringify(check.errors)} in ${m.content[0].text}`);
  }
  const req = { model, max_tokens: 300, temperature: 0, output_config: { format: { type: 'json_schema', schema } }, messages: say };
  const m = await client.messages.create(req);
  const f = await client.messages.stream(req).finalMessage();
  assert.equal(f.content[0].text, m.content[0].text);
  await assert.rejects(client.messages.create({ ...req, output_config: { format: { type: 'json_schema', schema: { not: {} } } } }),
    (e) => e instanceof Anthropic.BadRequestError && /'not' is not supported/.test(e.error.error.message));
});
