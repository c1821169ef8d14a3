// The JSON Schema corpus (tests/data/schemas, README.md there) against `g4tp serve` on the demo
// model, validated by ajv with formats on (issue 24 item 19): every test's validity in the corpus
// is what ajv says; every schema the compiler supports gets answers (chat and completions, or a
// tool call) from the demo model under several seeds, and ajv accepts each complete one — the
// grammar must never let through what a validator rejects; the schemas the compiler refuses get
// a 400 that says why. Run by tests/e2e/server_structured.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

const addFormats = addFormatsModule.default ?? addFormatsModule;
const base = process.env.G4TP_URL;
const dir = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'data', 'schemas');
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);

const post = async (p, body) => {
  const r = await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
};
const ask = [{ role: 'user', content: 'Answer in JSON.' }];
const SEEDS = [1, 2, 3, 4];

const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
assert.ok(files.length >= 9, 'the corpus files');

// the value a test's text stands for (tool mode: its data)
const valueOf = (t, mode) => (t.text !== undefined && mode !== 'tool' ? JSON.parse(t.text) : t.data);

for (const f of files) {
  const groups = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
  test(`${f}: the corpus agrees with ajv`, () => {
    for (const g of groups) {
      if (g.refused) continue;
      const check = ajv.compile(g.schema);
      for (const t of g.tests) {
        const v = valueOf(t, g.mode);
        assert.equal(check(v), t.valid, `${g.description}: ${t.description}: ajv says ${check(v)} (${JSON.stringify(check.errors)})`);
      }
    }
  });

  test(`${f}: every answer validates, refusals are 400s`, async () => {
    let validated = 0;
    for (const g of groups) {
      const mode = g.mode ?? 'json';
      const tool = [{ type: 'function', function: { name: 'f', parameters: g.schema } }];
      const rf = { type: 'json_schema', json_schema: { name: 'c', schema: g.schema } };
      const reqs = [];
      for (const seed of SEEDS) {
        if (mode === 'tool') reqs.push(['/v1/chat/completions', { messages: ask, tools: tool, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed, max_tokens: 1500 }]);
        else {
          reqs.push(['/v1/chat/completions', { messages: ask, response_format: rf, temperature: 1, seed, max_tokens: 1500 }]);
          if (mode === 'json') reqs.push(['/v1/completions', { prompt: 'JSON:', response_format: rf, temperature: 1, seed, max_tokens: 1500 }]);
        }
      }
      if (g.refused) {
        const [p, body] = reqs[0];
        const r = await post(p, body);
        assert.equal(r.status, 400, `${g.description}: ${JSON.stringify(r.body)}`);
        assert.ok(r.body.error.message.includes(g.refused), `${g.description}: ${r.body.error.message}`);
        continue;
      }
      const check = ajv.compile(g.schema);
      let done = 0;
      for (const [p, body] of reqs) {
        const r = await post(p, body);
        assert.equal(r.status, 200, `${g.description} ${p}: ${JSON.stringify(r.body)}`);
        const c = r.body.choices[0];
        if (c.finish_reason === 'length') continue; /* a prefix of a valid answer: nothing to validate */
        let v;
        if (mode === 'tool') {
          assert.equal(c.message.tool_calls?.length, 1, `${g.description}: ${JSON.stringify(c.message)}`);
          v = JSON.parse(c.message.tool_calls[0].function.arguments);
        } else {
          const text = p === '/v1/completions' ? c.text : c.message.content;
          assert.doesNotThrow(() => { v = JSON.parse(text); }, `${g.description}: not JSON: ${text}`);
          if (mode === 'chat') assert.ok(!/<\||<turn\|>|<eos>/.test(text), `${g.description}: markup in the answer: ${text}`);
        }
        assert.ok(check(v), `${g.description} ${p} seed ${body.seed}: ajv: ${JSON.stringify(check.errors)} in ${JSON.stringify(v)}`);
        done++;
      }
      assert.ok(done > 0, `${g.description}: no complete answer in ${reqs.length} tries`);
      validated += done;
    }
    assert.ok(validated > 0);
  });
}
