// The official OpenAI SDK for Node (`openai`) against `g4tp serve` on the demo model, Responses
// API: client.responses.create whole and streamed (raw events and the ResponseStream helper),
// input as a string or items, instructions, function tools with function_call /
// function_call_output history, max_output_tokens (incomplete), and the stateless refusals
// (previous_response_id, store: true) as typed 400s. Run by tests/e2e/server_responses.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

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
