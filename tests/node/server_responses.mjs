// The official OpenAI SDK for Node (`openai`) against `g4tp serve` on the demo model, Responses
// API: client.responses.create whole and streamed (raw events and the ResponseStream helper),
// input as a string or items, instructions, function tools with function_call /
// function_call_output history, tool_choice required / named, parallel_tool_calls false and
// text.format json_schema / json_object (outputs validated by ajv), max_output_tokens
// (incomplete), and the stateless refusals
// (previous_response_id, store: true) as typed 400s. Run by tests/e2e/server_responses.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv/dist/2020.js';

const client = new OpenAI({ baseURL: `${process.env.G4TP_URL}/v1`, apiKey: process.env.G4TP_KEY, maxRetries: 0, timeout: 120000 });
const model = 'g4tp-demo';
const tools = [{
  type: 'function', name: 'get_capital', description: 'Capital of a country', strict: true,
  parameters: { type: 'object', properties: { country: { type: 'string' } }, required: ['country'], additionalProperties: false },
}];

test('responses.create with a string input', async () => {
  const r = await client.responses.create({ model, input: 'What is the capital of France?', temperature: 0, store: false });
  assert.equal(r.object, 'response');
  assert.ok(r.id.startsWith('resp_'));
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'The capital of France is Paris.');
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.store, false);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

test('instructions and message items', async () => {
  const r = await client.responses.create({
    model, temperature: 0, instructions: 'Answer in one sentence.',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is the capital of Japan?' }] }],
  });
  assert.equal(r.output_text, 'The capital of Japan is Tokyo.');
  assert.equal(r.instructions, 'Answer in one sentence.');
});

test('streaming: events in order, deltas add up, the ResponseStream helper', async () => {
  const stream = await client.responses.create({ model, input: 'What is the capital of Peru?', temperature: 0, stream: true });
  const types = [];
  let text = '', final = null, seq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1);
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') final = ev.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
  assert.equal(text, 'The capital of Peru is Lima.');
  assert.equal(final.output[0].content[0].text, text);
  const helper = client.responses.stream({ model, input: 'What is the capital of Peru?', temperature: 0 });
  let deltas = '';
  helper.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const done = await helper.finalResponse();
  assert.equal(deltas, text);
  assert.equal(done.output_text, text);
  assert.equal(done.status, 'completed');
});

test('function tools with function_call / function_call_output history', async () => {
  const input = [
    { role: 'user', content: 'What is the capital of France?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_capital', arguments: JSON.stringify({ country: 'France' }) },
    { type: 'function_call_output', call_id: 'call_1', output: 'Paris' },
  ];
  const r = await client.responses.create({ model, input, tools, tool_choice: 'auto', temperature: 0, max_output_tokens: 24 });
  assert.ok(['completed', 'incomplete'].includes(r.status));
  assert.ok(r.output.length >= 1 && r.output.every((o) => ['message', 'function_call', 'reasoning'].includes(o.type)));
  assert.equal(r.tools.length, 1);
  const s = client.responses.stream({ model, input, tools, temperature: 0, max_output_tokens: 24 });
  const f = await s.finalResponse();
  const gist = (out) => out.map((o) => [o.type, o.status, o.type === 'message' ? o.content.map((c) => c.text).join('') : o.type === 'function_call' ? o.name + o.arguments : '']);
  assert.deepEqual(gist(f.output), gist(r.output));
});

test('max_output_tokens: incomplete', async () => {
  const r = await client.responses.create({ model, input: 'What is the capital of France?', temperature: 0, max_output_tokens: 3 });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 3);
});

test('stateless: previous_response_id and store are clear 400s', async () => {
  await assert.rejects(client.responses.create({ model, input: 'hi', previous_response_id: 'resp_123' }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.param, 'previous_response_id');
    assert.match(e.message, /stateless/);
    return true;
  });
  await assert.rejects(client.responses.create({ model, input: 'hi', store: true }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'store');
  await assert.rejects(client.responses.create({ model, input: [{ type: 'input_image', image_url: 'x' }] }), (e) => e instanceof OpenAI.BadRequestError);
  await assert.rejects(client.responses.create({ model: 'nope', input: 'hi' }), (e) => e instanceof OpenAI.NotFoundError);
});

// tool_choice required / named, parallel_tool_calls false and text.format json_schema /
// json_object: enforced by the grammar on the demo model; every output validated by ajv
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
const wtools = [
  { type: 'function', name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'], additionalProperties: false } },
  { type: 'function', name: 'now', description: 'The time', parameters: { type: 'object', properties: {}, additionalProperties: false } },
];
const say = 'Describe something.';
function checkCalls(r, names) {
  // calls may repeat until max_output_tokens cuts one: then only the whole ones before it count
  const calls = r.status === 'incomplete' ? r.output.filter((o) => o.type === 'function_call') : r.output;
  assert.ok(calls.length >= 1 && calls.every((o) => o.type === 'function_call'), JSON.stringify(r.output));
  for (const o of calls) {
    assert.ok(names.includes(o.name), o.name);
    const check = ajv.compile(wtools.find((t) => t.name === o.name).parameters);
    const args = JSON.parse(o.arguments);
    assert.ok(check(args), `${o.name}: ${JSON.stringify(check.errors)} in ${o.arguments}`);
  }
  return calls.length;
}
const person = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 20 }, age: { type: 'integer', minimum: 0, maximum: 120 }, tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 } },
  required: ['name', 'age', 'tags'], additionalProperties: false,
};

test('tool_choice required, named; parallel_tool_calls false', async () => {
  for (let k = 0; k < 3; k++)
    checkCalls(await client.responses.create({ model, input: say, temperature: 1, tools: wtools, tool_choice: 'required', max_output_tokens: 200 }), ['get_weather', 'now']);
  for (let k = 0; k < 3; k++)
    checkCalls(await client.responses.create({ model, input: say, temperature: 1, tools: wtools, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200 }), ['get_weather']);
  for (let k = 0; k < 10; k++) { // unconstrained, about a third of these answers hold several calls
    const r = await client.responses.create({ model, input: say, temperature: 1, tools: wtools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 200 });
    assert.equal(checkCalls(r, ['get_weather', 'now']), 1, JSON.stringify(r.output));
    assert.equal(r.parallel_tool_calls, false);
  }
  const none = await client.responses.create({ model, input: say, temperature: 1, tools: wtools, tool_choice: 'none', max_output_tokens: 40 });
  assert.ok(none.output.every((o) => o.type !== 'function_call'));
});

test('text.format json_schema and json_object: outputs validate, streamed the same', async () => {
  const format = { type: 'json_schema', name: 'person', schema: person, strict: true };
  for (let k = 0; k < 4; k++) {
    const r = await client.responses.create({ model, input: say, temperature: 1, text: { format }, max_output_tokens: 300 });
    assert.equal(r.status, 'completed', JSON.stringify(r.output));
    const check = ajv.compile(person);
    assert.ok(check(JSON.parse(r.output_text)), `${JSON.stringify(check.errors)} in ${r.output_text}`);
    assert.deepEqual(r.text.format, format);
  }
  const req = { model, input: say, temperature: 0, text: { format }, max_output_tokens: 300 };
  const whole = await client.responses.create(req);
  let deltas = '';
  const s = client.responses.stream(req);
  s.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const done = await s.finalResponse();
  assert.equal(deltas, whole.output_text);
  assert.equal(done.output_text, whole.output_text);
  let objects = 0; // any object: its strings are unbounded, so some answers run out of tokens
  for (let k = 0; k < 8; k++) {
    const o = await client.responses.create({ model, input: say, temperature: 1, text: { format: { type: 'json_object' } }, max_output_tokens: 200 });
    assert.ok(o.output_text.startsWith('{'), o.output_text);
    if (o.status !== 'completed') continue;
    const v = JSON.parse(o.output_text);
    assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), o.output_text);
    objects++;
  }
  assert.ok(objects >= 1, 'some json_object answers complete');
});

test('tool_choice and text.format errors: 400s naming the field', async () => {
  const bad = [
    [{ tools: wtools, tool_choice: { type: 'function', name: 'nope' } }, 'tool_choice', /not among the tools/],
    [{ tool_choice: 'required' }, 'tool_choice', /needs 'tools'/],
    [{ tools: wtools, tool_choice: 'sometimes' }, 'tool_choice', /must be/],
    [{ tools: wtools, tool_choice: { type: 'file_search' } }, 'tool_choice', /not supported/],
    [{ tools: wtools, parallel_tool_calls: 'no' }, 'parallel_tool_calls', /true or false/],
    [{ text: { format: { type: 'json_schema', schema: person } } }, 'text.format.name', /required/],
    [{ text: { format: { type: 'json_schema', name: 'p', schema: { type: 'object', properties: { a: { not: {} } } } } } }, 'text.format.schema', /'not' is not supported/],
    [{ text: { format: { type: 'xml' } } }, 'text.format.type', /must be/],
    [{ text: { schema: person } }, 'text', /text\.format\.schema/],
    [{ tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: { x: { type: 'string', pattern: '(a)\\1' } } } }], tool_choice: 'required' }, 'tools[0].parameters', /backreferences/],
    [{ tools: [{ type: 'function', name: 'bad name', parameters: {} }] }, 'tools[0]', /white space/],
  ];
  for (const [extra, param, msg] of bad)
    await assert.rejects(client.responses.create({ model, input: say, max_output_tokens: 8, ...extra }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, JSON.stringify(extra));
      assert.equal(e.param, param, JSON.stringify(extra) + ' ' + e.message);
      assert.match(e.message, msg);
      return true;
    });
});
