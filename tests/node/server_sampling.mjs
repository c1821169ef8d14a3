// The sampling fields through the official OpenAI SDK for Node against `g4tp serve` on the demo
// model (issue 27 item 1, issue 24 item 8): logit_bias bans and forces tokens (chat and
// completions), the logprobs describe the adjusted distribution, frequency / presence /
// repetition penalties change a seeded answer and stay reproducible, the same seed gives the same
// tokens alone or among concurrent requests, min_tokens holds the end back, and bad values are
// typed 400s naming the field. Run by tests/e2e/server_sampling.sh (sets G4TP_URL, G4TP_KEY).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `${process.env.G4TP_URL}/v1`, apiKey: process.env.G4TP_KEY, maxRetries: 0, timeout: 120000 });
const france = [{ role: 'user', content: 'What is the capital of France?' }];

// The id of a text that is one token (the server's /tokenize).
async function tokenId(text) {
  const r = await fetch(`${process.env.G4TP_URL}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${process.env.G4TP_KEY}` },
    body: JSON.stringify({ prompt: text }),
  });
  const j = await r.json();
  assert.equal(j.count, 1, `${JSON.stringify(text)} is one token`);
  return j.tokens[0];
}

const chat = (extra) => client.chat.completions.create({ model: 'g4tp-demo', messages: france, temperature: 0, ...extra });

test('logit_bias -100 on the greedy answer\'s first token changes the answer; the logprobs are of the adjusted distribution', async () => {
  const plain = await chat({ logprobs: true, top_logprobs: 3 });
  assert.equal(plain.choices[0].message.content, 'The capital of France is Paris.');
  const first = plain.choices[0].logprobs.content[0];
  assert.equal(first.token, 'The');
  const banned = await chat({ logprobs: true, top_logprobs: 3, logit_bias: { [await tokenId('The')]: -100 } });
  const c = banned.choices[0];
  assert.notEqual(c.message.content, plain.choices[0].message.content);
  const f = c.logprobs.content[0];
  assert.notEqual(f.token, 'The');
  assert.ok(!f.top_logprobs.some((t) => t.token === 'The'), 'the banned token has probability 0');
  // the runner-up of the plain row: its logprob grew once the winner's mass was gone
  const before = first.top_logprobs.find((t) => t.token === f.token);
  assert.ok(before && f.logprob > before.logprob);
});

test('logit_bias +100 forces a token, in chat and completions', async () => {
  const paris = await tokenId(' Paris');
  const r = await chat({ max_tokens: 3, logit_bias: { [paris]: 100 } });
  assert.equal(r.choices[0].message.content, 'Paris Paris Paris');
  const c = await client.completions.create({ model: 'g4tp-demo', prompt: 'The capital of France is', max_tokens: 3, temperature: 0, logit_bias: { [paris]: 100 } });
  assert.equal(c.choices[0].text, ' Paris Paris Paris');
});

// min_tokens past the end of the demo's short answer: it repeats itself there (Guinea. Guinea.)
test('frequency / presence / repetition penalties change the answer, greedy and seeded; the same seed and settings give the same text', async () => {
  const req = { model: 'g4tp-demo', messages: france, temperature: 0, min_tokens: 32, max_tokens: 32 };
  const text = async (extra) => (await client.chat.completions.create({ ...req, ...extra })).choices[0].message.content;
  const plain = await text({});
  assert.match(plain, /Guinea\. Guinea\./);
  for (const pen of [{ frequency_penalty: 2 }, { presence_penalty: 2 }, { repetition_penalty: 2 }]) {
    const a = await text(pen);
    assert.notEqual(a, plain, JSON.stringify(pen));
    assert.ok(a.startsWith('The capital of France is Paris.'));
    assert.equal(await text(pen), a);
  }
  const seeded = { temperature: 1, seed: 5 };
  const s0 = await text(seeded), s1 = await text({ ...seeded, frequency_penalty: 2 });
  assert.notEqual(s0, s1);
  assert.equal(await text({ ...seeded, frequency_penalty: 2 }), s1);
  assert.equal(await text(seeded), s0);
});

test('seed: the same tokens alone and among concurrent requests, streamed or not', async () => {
  const req = { model: 'g4tp-demo', messages: france, temperature: 1, seed: 123, min_tokens: 24, max_tokens: 24, frequency_penalty: 0.5 };
  const alone = (await client.chat.completions.create(req)).choices[0].message.content;
  const others = [7, 8, 9].map((s) => client.chat.completions.create({ ...req, seed: s }));
  const again = await Promise.all([client.chat.completions.create(req), ...others, client.chat.completions.create(req)]);
  assert.equal(again[0].choices[0].message.content, alone);
  assert.equal(again[4].choices[0].message.content, alone);
  let text = '';
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, alone);
});

test('min_tokens holds the end of the answer back (vLLM\'s extension, sent in the body)', async () => {
  const plain = await chat({});
  const r = await chat({ min_tokens: 12, max_tokens: 30 });
  assert.ok(plain.usage.completion_tokens < 12);
  assert.ok(r.usage.completion_tokens >= 12, `${r.usage.completion_tokens} tokens`);
  assert.ok(r.choices[0].message.content.startsWith('The capital of France is Paris.'));
});

test('bad values are 400s naming the field', async () => {
  const cases = [
    [{ frequency_penalty: 2.5 }, 'frequency_penalty'],
    [{ presence_penalty: -3 }, 'presence_penalty'],
    [{ repetition_penalty: 0 }, 'repetition_penalty'],
    [{ logit_bias: { 999999: 5 } }, 'logit_bias'],
    [{ logit_bias: { 5: 101 } }, 'logit_bias'],
    [{ logit_bias: { x: 1 } }, 'logit_bias'],
    [{ min_tokens: 40, max_tokens: 30 }, 'min_tokens'],
  ];
  for (const [extra, param] of cases)
    await assert.rejects(chat(extra), (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param, JSON.stringify(extra));
  await assert.rejects(client.completions.create({ model: 'g4tp-demo', prompt: 'x', frequency_penalty: -2.5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'frequency_penalty');
});
