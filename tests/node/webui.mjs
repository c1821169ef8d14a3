// The chat page at `/` in a real headless browser: Debian's chromium driven by playwright-core
// (no browser download). Run by tests/e2e/webui.sh, which starts two servers and sets:
//   G4TP_URL      the demo model (with a tiny vision tower), no API key (the Paris question, history, reload, errors)
//   G4TP_KEY_URL  a random-weight model that talks for long, with --api-key G4TP_KEY (the key
//                 field, a long streamed answer stopped with the Stop button)
//   G4TP_SHOT_DIR where screenshots go (not committed)
// Every page is watched for console errors, page errors and Content-Security-Policy violations.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const DEMO = process.env.G4TP_URL;
const KEYED = process.env.G4TP_KEY_URL;
const KEY = process.env.G4TP_KEY;
const SHOTS = process.env.G4TP_SHOT_DIR;
const SLOW = Number(process.env.G4TP_SLOW || 1);
// The flags this machine's network needs (no background connections, no QUIC); Playwright adds
// --headless and a fresh temporary --user-data-dir itself.
const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];
// A 1x1 PNG.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

let browser;
before(async () => {
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: FLAGS, headless: true });
});
after(async () => { await browser?.close(); });

async function open(url) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 720 } });
  const page = await context.newPage();
  page.setDefaultTimeout(30000 * SLOW);
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || /Content.Security.Policy/i.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const resp = await page.goto(url);
  await page.waitForFunction(() => !/connecting/.test(document.querySelector('#model').textContent));
  return { context, page, problems, resp };
}

// No console errors, page errors or CSP violations, except failed loads with the given statuses
// (Chromium logs every 4xx answer to fetch as a console error).
async function noProblems(w, allowedStatuses = []) {
  const csp = await w.page.evaluate(() => window.__csp);
  const unexpected = w.problems.filter((p) => !allowedStatuses.some((s) =>
    p.includes(`the server responded with a status of ${s}`) || (s === 'net' && p.includes('net::ERR_'))));
  assert.deepEqual(csp, [], 'no CSP violations');
  assert.deepEqual(unexpected, [], 'no console or page errors');
}

const idle = (page) => page.waitForFunction(() => document.querySelector('#stop').disabled && !document.querySelector('#send').disabled);
const answers = (page) => page.locator('.msg.assistant .content').allTextContents();
const lastAnswer = async (page) => (await answers(page)).at(-1);

async function ask(page, text) {
  const req = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
  return (await req).postDataJSON();
}

async function metric(base, name) {
  const txt = await (await fetch(`${base}/metrics`)).text();
  const line = txt.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

test('the page loads with its security headers and no console errors', async () => {
  const w = await open(DEMO);
  const h = w.resp.headers();
  assert.equal(w.resp.status(), 200);
  assert.match(h['content-type'], /^text\/html; charset=utf-8/);
  assert.match(h['content-security-policy'], /default-src 'none'; script-src 'self'; style-src 'self'/);
  assert.match(h.etag, /^"[0-9a-f]{16}"$/);
  assert.equal(await w.page.title(), 'g4tp chat');
  assert.match(await w.page.textContent('#model'), /^g4tp-demo/);
  // the script ran under the policy: it rendered the empty conversation list and focused the prompt
  assert.equal(await w.page.isVisible('#conv-empty'), true);
  assert.equal(await w.page.evaluate(() => document.activeElement.id), 'prompt');
  await noProblems(w);
  await w.context.close();
});

test('asks the demo model the Paris question and reads the streamed answer; history, reload, conversations', async () => {
  const w = await open(DEMO);
  const { page } = w;
  await page.fill('#temperature', '0');
  // Shift+Enter is a new line, not a send
  await page.fill('#prompt', 'a');
  await page.press('#prompt', 'Shift+Enter');
  await page.type('#prompt', 'b');
  assert.equal(await page.inputValue('#prompt'), 'a\nb');
  assert.equal(await page.locator('.msg').count(), 0);

  const respP = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
  const body = await ask(page, 'What is the capital of France?');
  assert.equal(body.stream, true);
  assert.equal(body.temperature, 0);
  assert.equal(body.enable_thinking, false);
  assert.deepEqual(body.messages, [{ role: 'user', content: 'What is the capital of France?' }]);
  const resp = await respP;
  assert.match(resp.headers()['content-type'], /^text\/event-stream/);
  await idle(page);
  assert.equal(await lastAnswer(page), 'The capital of France is Paris.');
  assert.equal(await page.inputValue('#prompt'), '', 'the prompt is cleared once sent');

  // the history goes with the next turn
  const body2 = await ask(page, 'What is the capital of Japan?');
  assert.deepEqual(body2.messages.map((m) => m.role), ['user', 'assistant', 'user']);
  assert.equal(body2.messages[1].content, 'The capital of France is Paris.');
  await idle(page);
  assert.match(await lastAnswer(page), /Tokyo/);

  // the conversation and the settings survive a reload
  await page.reload();
  await page.waitForSelector('.msg.assistant');
  assert.deepEqual(await answers(page), ['The capital of France is Paris.', await lastAnswer(page)]);
  assert.match((await answers(page))[1], /Tokyo/);
  assert.equal(await page.inputValue('#temperature'), '0');
  assert.deepEqual(await page.locator('.conv-open').allTextContents(), ['What is the capital of France?']);

  // a second conversation; switch between them; delete one
  await page.click('#new-chat');
  assert.equal(await page.locator('.msg').count(), 0);
  await ask(page, 'What is the capital of Peru?');
  await idle(page);
  assert.match(await lastAnswer(page), /Lima/);
  assert.deepEqual(await page.locator('.conv-open').allTextContents(), ['What is the capital of Peru?', 'What is the capital of France?']);
  await page.click('.conv-open >> text=What is the capital of France?');
  assert.equal((await answers(page))[0], 'The capital of France is Paris.');
  assert.equal(await page.getAttribute('.conv-open >> text=What is the capital of France?', 'aria-current'), 'true');
  await page.click('[aria-label="Delete conversation: What is the capital of Peru?"]');
  assert.deepEqual(await page.locator('.conv-open').allTextContents(), ['What is the capital of France?']);
  await page.reload();
  await page.waitForSelector('.msg.assistant');
  assert.deepEqual(await page.locator('.conv-open').allTextContents(), ['What is the capital of France?']);
  assert.equal((await answers(page))[0], 'The capital of France is Paris.');
  await noProblems(w);
  await w.context.close();
});

test('thinking: the toggle sets enable_thinking, reasoning shows collapsed; model text is never markup', async () => {
  const w = await open(DEMO);
  const { page } = w;
  await page.check('#think');
  // a scripted stream: reasoning, a keep-alive comment, content full of markup
  const ev = (delta, finish = null) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'content-type': 'text/event-stream' },
    body: ev({ role: 'assistant', content: '' }) + ev({ reasoning_content: 'Let me think <b>hard</b>.' }) + ': keep-alive\n\n' +
      ev({ content: 'Here: <img src=x onerror="window.__pwned=1"> and `code` and **bold**\n\n```\n<script>window.__pwned=2</script>\n```\n' }) +
      ev({}, 'stop') + 'data: [DONE]\n\n',
  }));
  const body = await ask(page, 'Think about it');
  assert.equal(body.enable_thinking, true);
  await idle(page);
  const msg = page.locator('.msg.assistant').last();
  const think = msg.locator('details.thinking');
  assert.equal(await think.count(), 1);
  assert.equal(await think.evaluate((d) => d.open), false, 'collapsed');
  assert.equal(await think.locator('summary').textContent(), 'Thinking');
  await think.locator('summary').click();
  assert.equal(await think.evaluate((d) => d.open), true);
  assert.equal(await think.locator('.thinking-text').textContent(), 'Let me think <b>hard</b>.');
  assert.equal(await msg.locator('b, img, script').count(), 0, 'no element from the model text');
  assert.match(await msg.locator('.content').textContent(), /Here: <img src=x onerror="window.__pwned=1">/);
  assert.equal(await msg.locator('.content > p code').textContent(), 'code');
  assert.equal(await msg.locator('strong').textContent(), 'bold');
  assert.equal(await msg.locator('pre code').textContent(), '<script>window.__pwned=2</script>');
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/webui-thinking.png` });
  // the real server with thinking on
  await page.unroute('**/v1/chat/completions');
  await page.click('#new-chat');
  await page.fill('#temperature', '0');
  assert.equal((await ask(page, 'What is the capital of France?')).enable_thinking, true);
  await idle(page);
  assert.match(await lastAnswer(page), /Paris/);
  assert.equal(await page.isHidden('#error'), true);
  await noProblems(w);
  await w.context.close();
});

test('errors are shown: 400 from the server, 503, a failure mid-stream, the network; an image upload', async () => {
  const w = await open(DEMO);
  const { page } = w;
  // 400: more tokens than the context holds; the turn is taken back for another try
  await page.fill('#max_tokens', '100000');
  await ask(page, 'What is the capital of France?');
  await idle(page);
  await page.waitForSelector('#error:not([hidden])');
  assert.match(await page.textContent('#error-text'), /\(400\): .*exceeds the context/);
  assert.equal(await page.inputValue('#prompt'), 'What is the capital of France?');
  assert.equal(await page.locator('.msg').count(), 0);
  await page.fill('#max_tokens', '');

  // 503 (scripted): says to retry
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 503, headers: { 'content-type': 'application/json', 'retry-after': '1' },
    body: JSON.stringify({ error: { message: 'the model is still loading; retry shortly', type: 'server_error', param: null, code: 'model_loading' } }),
  }));
  await ask(page, 'Hello');
  await idle(page);
  assert.match(await page.textContent('#error-text'), /\(503\): the model is still loading; retry shortly\. Try again shortly\./);
  await page.unroute('**/v1/chat/completions');

  // an error event after some text: the text stays, marked incomplete
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 200, headers: { 'content-type': 'text/event-stream' },
    body: `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'The capital' }, finish_reason: null }] })}\n\n` +
      `data: ${JSON.stringify({ error: { message: 'the server is shutting down', code: 'shutting_down' } })}\n\ndata: [DONE]\n\n`,
  }));
  await ask(page, 'Hello');
  await idle(page);
  assert.match(await page.textContent('#error-text'), /The generation failed: the server is shutting down/);
  assert.equal(await lastAnswer(page), 'The capital');
  assert.equal(await page.locator('.msg.assistant .note').last().textContent(), 'The answer is incomplete.');
  await page.unroute('**/v1/chat/completions');

  // the network: nothing answers
  await page.route('**/v1/chat/completions', (route) => route.abort('connectionrefused'));
  await ask(page, 'Hello again');
  await idle(page);
  assert.match(await page.textContent('#error-text'), /Cannot reach the server/);
  await page.click('#error-close');
  assert.equal(await page.isHidden('#error'), true);
  await page.unroute('**/v1/chat/completions');

  // an image goes as an OpenAI image_url part with a data: URL; the server (a model with a
  // vision tower) answers, and the message shows the picture
  await page.click('#new-chat');
  await page.setInputFiles('#image-input', { name: 'dot.png', mimeType: 'image/png', buffer: PNG });
  await page.waitForSelector('#attachments img');
  const respP = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
  const body = await ask(page, 'What is the capital of France?');
  const parts = body.messages.at(-1).content;
  assert.deepEqual(parts[0], { type: 'text', text: 'What is the capital of France?' });
  assert.equal(parts[1].type, 'image_url');
  assert.equal(parts[1].image_url.url, `data:image/png;base64,${PNG.toString('base64')}`);
  assert.equal((await respP).status(), 200);
  await idle(page);
  assert.equal(await page.locator('.msg.user .images img').count(), 1);
  // (the tower is random: what the model makes of the picture is noise, but it is an answer)
  assert.ok((await lastAnswer(page)).length > 0);
  assert.equal(await page.isHidden('#error'), true, 'no error shown');
  assert.equal(await page.locator('#attachments img').count(), 0, 'the attachment is sent and cleared');
  // a file that is not an image is refused in the page
  await page.setInputFiles('#image-input', { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hi') });
  await page.waitForFunction(() => /only PNG, JPEG and WebP/.test(document.querySelector('#error-text').textContent));
  await noProblems(w, [400, 503, 'net']);
  await w.context.close();
});

test('API key: a 401 says so, the key field makes it work; Stop ends a long answer and the server cancels it', async () => {
  const w = await open(KEYED);
  const { page } = w;
  assert.match(await page.textContent('#model'), /API key needed/);
  await ask(page, 'Hello');
  await idle(page);
  assert.match(await page.textContent('#error-text'), /requires an API key \(401\)/);

  await page.fill('#api-key', 'wrong');
  await page.press('#api-key', 'Tab');
  await ask(page, 'Hello');
  await idle(page);
  assert.match(await page.textContent('#error-text'), /refused the API key \(401\)/);

  await page.fill('#api-key', KEY);
  await page.press('#api-key', 'Tab');
  await page.waitForFunction(() => !/API key/.test(document.querySelector('#model').textContent));
  await page.fill('#max_tokens', '4');
  const reqP = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await page.fill('#prompt', 'Hello');
  await page.press('#prompt', 'Enter');
  assert.equal((await reqP).headers().authorization, `Bearer ${KEY}`);
  await idle(page);
  assert.equal(await page.isHidden('#error'), true);
  assert.equal(await page.locator('.msg.assistant').count(), 1);
  assert.equal(await page.locator('.msg.assistant .note').textContent(), 'Stopped at the max tokens limit.');

  // A long answer: with this seed the random-weight model talks for 1626 tokens (several
  // seconds here). It is stopped once it has shown some text.
  const cancelled0 = await metric(KEYED, 'g4tp_request_finished_total{finish_reason="cancelled"}');
  await page.click('#new-chat');
  await page.fill('#max_tokens', '1900');
  await page.fill('#seed', '8');
  await ask(page, 'Tell me a long story');
  const len = () => page.evaluate(() => document.querySelector('.msg.assistant:last-child').textContent.length);
  await page.waitForFunction(() => (document.querySelector('.msg.assistant:last-child .content')?.textContent.length ?? 0) > 40);
  const a = await len();
  await page.waitForFunction((n) => document.querySelector('.msg.assistant:last-child').textContent.length > n, a);
  assert.equal(await page.isDisabled('#send'), true, 'no second request while one streams');
  assert.equal(await page.isEnabled('#stop'), true);
  await page.click('#stop');
  await idle(page);
  const stoppedAt = await len();
  assert.equal(await page.locator('.msg.assistant .note').last().textContent(), 'Stopped.');
  await page.waitForTimeout(1500);
  assert.equal(await len(), stoppedAt, 'the answer stops growing');
  // the server cancelled the generation (its connection closed) and holds no sequence
  let cancelled = cancelled0;
  for (let i = 0; i < 100 * SLOW && cancelled === cancelled0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    cancelled = await metric(KEYED, 'g4tp_request_finished_total{finish_reason="cancelled"}');
  }
  assert.equal(cancelled, cancelled0 + 1, 'the server counts one cancelled generation');
  assert.equal(await metric(KEYED, 'g4tp_num_requests_running'), 0);
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/webui-stopped.png` });

  // the page is usable again, and the key survives a reload
  await page.reload();
  assert.equal(await page.inputValue('#api-key'), KEY);
  await page.waitForSelector('.msg.assistant');
  assert.equal(await len(), stoppedAt, 'the stopped answer was kept');
  await page.fill('#max_tokens', '4');
  await page.fill('#seed', '');
  await ask(page, 'Go on');
  await idle(page);
  assert.equal(await page.locator('.msg.assistant').count(), 2);
  assert.equal(await page.isHidden('#error'), true);
  await noProblems(w, [401]);
  await w.context.close();
});
