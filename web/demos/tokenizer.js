// BPE tokenizers (Hugging Face tokenizer.json: byte-level GPT-2, Llama 3, Qwen2, SmolLM layouts,
// and SentencePiece-style Llama 2 / TinyLlama layouts with byte fallback) in plain JavaScript,
// for pages that run an exported bundle without Python. The same pipeline as kernelgen.text
// (core/kernelgen/text/): added tokens split out, the normalizer (NFC/NFD/NFKC/NFKD/Lowercase,
// Prepend, Replace, Strip), the pre-tokenizer (ByteLevel, Split, Digits, Metaspace, Sequence),
// BPE (lowest merge rank first, leftmost among equals; byte fallback and the unk token for
// characters outside the vocab), the post-processor (ByteLevel, TemplateProcessing); decoding
// through the ByteLevel decoder with a stream that holds back incomplete UTF-8 (TextDecoder),
// through the file's token decoders (tokenizer_sp.js), or, for a file with no decoder (null), by
// joining the tokens with spaces as the tokenizers package does. Anything else in the file is a
// TokenizerError naming it.
import { buildDecoder, initialSymbols, metaspace, spNormalizers, tokenStream } from
  './tokenizer_sp.js';

export class TokenizerError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TokenizerError';
    this.type = 'TokenizerError';
  }
}

const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+" +
  '|\\s+(?!\\S)|\\s+';
// Oniguruma's \s: U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp (JavaScript's differs)
const SPACE = '\\t-\\r\\x85\\p{Zs}\\p{Zl}\\p{Zp}';

// The byte-level alphabet: byte -> printable character, and back.
const BYTE_CHARS = (() => {
  const chars = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    chars.push(String.fromCodePoint(keep ? b : 0x100 + extra++));
  }
  return chars;
})();
const CHAR_BYTES = new Map(BYTE_CHARS.map((c, b) => [c, b]));

// An Oniguruma pattern from a tokenizer file as a JavaScript RegExp ('gu'): \s, \S spelled out,
// (?i:...) groups as explicit [xX] letter classes (older engines lack scoped flags).
export function translatePattern(pattern) {
  let out = '';
  let depth = 0;
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i];
    if (ch === '\\') {
      const next = pattern[i + 1];
      if (next === 's') out += depth ? SPACE : `[${SPACE}]`;
      else if (next === 'S' && !depth) out += `[^${SPACE}]`;
      else if (next === 'S') throw new TokenizerError(`\\S inside [...] in pattern ${pattern}`);
      else out += ch + next;
      i++;
    } else if (pattern.startsWith('(?i:', i) && !depth) {
      const end = closing(pattern, i);
      out += `(?:${caseless(pattern.slice(i + 4, end))})`;
      i = end;
    } else {
      if (ch === '[') depth++;
      if (ch === ']' && depth) depth--;
      out += ch;
    }
  }
  try {
    return new RegExp(out, 'gu');
  } catch (error) {
    throw new TokenizerError(`tokenizer pattern ${pattern} is not a JavaScript regex: ` +
      error.message);
  }
}

function closing(pattern, open) {
  let depth = 0;
  for (let i = open; i < pattern.length; i++) {
    if (pattern[i] === '\\') i++;
    else if (pattern[i] === '(') depth++;
    else if (pattern[i] === ')' && --depth === 0) return i;
  }
  throw new TokenizerError(`unbalanced (?i: group in pattern ${pattern}`);
}

function caseless(body) {
  return body.replace(/[a-zA-Z]/g, (c) => `[${c.toLowerCase()}${c.toUpperCase()}]`);
}

// [[start, end, isMatch]] covering text.
function findMatches(regex, text) {
  const pieces = [];
  let prev = 0;
  for (const m of text.matchAll(regex)) {
    if (!m[0].length) continue;
    if (m.index > prev) pieces.push([prev, m.index, false]);
    pieces.push([m.index, m.index + m[0].length, true]);
    prev = m.index + m[0].length;
  }
  if (prev < text.length) pieces.push([prev, text.length, false]);
  return pieces;
}

// Pieces [[text, atStart]] split by regex under behavior (atStart: the piece begins the text).
function splitPieces(pieces, regex, behavior, invert = false) {
  const out = [];
  for (const [text, atStart] of pieces) {
    let matches = findMatches(regex, text);
    if (invert) matches = matches.map(([s, e, m]) => [s, e, !m]);
    for (const [s, e] of applyBehavior(matches, behavior)) {
      if (e > s) out.push([text.slice(s, e), atStart && s === 0]);
    }
  }
  return out;
}

function applyBehavior(matches, behavior) {
  if (behavior === 'Removed') return matches.filter((m) => !m[2]);
  if (behavior === 'Isolated') return matches;
  const next = behavior === 'MergedWithNext';
  const order = next ? [...matches].reverse() : matches;
  const spans = [];
  let previous = false;
  for (const [start, end, isMatch] of order) {
    const join = behavior === 'Contiguous' ? isMatch === previous : isMatch && !previous;
    if (join && spans.length) {
      const last = spans[spans.length - 1];
      spans[spans.length - 1] = next ? [start, last[1]] : [last[0], end];
    } else spans.push([start, end]);
    previous = isMatch;
  }
  return next ? spans.reverse() : spans;
}

function fail(role, kind, known) {
  return new TokenizerError(`the tokenizer file's ${role} is of type ${JSON.stringify(kind)}, ` +
    `which this page's tokenizer does not implement (it reads ${known.join(', ')})`);
}

function buildNormalizer(spec) {
  if (!spec) return (t) => t;
  const forms = ['NFC', 'NFD', 'NFKC', 'NFKD'];
  if (forms.includes(spec.type)) return (t) => t.normalize(spec.type);
  if (spec.type === 'Lowercase') return (t) => t.toLowerCase();
  const sp = spNormalizers(translatePattern, TokenizerError);
  if (sp[spec.type]) return sp[spec.type](spec);
  if (spec.type === 'Sequence') {
    const steps = spec.normalizers.map(buildNormalizer);
    return (t) => steps.reduce((acc, f) => f(acc), t);
  }
  throw fail('normalizer', spec.type, [...forms, 'Lowercase', ...Object.keys(sp), 'Sequence']);
}

function splitRegex(pattern) {
  if (pattern && typeof pattern.Regex === 'string') return translatePattern(pattern.Regex);
  if (pattern && typeof pattern.String === 'string') {
    return new RegExp(pattern.String.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'gu');
  }
  throw new TokenizerError('a Split pattern must be {"String"} or {"Regex"}: ' +
    JSON.stringify(pattern));
}

function buildPreTokenizer(spec) {
  if (!spec) return (pieces) => pieces;
  if (spec.type === 'ByteLevel') {
    const prefix = spec.add_prefix_space ?? true;
    const regex = (spec.use_regex ?? true) ? translatePattern(GPT2_PATTERN) : null;
    return (pieces) => {
      let out = prefix ? pieces.map(([t, a]) => [t.startsWith(' ') ? t : ` ${t}`, a]) : pieces;
      if (regex) out = splitPieces(out, regex, 'Isolated');
      return out.map(([t, a]) => [toByteChars(t), a]);
    };
  }
  if (spec.type === 'Split') {
    const regex = splitRegex(spec.pattern);
    return (pieces) => splitPieces(pieces, regex, spec.behavior || 'Isolated', !!spec.invert);
  }
  if (spec.type === 'Digits') {
    const regex = /\p{N}/gu;
    const behavior = spec.individual_digits ? 'Isolated' : 'Contiguous';
    return (pieces) => splitPieces(pieces, regex, behavior);
  }
  if (spec.type === 'Metaspace') return metaspace(spec, splitPieces, TokenizerError);
  if (spec.type === 'Sequence') {
    const steps = spec.pretokenizers.map(buildPreTokenizer);
    return (pieces) => steps.reduce((acc, f) => f(acc), pieces);
  }
  throw fail('pre_tokenizer', spec.type, ['ByteLevel', 'Split', 'Digits', 'Metaspace',
    'Sequence']);
}

function buildPostProcessor(spec) {
  if (!spec || spec.type === 'ByteLevel') return (ids) => ids;
  if (spec.type === 'TemplateProcessing') {
    const items = (Array.isArray(spec.single) ? spec.single : []).map((item) => {
      if (item.Sequence) return 'A';
      const name = item.SpecialToken?.id;
      const entry = spec.special_tokens?.[name];
      if (!entry) {
        throw new TokenizerError(`TemplateProcessing names special token ${name} it does not list`);
      }
      return entry.ids;
    });
    return (ids) => items.flatMap((item) => (item === 'A' ? ids : item));
  }
  if (spec.type === 'Sequence') {
    const steps = spec.processors.map(buildPostProcessor);
    return (ids) => steps.reduce((acc, f) => f(acc), ids);
  }
  throw fail('post_processor', spec.type, ['ByteLevel', 'TemplateProcessing', 'Sequence']);
}

function toByteChars(text) {
  let out = '';
  for (const b of new TextEncoder().encode(text)) out += BYTE_CHARS[b];
  return out;
}

function checkModel(model) {
  if (!model || typeof model !== 'object') {
    throw new TokenizerError('a tokenizer file is a JSON object with a "model" ' +
      '(Hugging Face tokenizer.json)');
  }
  const kind = model.type ?? (model.merges ? 'BPE' : undefined);
  if (kind !== 'BPE') {
    throw new TokenizerError(`the tokenizer file's model is of type ${JSON.stringify(kind)}; ` +
      'this page reads BPE');
  }
  if (!model.vocab || typeof model.vocab !== 'object') {
    throw new TokenizerError("the tokenizer file's BPE model has no vocab");
  }
  const options = ['continuing_subword_prefix', 'end_of_word_suffix', 'dropout'];
  for (const option of options) {
    if (model[option]) {
      throw new TokenizerError(`the tokenizer file's BPE model sets ${option}, which this ` +
        "page's tokenizer does not implement");
    }
  }
  if (model.unk_token != null && !(model.unk_token in model.vocab)) {
    const unk = JSON.stringify(model.unk_token);
    throw new TokenizerError(`the tokenizer file's BPE unk_token ${unk} is not in its vocab`);
  }
}

// The file's decoder as token strings -> strings, or null for ByteLevel (the byte path: its
// decodeStream holds back incomplete UTF-8 by itself). A file with no decoder (null) joins the
// tokens with spaces, as the tokenizers package does.
function tokenDecoder(spec) {
  if (spec == null) return (tokens) => [tokens.join(' ')];
  if (spec.type === 'ByteLevel') return null;
  return buildDecoder(spec, { TokenizerError, translatePattern, charBytes: CHAR_BYTES, fail });
}

export class Tokenizer {
  // A tokenizer from the text of a tokenizer.json; TokenizerError when it is none this reads.
  static fromString(text) {
    let spec;
    try {
      spec = JSON.parse(text);
    } catch (error) {
      throw new TokenizerError(`a tokenizer file must be JSON: ${error.message}`);
    }
    return new Tokenizer(spec);
  }

  constructor(spec) {
    checkModel(spec?.model);
    const { model } = spec;
    this.model = model;
    this.decoder = tokenDecoder(spec.decoder);
    this.vocab = new Map(Object.entries(model.vocab));
    this.idToToken = new Map([...this.vocab].map(([t, i]) => [i, t]));
    this.ranks = new Map();
    (model.merges || []).forEach((merge, rank) => {
      const [a, b] = typeof merge === 'string' ? merge.split(' ') : merge;
      if (!this.vocab.has(a) || !this.vocab.has(b) || !this.vocab.has(a + b)) {
        throw new TokenizerError(`the tokenizer file's merge ${JSON.stringify(merge)} names a ` +
          'token not in its vocab');
      }
      this.ranks.set(`${a} ${b}`, rank);
    });
    this.ignoreMerges = !!model.ignore_merges;
    this.normalize = buildNormalizer(spec.normalizer);
    this.preTokenize = buildPreTokenizer(spec.pre_tokenizer);
    this.postProcess = buildPostProcessor(spec.post_processor);
    this.added = (spec.added_tokens || []).map((t) =>
      ({ ...t, normalized: t.normalized ?? !t.special }));
    for (const t of this.added) {
      if (t.lstrip || t.rstrip || t.single_word) {
        throw new TokenizerError(`added token ${JSON.stringify(t.content)} sets lstrip, rstrip ` +
          "or single_word, which this page's tokenizer does not implement");
      }
    }
    for (const t of this.added) this.idToToken.set(t.id, t.content);
    this.special = new Set(this.added.filter((t) => t.special).map((t) => t.id));
    this.rawAdded = matcher(this.added.filter((t) => !t.normalized), (t) => t);
    this.normalAdded = matcher(this.added.filter((t) => t.normalized), this.normalize);
    this.cache = new Map();
    this.vocabSize = Math.max(...this.idToToken.keys()) + 1;
  }

  // The token ids of text (special tokens added as the file's post-processor says).
  encode(text, { addSpecialTokens = true } = {}) {
    const ids = [];
    let first = true;   // the next piece begins the text (Metaspace's "first" scheme asks)
    for (const [piece, token] of splitAdded(this.rawAdded, text)) {
      if (token) { ids.push(token.id); first = false; continue; }
      for (const [part, token2] of splitAdded(this.normalAdded, this.normalize(piece))) {
        if (token2) ids.push(token2.id);
        else for (const [word] of this.preTokenize([[part, first]])) ids.push(...this.bpe(word));
        first = false;
      }
    }
    return addSpecialTokens ? this.postProcess(ids) : ids;
  }

  bpe(word) {
    if (this.cache.has(word)) return this.cache.get(word);
    let ids;
    if (this.ignoreMerges && this.vocab.has(word)) ids = [this.vocab.get(word)];
    else {
      const symbols = initialSymbols(word, this.vocab, this.model);
      for (;;) {
        let best = -1;
        let bestRank = Infinity;
        for (let i = 0; i + 1 < symbols.length; i++) {
          const rank = this.ranks.get(`${symbols[i]} ${symbols[i + 1]}`);
          if (rank !== undefined && rank < bestRank) { best = i; bestRank = rank; }
        }
        if (best < 0) break;
        symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
      }
      ids = symbols.map((s) => this.vocab.get(s));
    }
    if (this.cache.size < 50000) this.cache.set(word, ids);
    return ids;
  }

  // The UTF-8 bytes of one id (special tokens: none when skipped).
  bytesOf(id, skipSpecial = true) {
    const token = this.idToToken.get(id);
    if (token === undefined) {
      throw new TokenizerError(`token id ${id} is not in this tokenizer (0..${this.vocabSize - 1})`);
    }
    if (skipSpecial && this.special.has(id)) return new Uint8Array(0);
    const chars = [...token];
    if (chars.every((c) => CHAR_BYTES.has(c))) {
      return Uint8Array.from(chars, (c) => CHAR_BYTES.get(c));
    }
    return new TextEncoder().encode(token);
  }

  // The text of ids.
  decode(ids, { skipSpecialTokens = true } = {}) {
    if (this.decoder) return this.decodeTokens(ids, skipSpecialTokens);
    const stream = this.decodeStream({ skipSpecialTokens });
    return ids.map((id) => stream.step(id)).join('') + stream.flush();
  }

  // The text of ids through the file's token decoders.
  decodeTokens(ids, skipSpecial) {
    const tokens = [];
    for (const id of ids) {
      const token = this.idToToken.get(id);
      if (token === undefined) {
        throw new TokenizerError(`token id ${id} is not in this tokenizer ` +
          `(0..${this.vocabSize - 1})`);
      }
      if (!(skipSpecial && this.special.has(id))) tokens.push(token);
    }
    return this.decoder(tokens).join('');
  }

  // {step(id) -> new text ('' while inside a UTF-8 sequence), flush() -> the rest}; after: the
  // ids before the first step (a prompt's), for decoders whose text depends on what precedes.
  decodeStream({ skipSpecialTokens = true, after = [] } = {}) {
    if (this.decoder) {
      return tokenStream((ids) => this.decodeTokens(ids, skipSpecialTokens), after);
    }
    const decoder = new TextDecoder('utf-8', { ignoreBOM: true });   // a BOM is text here
    return {
      step: (id) => decoder.decode(this.bytesOf(id, skipSpecialTokens), { stream: true }),
      flush: () => decoder.decode(),
    };
  }
}

function matcher(tokens, normalize) {
  const byText = new Map();
  for (const t of tokens) {
    if (!byText.has(normalize(t.content))) byText.set(normalize(t.content), t);
  }
  const texts = [...byText.keys()].filter(Boolean).sort((a, b) => b.length - a.length);
  const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return { byText, regex: texts.length ? new RegExp(texts.map(escape).join('|'), 'gu') : null };
}

function splitAdded({ byText, regex }, text) {
  if (!text) return [];
  if (!regex) return [[text, null]];
  const out = [];
  let done = 0;
  for (const m of text.matchAll(regex)) {
    if (m.index > done) out.push([text.slice(done, m.index), null]);
    out.push([m[0], byText.get(m[0])]);
    done = m.index + m[0].length;
  }
  if (done < text.length) out.push([text.slice(done), null]);
  return out;
}
