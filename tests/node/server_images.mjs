// Images through the official SDKs (issue 25 item 4, 7): the OpenAI SDK (chat image_url data
// URL, whole and streamed; Responses input_image), the Anthropic SDK (base64 image block,
// count_tokens) and the Vercel AI SDK (generateText / streamText with an image part, over
// @ai-sdk/openai-compatible) against `g4tp serve` on tests/data/vision/demo_vision (the demo's
// text weights with a random vision tower: it still answers the France question). Every API
// must count the same prompt tokens for the same image and question, image tokens included.
// Run by tests/e2e/server_images.sh (G4TP_URL, G4TP_KEY, G4TP_MODEL, G4TP_IMAGE, G4TP_TEXT_TOKENS).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { generateText, streamText } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';

const url = process.env.G4TP_URL, apiKey = process.env.G4TP_KEY, model = process.env.G4TP_MODEL;
const png = readFileSync(process.env.G4TP_IMAGE);
const b64 = png.toString('base64');
const dataUrl = `data:image/png;base64,${b64}`;
const question = 'What is the capital of France?';
const answer = 'The capital of France is Paris.';
const textOnly = Number(process.env.G4TP_TEXT_TOKENS); // the question alone, no image

const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 120000 });
const anthropic = new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 120000 });
const vercel = createOpenAICompatible({ name: 'g4tp', baseURL: `${url}/v1`, apiKey, includeUsage: true });

// The prompt length the Anthropic count_tokens gives: every other API must report the same.
let imageTokens;
test('Anthropic count_tokens counts the image tokens', async () => {
  const c = await anthropic.messages.countTokens({
    model, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64 } }, { type: 'text', text: question }] }],
  });
  imageTokens = c.input_tokens;
  assert.ok(textOnly > 0, 'G4TP_TEXT_TOKENS');
  // boi + the soft tokens (at most max_soft_tokens, 70 here) + eoi, in place of the placeholder
  assert.ok(imageTokens > textOnly + 2 && imageTokens <= textOnly + 72 + 2, `${imageTokens} vs ${textOnly}`);
});

test('OpenAI chat: image_url data URL, whole and streamed', async () => {
  const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl } }, { type: 'text', text: question }] }];
  const r = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 32 });
  assert.equal(r.choices[0].message.content, answer);
  assert.equal(r.usage.prompt_tokens, imageTokens);
  const s = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 32, stream: true, stream_options: { include_usage: true } });
  let text = '', usage;
  for await (const ch of s) {
    if (ch.choices[0]?.delta?.content) text += ch.choices[0].delta.content;
    if (ch.usage) usage = ch.usage;
  }
  assert.equal(text, answer);
  assert.equal(usage.prompt_tokens, imageTokens);
  assert.ok(usage.prompt_tokens_details.cached_tokens >= imageTokens - 1, 'the second ask reuses the image from the prefix cache');
});

test('OpenAI Responses: input_image', async () => {
  const r = await openai.responses.create({
    model, temperature: 0, max_output_tokens: 32,
    input: [{ role: 'user', content: [{ type: 'input_image', image_url: dataUrl, detail: 'auto' }, { type: 'input_text', text: question }] }],
  });
  assert.equal(r.output_text, answer);
  assert.equal(r.usage.input_tokens, imageTokens);
});

test('Anthropic messages: base64 image block', async () => {
  const m = await anthropic.messages.create({
    model, max_tokens: 32, temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64 } }, { type: 'text', text: question }] }],
  });
  assert.deepEqual(m.content, [{ type: 'text', text: answer }]);
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, imageTokens);
});

test('Vercel AI SDK: generateText and streamText with an image part', async () => {
  const messages = [{ role: 'user', content: [{ type: 'image', image: new Uint8Array(png), mediaType: 'image/png' }, { type: 'text', text: question }] }];
  const r = await generateText({ model: vercel(model), messages, temperature: 0, maxOutputTokens: 32, maxRetries: 0 });
  assert.equal(r.text, answer);
  assert.equal(r.usage.inputTokens, imageTokens);
  const s = streamText({ model: vercel(model), messages, temperature: 0, maxOutputTokens: 32, maxRetries: 0 });
  let text = '';
  for await (const t of s.textStream) text += t;
  assert.equal(text, answer);
  assert.equal((await s.usage).inputTokens, imageTokens);
});

test('typed errors: a corrupt image is a 400 naming the part, in each SDK', async () => {
  const bad = `data:image/png;base64,${png.subarray(0, 200).toString('base64')}`; // truncated PNG
  await assert.rejects(
    openai.chat.completions.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: bad } }, { type: 'text', text: 'hi' }] }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /messages\[0\]\.content\[0\]/.test(e.message));
  await assert.rejects(
    anthropic.messages.create({
      model, max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'bm90IGFuIGltYWdl' } }, { type: 'text', text: 'hi' }] }],
    }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === 'invalid_request_error');
  await assert.rejects(
    generateText({ model: vercel(model), maxRetries: 0, maxOutputTokens: 4, messages: [{ role: 'user', content: [{ type: 'image', image: new Uint8Array([1, 2, 3, 4]), mediaType: 'image/png' }, { type: 'text', text: 'hi' }] }] }),
    (e) => e.statusCode === 400);
});
