// app.js — the chat page of g4tp serve (docs/server.md, "Chat page"). Conversations are kept
// in this browser (localStorage); answers stream from POST /v1/chat/completions (SSE read with
// fetch and a ReadableStream); thinking (reasoning_content) shows in a collapsible block; Stop
// aborts the fetch, and the server cancels the generation when its connection closes.
// Model output reaches the page only as text nodes (never innerHTML). No framework, no build.
'use strict';

const KEYS = { convs: 'g4tp.conversations', current: 'g4tp.current', settings: 'g4tp.settings', apiKey: 'g4tp.apiKey' };
const NUMBER_FIELDS = [ // id, request field, parser
  ['temperature', 'temperature', parseFloat],
  ['top_p', 'top_p', parseFloat],
  ['top_k', 'top_k', (v) => parseInt(v, 10)],
  ['max_tokens', 'max_tokens', (v) => parseInt(v, 10)],
  ['seed', 'seed', (v) => parseInt(v, 10)],
];
const MAX_IMAGE_BYTES = 3 << 20; // the server's default body limit is 4 MiB, and base64 adds a third

const $ = (id) => document.getElementById(id);
const ui = {};
let convs = [];        // [{id, title, messages: [{role, content, reasoning?, images?, note?}]}]
let currentId = null;  // null: a new conversation, saved once its first message is sent
let running = null;    // {controller, conv, msg} while an answer streams
let pendingImages = []; // data: URLs attached to the next message

// ---- storage ----------------------------------------------------------------------------------

function loadJSON(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v === null || v === undefined ? fallback : v;
  } catch {
    return fallback;
  }
}

function saveConvs() {
  try {
    localStorage.setItem(KEYS.convs, JSON.stringify(convs));
    if (currentId) localStorage.setItem(KEYS.current, currentId);
    else localStorage.removeItem(KEYS.current);
  } catch (e) {
    showError(`This conversation could not be saved in the browser (${e.name}): its storage is full, ` +
      'images take much room. Delete a conversation to make room.');
  }
}

function saveSettings() {
  const s = { system: ui.system.value, think: ui.think.checked };
  for (const [id] of NUMBER_FIELDS) s[id] = ui[id].value;
  try {
    localStorage.setItem(KEYS.settings, JSON.stringify(s));
    localStorage.setItem(KEYS.apiKey, ui.apiKey.value);
  } catch { /* settings are small; nothing else to do */ }
}

function loadSettings() {
  const s = loadJSON(KEYS.settings, {});
  ui.system.value = typeof s.system === 'string' ? s.system : '';
  ui.think.checked = s.think === true;
  for (const [id] of NUMBER_FIELDS) ui[id].value = typeof s[id] === 'string' ? s[id] : '';
  ui.apiKey.value = localStorage.getItem(KEYS.apiKey) || '';
}

const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 10); // no crypto.randomUUID: plain http on a LAN address is not a secure context
const current = () => convs.find((c) => c.id === currentId) || null;

// ---- rendering (text nodes only) ------------------------------------------------------------------

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// Inline markup: `code` and **bold**; everything else stays plain text.
function inline(text) {
  const out = [];
  const re = /`([^`\n]+)`|\*\*([^*\n]+)\*\*/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    out.push(m[1] !== undefined ? el('code', { text: m[1] }) : el('strong', { text: m[2] }));
    last = re.lastIndex;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

// Markdown-ish: ``` fences become code blocks, blank lines separate paragraphs.
function renderText(text) {
  const frag = document.createDocumentFragment();
  const parts = text.split(/^```[^\n]*$/m);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      frag.append(el('pre', {}, el('code', { text: part.replace(/^\n/, '').replace(/\n$/, '') })));
      return;
    }
    for (const para of part.split(/\n{2,}/)) {
      const t = para.replace(/^\n+|\n+$/g, '');
      if (t) frag.append(el('p', {}, ...inline(t)));
    }
  });
  return frag;
}

function renderMessage(msg, streaming) {
  const box = el('div', { class: `msg ${msg.role}` });
  box.append(el('div', { class: 'role', text: msg.role === 'user' ? 'You' : 'Assistant' }));
  if (msg.images && msg.images.length) {
    const imgs = el('div', { class: 'images' });
    for (const url of msg.images) if (/^data:image\//.test(url)) imgs.append(el('img', { src: url, alt: 'attached image' }));
    box.append(imgs);
  }
  if (msg.reasoning) {
    const d = el('details', { class: 'thinking' },
      el('summary', { text: streaming && !msg.content ? 'Thinking…' : 'Thinking' }),
      el('div', { class: 'thinking-text', text: msg.reasoning }));
    if (msg.thinkingOpen) d.open = true;
    d.addEventListener('toggle', () => { msg.thinkingOpen = d.open; });
    box.append(d);
  }
  const content = el('div', { class: 'content' + (streaming ? ' pending' : '') });
  content.append(renderText(msg.content || ''));
  box.append(content);
  if (msg.note) box.append(el('div', { class: 'note', text: msg.note }));
  return box;
}

function renderMessages() {
  const c = current();
  ui.messages.replaceChildren(...(c ? c.messages.map((m) => renderMessage(m, running && running.msg === m)) : []));
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

let renderQueued = false;
function renderStreaming() { // one repaint per frame however many chunks arrived
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    if (!running || running.conv.id !== currentId) return;
    const nearBottom = ui.messages.scrollHeight - ui.messages.scrollTop - ui.messages.clientHeight < 40;
    const last = ui.messages.lastElementChild;
    const fresh = renderMessage(running.msg, true);
    if (last && last.classList.contains('assistant')) last.replaceWith(fresh);
    else ui.messages.append(fresh);
    if (nearBottom) ui.messages.scrollTop = ui.messages.scrollHeight;
  });
}

function renderList() {
  ui.convList.replaceChildren(...convs.map((c) => el('li', {},
    el('button', { type: 'button', class: 'conv-open', 'aria-current': String(c.id === currentId), title: c.title,
      text: c.title, onclick: () => switchTo(c.id) }),
    el('button', { type: 'button', class: 'conv-delete', 'aria-label': `Delete conversation: ${c.title}`,
      text: '×', onclick: () => removeConv(c.id) }))));
  ui.convEmpty.hidden = convs.length > 0;
}

function renderAttachments() {
  ui.attachments.replaceChildren(...pendingImages.map((url, i) => el('div', { class: 'thumb' },
    el('img', { src: url, alt: `image ${i + 1}` }),
    el('button', { type: 'button', 'aria-label': `Remove image ${i + 1}`, text: '×',
      onclick: () => { pendingImages.splice(i, 1); renderAttachments(); } }))));
}

function setBusy(busy) {
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
  ui.attach.disabled = busy;
}

function showError(text) {
  ui.errorText.textContent = text;
  ui.error.hidden = false;
}
function clearError() {
  ui.error.hidden = true;
  ui.errorText.textContent = '';
}

// ---- conversations --------------------------------------------------------------------------------

function switchTo(id) {
  if (running) stop();
  currentId = id;
  saveConvs();
  renderList();
  renderMessages();
  ui.prompt.focus();
}

function removeConv(id) {
  if (running && running.conv.id === id) stop();
  convs = convs.filter((c) => c.id !== id);
  if (currentId === id) currentId = null;
  saveConvs();
  renderList();
  renderMessages();
}

// ---- the request ----------------------------------------------------------------------------------

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = ui.apiKey.value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

function requestBody(conv) {
  const messages = [];
  const system = ui.system.value.trim();
  if (system) messages.push({ role: 'system', content: system });
  for (const m of conv.messages) {
    if (m.role === 'assistant') {
      if (m.content) messages.push({ role: 'assistant', content: m.content });
    } else if (m.images && m.images.length) {
      messages.push({ role: 'user', content: [{ type: 'text', text: m.content },
        ...m.images.map((url) => ({ type: 'image_url', image_url: { url } }))] });
    } else {
      messages.push({ role: 'user', content: m.content });
    }
  }
  const body = { messages, stream: true, enable_thinking: ui.think.checked };
  for (const [id, field, parse] of NUMBER_FIELDS) {
    const v = ui[id].value.trim();
    if (v === '') continue;
    const n = parse(v);
    if (!Number.isFinite(n)) throw new Error(`${ui[id].labels[0].textContent} must be a number`);
    body[field] = n;
  }
  return body;
}

async function httpError(resp) {
  let msg = '';
  try {
    const j = await resp.json();
    msg = (j && j.error && (j.error.message || j.error)) || '';
  } catch { /* not JSON: the status says enough */ }
  if (resp.status === 401) {
    return ui.apiKey.value.trim()
      ? 'The server refused the API key (401). Check Settings → API key.'
      : 'This server requires an API key (401): enter it in Settings → API key.';
  }
  if (resp.status === 503) return `The server cannot take the request now (503): ${msg || resp.statusText}. Try again shortly.`;
  if (resp.status === 413) return `The message is too large for the server (413): ${msg || 'remove an image'}.`;
  return `The server refused the request (${resp.status}): ${msg || resp.statusText}`;
}

// Reads an SSE body: calls onData with each event's data (the lines after "data:"), stops at [DONE].
async function readEvents(resp, onData) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true }).replace(/\r/g, '');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue; // a comment (": keep-alive") or an event without data
      if (data === '[DONE]') { reader.cancel().catch(() => {}); return; }
      onData(data);
    }
  }
}

class StreamError extends Error {}

async function send() {
  if (running) return;
  clearError();
  const text = ui.prompt.value;
  if (!text.trim() && pendingImages.length === 0) { ui.prompt.focus(); return; }
  let conv = current();
  if (!conv) {
    conv = { id: newId(), title: (text.trim() || 'Image').slice(0, 48), messages: [] };
    convs.unshift(conv);
    currentId = conv.id;
  }
  const user = { role: 'user', content: text };
  if (pendingImages.length) user.images = pendingImages.slice();
  const msg = { role: 'assistant', content: '', reasoning: '' };
  conv.messages.push(user);
  let body;
  try {
    body = requestBody(conv);
  } catch (e) {
    conv.messages.pop();
    if (!conv.messages.length) removeConv(conv.id);
    showError(e.message);
    return;
  }
  conv.messages.push(msg);
  const attached = pendingImages;
  ui.prompt.value = '';
  pendingImages = [];
  renderAttachments();
  saveConvs();
  renderList();
  const controller = new AbortController();
  running = { controller, conv, msg };
  setBusy(true);
  renderMessages();
  let failure = null, stopped = false, finish = null;
  try {
    const resp = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!resp.ok) throw new StreamError(await httpError(resp));
    await readEvents(resp, (data) => {
      let chunk;
      try { chunk = JSON.parse(data); } catch { throw new StreamError('The server sent a malformed event.'); }
      if (chunk.error) throw new StreamError(`The generation failed: ${chunk.error.message || JSON.stringify(chunk.error)}`);
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      const d = choice.delta || {};
      if (typeof d.reasoning_content === 'string') msg.reasoning += d.reasoning_content;
      if (typeof d.content === 'string') msg.content += d.content;
      if (choice.finish_reason) finish = choice.finish_reason;
      renderStreaming();
    });
  } catch (e) {
    if (e.name === 'AbortError') stopped = true;
    else if (e instanceof StreamError) failure = e.message;
    else failure = `Cannot reach the server (${e.message}). Is g4tp serve still running?`;
  }
  running = null;
  setBusy(false);
  if (!msg.content && !msg.reasoning && (failure || stopped)) {
    // nothing came back: take the turn back so that it can be sent again as it was
    conv.messages.splice(conv.messages.indexOf(user), 2);
    if (currentId === conv.id && !ui.prompt.value) ui.prompt.value = text;
    if (currentId === conv.id && !pendingImages.length) { pendingImages = attached; renderAttachments(); }
    if (!conv.messages.length) { convs = convs.filter((c) => c !== conv); if (currentId === conv.id) currentId = null; }
  } else if (stopped) {
    msg.note = 'Stopped.';
  } else if (failure) {
    msg.note = 'The answer is incomplete.';
  } else if (finish === 'length') {
    msg.note = 'Stopped at the max tokens limit.';
  }
  if (!msg.reasoning) delete msg.reasoning;
  saveConvs();
  renderList();
  renderMessages();
  if (failure) showError(failure);
  ui.prompt.focus();
}

function stop() {
  if (running) running.controller.abort();
}

// ---- model name and key check ---------------------------------------------------------------------

async function loadModel() {
  try {
    const resp = await fetch('/v1/models', { headers: headers() });
    if (resp.status === 401) { ui.model.textContent = 'API key needed (Settings)'; return; }
    if (!resp.ok) { ui.model.textContent = `server answered ${resp.status}`; return; }
    const j = await resp.json();
    const m = j.data && j.data[0];
    ui.model.textContent = m ? `${m.id}${m.max_model_len ? ` · context ${m.max_model_len}` : ''}` : 'no model';
  } catch (e) {
    ui.model.textContent = 'server unreachable';
  }
}

// ---- images ---------------------------------------------------------------------------------------

function addImages(files) {
  for (const f of files) {
    if (!/^image\/(png|jpeg|webp)$/.test(f.type)) { showError(`${f.name}: only PNG, JPEG and WebP images can be attached.`); continue; }
    if (f.size > MAX_IMAGE_BYTES) { showError(`${f.name} is larger than ${MAX_IMAGE_BYTES >> 20} MiB.`); continue; }
    const r = new FileReader();
    r.onload = () => { pendingImages.push(r.result); renderAttachments(); };
    r.onerror = () => showError(`${f.name} could not be read.`);
    r.readAsDataURL(f);
  }
}

// ---- start ----------------------------------------------------------------------------------------

function start() {
  for (const id of ['messages', 'prompt', 'send', 'stop', 'attach', 'attachments', 'think', 'system', 'model', 'error'])
    ui[id] = $(id);
  for (const [id] of NUMBER_FIELDS) ui[id] = $(id);
  ui.apiKey = $('api-key');
  ui.convList = $('conv-list');
  ui.convEmpty = $('conv-empty');
  ui.errorText = $('error-text');
  ui.imageInput = $('image-input');

  convs = loadJSON(KEYS.convs, []);
  if (!Array.isArray(convs)) convs = [];
  convs = convs.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages));
  currentId = localStorage.getItem(KEYS.current);
  if (!current()) currentId = null;
  loadSettings();

  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  ui.prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    else if (e.key === 'Escape' && running) stop();
  });
  ui.stop.addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => switchTo(null));
  $('error-close').addEventListener('click', clearError);
  ui.attach.addEventListener('click', () => ui.imageInput.click());
  ui.imageInput.addEventListener('change', () => { addImages(ui.imageInput.files); ui.imageInput.value = ''; });
  for (const id of ['system', 'think', ...NUMBER_FIELDS.map((f) => f[0])]) {
    ui[id].addEventListener('input', saveSettings);
    ui[id].addEventListener('change', saveSettings);
  }
  ui.apiKey.addEventListener('input', saveSettings);
  ui.apiKey.addEventListener('change', () => { saveSettings(); loadModel(); });

  renderList();
  renderMessages();
  setBusy(false);
  loadModel();
  ui.prompt.focus();
}

document.addEventListener('DOMContentLoaded', start);
