// Structured output against `g4tp serve` on the demo model (tiny and random-ish outside its golden
// questions, so the constraint is what makes its answers valid): response_format json_schema /
// json_object on chat and completions, /generate json_schema, tool_choice required / named /
// parallel_tool_calls false, streamed tool calls reassembled, and the 400s. Every answer is
// parsed and validated with an independent validator (ajv). Run by tests/e2e/server_structured.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv/dist/2020.js'; // JSON Schema 2020-12: prefixItems, $defs

const base = process.env.G4TP_URL;
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false }); // formats: checked by test_constrain
const post = async (path, body) => {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};
const ask = [{ role: 'user', content: 'Describe something.' }];

// schemas in the style of real APIs: nested objects, enums, arrays, a recursive tree, anyOf
const SCHEMAS = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 30 },
      age: { type: 'integer', minimum: 0, maximum: 150 },
      role: { enum: ['admin', 'editor', 'viewer'] },
      email: { type: 'string', format: 'email', maxLength: 40 },
      address: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, zip: { type: 'string', pattern: '^[0-9]{5}$' } }, required: ['city', 'zip'], additionalProperties: false },
      tags: { type: 'array', items: { type: 'string', maxLength: 10 }, maxItems: 3 },
    },
    required: ['name', 'age', 'role', 'address'],
    additionalProperties: false,
  },
  tree: {
    $defs: { node: { type: 'object', properties: { label: { type: 'string', maxLength: 12 }, children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['label', 'children'], additionalProperties: false } },
    $ref: '#/$defs/node',
  },
  event: {
    type: 'object',
    properties: {
      when: { type: 'string', format: 'date-time' },
      score: { type: 'number', minimum: -1, maximum: 1 },
      kind: { anyOf: [{ type: 'null' }, { type: 'string', enum: ['a', 'b'] }, { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false }] },
      pair: { type: 'array', prefixItems: [{ type: 'boolean' }, { const: 7 }], items: false, minItems: 2 },
    },
    required: ['when', 'score', 'kind', 'pair'],
    additionalProperties: false,
  },
};

const format = (name, schema) => ({ type: 'json_schema', json_schema: { name, schema, strict: true } });

function valid(schema, text, what) {
  let v;
  assert.doesNotThrow(() => { v = JSON.parse(text); }, `${what}: not JSON: ${text}`);
  const check = ajv.compile(schema);
  assert.ok(check(v), `${what}: ${JSON.stringify(check.errors)} in ${text}`);
  return v;
}

for (const [name, schema] of Object.entries(SCHEMAS)) {
  test(`chat json_schema ${name}: every answer validates`, async () => {
    for (let seed = 1; seed <= 4; seed++) {
      const r = await post('/v1/chat/completions', { messages: ask, response_format: format(name, schema), temperature: 1, seed, max_tokens: 1500 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const c = r.body.choices[0];
      assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
      valid(schema, c.message.content, `${name} seed ${seed}`);
    }
  });
}

test('chat json_schema greedy, streaming equals the whole answer', async () => {
  const req = { messages: ask, response_format: format('p', SCHEMAS.person), temperature: 0, max_tokens: 1500 };
  const whole = await post('/v1/chat/completions', req);
  const r = await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...req, stream: true }) });
  let text = '';
  for (const line of (await r.text()).split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, whole.body.choices[0].message.content);
  valid(SCHEMAS.person, text, 'streamed');
});

test('json_object: any object, chat and completions (one prompt and a batch)', async () => {
  const r = await post('/v1/chat/completions', { messages: ask, response_format: { type: 'json_object' }, temperature: 1, seed: 5, max_tokens: 200 });
  assert.equal(r.status, 200);
  const v = JSON.parse(r.body.choices[0].message.content);
  assert.equal(typeof v, 'object');
  assert.ok(!Array.isArray(v) && v !== null);
  const c = await post('/v1/completions', { prompt: 'JSON:', response_format: format('t', SCHEMAS.tree), temperature: 1, seed: 2, max_tokens: 1500 });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  valid(SCHEMAS.tree, c.body.choices[0].text, 'completions');
  const b = await post('/v1/completions', { prompt: ['JSON:', 'A tree:', [2, 105]], response_format: format('t', SCHEMAS.tree), temperature: 1, seed: 2, max_tokens: 1500 });
  assert.equal(b.status, 200, JSON.stringify(b.body));
  assert.equal(b.body.choices.length, 3);
  assert.equal(b.body.choices[0].text, c.body.choices[0].text); /* the first prompt as alone */
  for (const ch of b.body.choices) valid(SCHEMAS.tree, ch.text, `completions batch ${ch.index}`);
});

test('/generate json_schema', async () => {
  const r = await post('/generate', { prompt: 'An event please', json_schema: SCHEMAS.event, temperature: 1, seed: 3, max_new_tokens: 1500 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  valid(SCHEMAS.event, r.body.response, '/generate');
});

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer', minimum: 1, maximum: 7 }, units: { enum: ['c', 'f'] } }, required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {}, additionalProperties: false } } },
];

function checkCalls(calls, names) {
  assert.ok(calls && calls.length >= 1, 'tool calls');
  for (const c of calls) {
    assert.ok(names.includes(c.function.name), c.function.name);
    const t = TOOLS.find((x) => x.function.name === c.function.name);
    valid(t.function.parameters, c.function.arguments, c.function.name);
  }
}

test('tool_choice required, named, parallel_tool_calls false', async () => {
  for (let seed = 1; seed <= 3; seed++) {
    const r = await post('/v1/chat/completions', { messages: ask, tools: TOOLS, tool_choice: 'required', temperature: 1, seed, max_tokens: 200 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.choices[0].finish_reason, 'tool_calls');
    checkCalls(r.body.choices[0].message.tool_calls, ['get_weather', 'now']);
  }
  const n = await post('/v1/chat/completions', { messages: ask, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } }, temperature: 1, seed: 4, max_tokens: 200 });
  checkCalls(n.body.choices[0].message.tool_calls, ['get_weather']);
  // seed 14 makes several calls when they are allowed: with parallel_tool_calls false, one
  const many = await post('/v1/chat/completions', { messages: ask, tools: TOOLS, tool_choice: 'required', temperature: 1, seed: 14, max_tokens: 200 });
  assert.ok(many.body.choices[0].message.tool_calls.length > 1, JSON.stringify(many.body.choices[0].message));
  const one = await post('/v1/chat/completions', { messages: ask, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 14, max_tokens: 200 });
  assert.equal(one.body.choices[0].message.tool_calls.length, 1);
  checkCalls(one.body.choices[0].message.tool_calls, ['get_weather', 'now']);
  const none = await post('/v1/chat/completions', { messages: ask, tools: TOOLS, tool_choice: 'none', temperature: 1, seed: 6, max_tokens: 40 });
  assert.equal(none.status, 200);
  assert.equal(none.body.choices[0].message.tool_calls, undefined);
});

test('streamed tool calls reassemble to the same calls', async () => {
  for (let seed = 1; seed <= 3; seed++) {
    const req = { messages: ask, tools: TOOLS, tool_choice: 'required', temperature: 1, seed, max_tokens: 200 };
    const whole = await post('/v1/chat/completions', req);
    const r = await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...req, stream: true }) });
    const calls = [];
    for (const line of (await r.text()).split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      for (const d of JSON.parse(line.slice(6)).choices[0]?.delta?.tool_calls ?? []) {
        if (!calls[d.index]) { assert.ok(d.id && d.function.name, 'the first delta names the call'); calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: d.function.arguments } }; }
        else { assert.equal(d.id, undefined); calls[d.index].function.arguments += d.function.arguments; }
      }
    }
    const noId = (cs) => cs.map(({ id, ...rest }) => rest); /* ids name their response */
    assert.deepEqual(noId(calls), noId(whole.body.choices[0].message.tool_calls));
  }
});

test('bad input: 400s that name the field', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', schema: { type: 'object' } } }, 'response_format', /json_schema\.schema/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { not: {} } } } } } }, 'response_format.json_schema.schema', /#\/properties\/a: the keyword 'not'/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'strnig' } } } }, 'response_format.json_schema.schema', /'type' must be/],
    [{ response_format: { type: 'json_schema', json_schema: { schema: {} } } }, 'response_format.json_schema.name', /required/],
    [{ response_format: { type: 'xml' } }, 'response_format.type', /must be/],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', maxLength: 100000 } } } }, 'response_format.json_schema.schema', /4096/],
    [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /not among the tools/],
    [{ tool_choice: 'required' }, 'tool_choice', /needs 'tools'/],
    [{ tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice', /must be/],
    [{ tools: TOOLS, parallel_tool_calls: 'no' }, 'parallel_tool_calls', /true or false/],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'string', pattern: '(a)\\1' } } } } }], tool_choice: 'required' }, 'tools[0].function.parameters', /backreferences/],
  ];
  for (const [extra, param, msg] of cases) {
    const r = await post('/v1/chat/completions', { messages: ask, max_tokens: 8, ...extra });
    assert.equal(r.status, 400, JSON.stringify(extra));
    assert.equal(r.body.error.param, param, JSON.stringify(r.body));
    assert.match(r.body.error.message, msg);
  }
  const g = await post('/generate', { prompt: 'x', json_schema: { type: 'object', required: ['a'], additionalProperties: false } });
  assert.equal(g.status, 400);
  assert.equal(g.body.error.param, 'json_schema');
});

// issue 24 items 4, 8, 9 through the APIs

test('vLLM guided_json, guided_regex, guided_choice are enforced; guided_grammar is refused', async () => {
  for (let seed = 1; seed <= 3; seed++) {
    const j = await post('/v1/chat/completions', { messages: ask, guided_json: SCHEMAS.person, guided_decoding_backend: 'xgrammar', temperature: 1, seed, max_tokens: 1500 });
    assert.equal(j.status, 200, JSON.stringify(j.body));
    valid(SCHEMAS.person, j.body.choices[0].message.content, `guided_json seed ${seed}`);
    const r = await post('/v1/completions', { prompt: 'A code:', guided_regex: '[A-Z]{2}-[0-9]{3}', temperature: 1, seed, max_tokens: 50 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.match(r.body.choices[0].text, /^[A-Z]{2}-[0-9]{3}$/);
    const c = await post('/v1/chat/completions', { messages: ask, guided_choice: ['yes', 'no', 'maybe'], temperature: 1, seed, max_tokens: 20 });
    assert.ok(['yes', 'no', 'maybe'].includes(c.body.choices[0].message.content), c.body.choices[0].message.content);
  }
  const g = await post('/v1/chat/completions', { messages: ask, guided_grammar: 'root ::= "a"', max_tokens: 8 });
  assert.equal(g.status, 400);
  assert.equal(g.body.error.param, 'guided_grammar');
  const b = await post('/v1/chat/completions', { messages: ask, guided_json: { type: 'object', properties: { a: { not: {} } } }, max_tokens: 8 });
  assert.equal(b.status, 400);
  assert.equal(b.body.error.param, 'guided_json');
});

test('a const or enum with markup in a chat answer comes back as that string', async () => {
  for (const schema of [{ const: 'x<turn|>y' }, { enum: ['a<|channel>b'] }, { type: 'object', properties: { 'k<eos>': { const: 1 } }, required: ['k<eos>'], additionalProperties: false }]) {
    const r = await post('/v1/chat/completions', { messages: ask, response_format: format('m', schema), temperature: 0, max_tokens: 60 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const m = r.body.choices[0].message;
    assert.equal(m.reasoning_content ?? '', '', JSON.stringify(m));
    valid(schema, m.content, JSON.stringify(schema));
  }
});

test('stop strings with a constrained answer are refused (they would cut the JSON)', async () => {
  const r = await post('/v1/chat/completions', { messages: ask, response_format: format('p', SCHEMAS.person), stop: ['"'], max_tokens: 50 });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.param, 'stop');
  const t = await post('/v1/chat/completions', { messages: ask, tools: TOOLS, tool_choice: 'required', stop: 'x', max_tokens: 50 });
  assert.equal(t.status, 400);
  assert.equal(t.body.error.param, 'stop');
});

test('max_tokens cutting a tool call: no call markup reaches the text (chat, streamed, Responses, Anthropic)', async () => {
  const markup = /<\|tool_call>|call:|<tool_call\|>|<\|"\|>/;
  for (const max of [3, 6, 9]) {
    const req = { messages: ask, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } }, temperature: 0, max_tokens: max };
    const c = await post('/v1/chat/completions', req);
    assert.equal(c.status, 200);
    const ch = c.body.choices[0];
    assert.equal(ch.finish_reason, 'length');
    assert.ok(!markup.test(ch.message.content ?? ''), JSON.stringify(ch.message));
    assert.equal(ch.message.tool_calls, undefined);
    const s = await fetch(base + '/v1/chat/completions', { method: 'POST', body: JSON.stringify({ ...req, stream: true }) });
    const text = await s.text();
    assert.ok(!markup.test(text.replace(/"tool_calls"/g, '')), text);
    const rs = await post('/v1/responses', { input: 'Describe something.', tools: [{ type: 'function', ...TOOLS[0].function }], tool_choice: 'required', temperature: 0, max_output_tokens: max });
    assert.equal(rs.status, 200, JSON.stringify(rs.body));
    assert.ok(!markup.test(JSON.stringify(rs.body.output)), JSON.stringify(rs.body.output));
    assert.ok(!rs.body.output.some((o) => o.type === 'function_call'));
    const an = await post('/v1/messages', { model: 'g4tp-demo', max_tokens: max, temperature: 0, messages: ask,
      tools: [{ name: 'get_weather', input_schema: TOOLS[0].function.parameters }], tool_choice: { type: 'any' } });
    assert.equal(an.status, 200, JSON.stringify(an.body));
    assert.equal(an.body.stop_reason, 'max_tokens');
    assert.ok(!markup.test(JSON.stringify(an.body.content)), JSON.stringify(an.body.content));
    assert.ok(!an.body.content.some((b) => b.type === 'tool_use'));
  }
});
