// The SentencePiece-style parts of tokenizer.json files (Llama 2, TinyLlama, Mistral layouts) for
// web/demos/tokenizer.js, the same rules as kernelgen.text (core/kernelgen/text/): the Prepend,
// Replace and Strip normalizers, the Metaspace pre-tokenizer, BPE's first split of a word with
// byte fallback (<0xNN> tokens) and the unk token, and the token-list decoders (Replace,
// ByteFallback, Fuse, Strip, Metaspace, ByteLevel, Sequence) with a stream that holds back text
// until it is whole.

export const MARK = '\u2581';
const WHITESPACE = /[\t-\r\x85\p{Zs}\p{Zl}\p{Zp}]/u;
const BYTE_TOKEN = /^<0x(\+?[0-9A-Fa-f]{1,2})>$/;

// A {"String"} or {"Regex"} pattern as (text, content) -> text with every match replaced.
export function replacer(spec, role, translatePattern, TokenizerError) {
  const { pattern, content } = spec;
  if (typeof content !== 'string') {
    throw new TokenizerError(`the tokenizer file's ${role} Replace has no "content" string`);
  }
  if (pattern && typeof pattern.String === 'string') {
    const value = pattern.String;
    return (text) => (value ? text.split(value).join(content) : text);
  }
  if (pattern && typeof pattern.Regex === 'string') {
    const regex = translatePattern(pattern.Regex);
    return (text) => text.replace(regex, () => content);
  }
  throw new TokenizerError(`the tokenizer file's ${role} Replace has a pattern that is neither ` +
    `{"String": ...} nor {"Regex": ...}: ${JSON.stringify(pattern)}`);
}

// The normalizers SentencePiece layouts use: {type: spec -> (text -> text)}.
export function spNormalizers(translatePattern, TokenizerError) {
  return {
    Prepend: (spec) => {
      if (typeof spec.prepend !== 'string') {
        throw new TokenizerError('the tokenizer file\'s Prepend normalizer has no "prepend"');
      }
      return (text) => (text ? spec.prepend + text : text);
    },
    Replace: (spec) => replacer(spec, 'normalizer', translatePattern, TokenizerError),
    Strip: (spec) => {
      const left = spec.strip_left ?? true;
      const right = spec.strip_right ?? true;
      return (text) => {
        const chars = [...text];
        let start = 0;
        let end = chars.length;
        while (left && start < end && WHITESPACE.test(chars[start])) start++;
        while (right && end > start && WHITESPACE.test(chars[end - 1])) end--;
        return chars.slice(start, end).join('');
      };
    },
  };
}

// Metaspace's prepend scheme (always, first, never), from prepend_scheme or add_prefix_space.
function prependScheme(spec, TokenizerError) {
  const scheme = spec.prepend_scheme ??
    ((spec.add_prefix_space ?? true) ? 'always' : 'never');
  if (!['always', 'first', 'never'].includes(scheme)) {
    throw new TokenizerError(`the tokenizer file's Metaspace has prepend_scheme ` +
      `${JSON.stringify(scheme)}; this page's tokenizer knows always, first, never`);
  }
  return scheme;
}

// The Metaspace pre-tokenizer over [[text, atStart]] pieces: spaces become the mark, the mark
// prepended as the scheme says, then (split) each piece split before every mark.
export function metaspace(spec, splitPieces, TokenizerError) {
  const mark = spec.replacement ?? MARK;
  const scheme = prependScheme(spec, TokenizerError);
  const split = spec.split ?? true;
  const markRegex = new RegExp(mark.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'gu');
  return (pieces) => {
    const out = pieces.map(([piece, atStart]) => {
      let text = piece.split(' ').join(mark);
      const wanted = scheme === 'always' || (scheme === 'first' && atStart);
      if (wanted && !text.startsWith(mark)) text = mark + text;
      return [text, atStart];
    });
    return split ? splitPieces(out, markRegex, 'MergedWithNext') : out;
  };
}

// A word's tokens before any merge: its characters, an unknown one as <0xNN> byte tokens (byte
// fallback, when all are in the vocab), else the unk token (a run fused into one with fuse_unk),
// else dropped.
export function initialSymbols(word, vocab, model) {
  const symbols = [];
  let unk = null;
  for (const ch of word) {
    if (vocab.has(ch)) {
      if (unk !== null) { symbols.push(unk); unk = null; }
      symbols.push(ch);
      continue;
    }
    if (model.byte_fallback) {
      const names = [...new TextEncoder().encode(ch)].map((b) =>
        `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
      if (names.every((n) => vocab.has(n))) { symbols.push(...names); continue; }
    }
    if (typeof model.unk_token === 'string') {
      if (unk !== null && !model.fuse_unk) symbols.push(unk);
      unk = model.unk_token;
    }
  }
  if (unk !== null) symbols.push(unk);
  return symbols;
}

function byteFallback() {
  const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const flush = (pending, out) => {
    if (!pending.length) return;
    try {
      out.push(strict.decode(Uint8Array.from(pending)));
    } catch {
      for (let i = 0; i < pending.length; i++) out.push('\ufffd');
    }
    pending.length = 0;
  };
  return (tokens) => {
    const out = [];
    const pending = [];
    for (const token of tokens) {
      const match = token.length === 6 ? BYTE_TOKEN.exec(token) : null;
      if (match) { pending.push(parseInt(match[1], 16)); continue; }
      flush(pending, out);
      out.push(token);
    }
    flush(pending, out);
    return out;
  };
}

// Strip: up to start leading and stop trailing `content` characters off each token (kept as the
// reference does: UTF-8 length less the cuts, in characters after the head cut).
function strip(spec) {
  const content = spec.content ?? ' ';
  const start = Number(spec.start ?? 0);
  const stop = Number(spec.stop ?? 0);
  return (tokens) => tokens.map((token) => {
    const chars = [...token];
    let head = 0;
    while (head < Math.min(start, chars.length) && chars[head] === content) head++;
    let tail = 0;
    while (tail < Math.min(stop, chars.length) && chars[chars.length - 1 - tail] === content) {
      tail++;
    }
    const keep = Math.max(0, new TextEncoder().encode(token).length - head - tail);
    return chars.slice(head, head + keep).join('');
  });
}

function metaspaceDecoder(spec, TokenizerError) {
  const mark = spec.replacement ?? MARK;
  const scheme = prependScheme(spec, TokenizerError);
  return (tokens) => tokens.map((token, i) => {
    const drop = i === 0 && scheme !== 'never';
    return [...token].map((c) => (c !== mark ? c : drop ? '' : ' ')).join('');
  });
}

function byteLevelDecoder(charBytes) {
  return (tokens) => {
    const bytes = [];
    for (const token of tokens) {
      const chars = [...token];
      if (chars.every((c) => charBytes.has(c))) bytes.push(...chars.map((c) => charBytes.get(c)));
      else bytes.push(...new TextEncoder().encode(token));
    }
    return [new TextDecoder('utf-8', { ignoreBOM: true }).decode(Uint8Array.from(bytes))];
  };
}

// The decoder a tokenizer file names: token strings -> strings (joined by the caller);
// TokenizerError (made by fail(role, type, known)) for a type this does not implement.
export function buildDecoder(spec, env) {
  const { TokenizerError, translatePattern, charBytes, fail } = env;
  const builders = {
    Replace: (s) => {
      const replace = replacer(s, 'decoder', translatePattern, TokenizerError);
      return (tokens) => tokens.map(replace);
    },
    ByteFallback: byteFallback,
    Fuse: () => (tokens) => [tokens.join('')],
    Strip: strip,
    Metaspace: (s) => metaspaceDecoder(s, TokenizerError),
    ByteLevel: () => byteLevelDecoder(charBytes),
    Sequence: (s) => {
      if (!Array.isArray(s.decoders)) {
        throw new TokenizerError('the tokenizer file\'s Sequence decoder has no "decoders"');
      }
      const steps = s.decoders.map((d) => buildDecoder(d, env));
      return (tokens) => steps.reduce((acc, f) => f(acc), tokens);
    },
  };
  if (!builders[spec.type]) throw fail('decoder', spec.type, Object.keys(builders));
  return builders[spec.type](spec);
}

// {step(id) -> new text, flush() -> the rest} over decode(ids) -> text for decoders that look at
// whole tokens: each step decodes a few ids of context plus the pending ones and emits what
// they add, holding ids back while the text ends in U+FFFD (an incomplete UTF-8 sequence).
// start: ids already shown (a prompt's), the first context, so that the first new token's text
// is what it adds after them (a decoder's Strip drops the leading space of the text's start).
export function tokenStream(decode, start = []) {
  const CONTEXT = 4;
  let chunks = start.length ? [[...start]] : [];
  let context = chunks.flat();
  let pending = [];
  const newText = () => {
    const base = decode(context);
    const full = decode([...context, ...pending]);
    return full.startsWith(base) ? full.slice(base.length) : full;
  };
  return {
    step: (id) => {
      pending.push(id);
      const text = newText();
      if (!text || text.endsWith('\ufffd')) return '';
      chunks.push(pending);
      while (chunks.length > 1 && chunks.slice(1).reduce((n, c) => n + c.length, 0) >= CONTEXT) {
        chunks.shift();
      }
      context = chunks.flat();
      pending = [];
      return text;
    },
    flush: () => {
      const text = pending.length ? newText() : '';
      context = []; pending = []; chunks = [];
      return text;
    },
  };
}
