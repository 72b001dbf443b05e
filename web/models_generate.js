// The Models view's Generate panel: a causal LM opened in the view (an .onnx whose inputs
// include input_ids and whose outputs include logits, in the transformers.js / Optimum layout)
// plus its tokenizer.json (byte-level or SentencePiece-style BPE, read by the Generate demo's
// tokenizer.js; a file using anything else is a TokenizerError naming it) writes from
// a prompt, as the Generate demo does: temperature, top-k, seed, tokens streaming in, tokens/s.
// The tokens come from kg.generate in kernelgen's worker (Kernelgen.generate, onToken per
// token); the header's Stop stops it. A bad tokenizer file is its TokenizerError in the panel.
// A Stop that restarts Python (a page without cross-origin isolation) leaves the panel open: the
// next Generate reads the model's file again and gives it to the new Python.
import { Tokenizer } from './demos/tokenizer.js';
import { el } from './views.js';

const $ = (id) => document.getElementById(id);
// model: the LM's facts (null: the view's model is no LM); bytes: its file's bytes, until the
// worker has them; file: the File it was opened from, read again after a restart (lost: the
// worker's Python no longer holds the model); last: the last generation's {tokens, text,
// seconds, error}
const state = { model: null, bytes: null, file: null, lost: false, tokenizer: null, last: null,
  runs: 0 };
// End-of-text tokens generation stops after (GPT-2 / SmolLM / Qwen, Llama 2 / TinyLlama, Llama 3)
const END_TOKENS = ['<|endoftext|>', '</s>', '<|end_of_text|>', '<|eot_id|>', '<|im_end|>'];

export function isCausalLM(model) {
  return Boolean(model?.inputs.some((i) => i.name === 'input_ids') &&
    model.outputs.some((o) => o.name === 'logits'));
}

function vocabOf(model) {
  const logits = model.outputs.find((o) => o.name === 'logits');
  const size = logits?.shape[logits.shape.length - 1];
  return Number.isInteger(size) ? size : null;
}

const number = (label, id, value, extra = {}) => el('label', { class: 'hint' }, `${label} `,
  el('input', { id, type: 'number', value: String(value), ...extra }));

function panel() {
  return el('section', { id: 'model-generate', class: 'card', hidden: '' },
    el('h3', {}, 'Generate'),
    el('div', { class: 'buttons' },
      el('label', { class: 'hint' }, 'tokenizer.json ',
        el('input', { id: 'model-tokenizer', type: 'file', accept: '.json,application/json' })),
      el('span', { id: 'model-tokenizer-info', class: 'hint' }, 'open the model\'s tokenizer')),
    el('pre', { id: 'model-tokenizer-error', class: 'kernel-errors' }),
    el('textarea', { id: 'model-prompt', rows: '3', cols: '80', spellcheck: 'false' }),
    el('div', { class: 'buttons' },
      el('button', { id: 'model-generate-run', class: 'primary', disabled: '' }, 'Generate'),
      number('temperature', 'model-temperature', 0, { min: '0', step: '0.1' }),
      number('top-k', 'model-top-k', 40, { min: '0' }),
      number('tokens', 'model-max-tokens', 32, { min: '1' }),
      number('seed', 'model-gen-seed', 0)),
    el('pre', { id: 'model-gen-output', class: 'generated' }),
    el('div', { id: 'model-gen-stats', class: 'hint' }));
}

// Read a tokenizer.json the user picked; it must fit the model's vocabulary.
async function useTokenizer(file) {
  $('model-tokenizer-error').textContent = '';
  try {
    const tok = Tokenizer.fromString(await file.text());
    const vocab = state.model && vocabOf(state.model);
    if (vocab && tok.vocabSize > vocab) {
      throw Object.assign(new Error(`this tokenizer has ${tok.vocabSize} ids, the model's ` +
        `logits ${vocab}`), { name: 'TokenizerError' });
    }
    state.tokenizer = tok;
    $('model-tokenizer-info').textContent = `${file.name}: ${tok.vocabSize} ids`;
  } catch (error) {
    state.tokenizer = null;
    $('model-tokenizer-info').textContent = '';
    $('model-tokenizer-error').textContent = `${error.name}: ${error.message}`;
  }
  $('model-generate-run').disabled = !state.tokenizer;
  $('model-generate').dataset.tokenizerLoads = String(Number(
    $('model-generate').dataset.tokenizerLoads || 0) + 1);
}

function settings() {
  const int = (id, fallback) => Math.floor(Number($(id).value)) || fallback;
  return { temperature: Math.max(0, Number($('model-temperature').value) || 0),
    topK: Math.max(0, int('model-top-k', 0)),
    maxNewTokens: Math.max(1, int('model-max-tokens', 32)),
    seed: int('model-gen-seed', 0) };
}

// One generation through the view's busy() (one model action at a time; Stop ends it).
async function generate(busy) {
  const tok = state.tokenizer;
  const stop = tok.added.filter((t) => END_TOKENS.includes(t.content)).map((t) => t.id);
  const ids = tok.encode($('model-prompt').value);
  const stream = tok.decodeStream({ after: ids });
  const out = $('model-gen-output');
  out.textContent = $('model-prompt').value;
  const last = { tokens: [], text: '', seconds: 0 };
  state.last = last;
  const result = await busy(async (kg) => {
    if (!ids.length) throw { type: 'TokenizerError', message: 'the prompt has no tokens' };
    const started = performance.now();
    const onToken = (token) => {
      last.tokens.push(token);
      const text = stream.step(token);
      last.text += text;
      out.textContent += text;
      last.seconds = (performance.now() - started) / 1000;
      $('model-gen-stats').textContent = `${last.tokens.length} tokens · ` +
        `${(last.tokens.length / last.seconds).toFixed(1)} tokens/s (the first includes compiling)`;
    };
    const done = await kg.generate(await modelBytes(), ids, { ...settings(), stop, onToken });
    Object.assign(state, { bytes: null, lost: false });   // the worker keeps the model
    return done;
  }, 'generating');
  const rest = stream.flush();
  last.text += rest;
  out.textContent += rest;
  last.error = result?.error ?? null;
  state.runs += 1;
  $('model-generate').dataset.runs = String(state.runs);
  return last;
}

// The model's bytes for the worker: null when it holds them (it keeps the model given last).
async function modelBytes() {
  if (state.bytes || !state.lost) return state.bytes;
  if (!state.file) {
    throw { type: 'ModelError', message: 'Python was restarted and the model\'s file is not ' +
      'at hand: open the model again' };
  }
  return new Uint8Array(await state.file.arrayBuffer());
}

// The view opened `model` from `bytes` (read from `file`): show the panel for a causal LM, hide
// it otherwise.
export function modelOpened(model, bytes, file = null) {
  const lm = isCausalLM(model);
  Object.assign(state, { model: lm ? model : null, bytes: lm ? bytes : null,
    file: lm ? file : null, lost: false });
  $('model-generate').hidden = !lm;
  $('model-gen-output').textContent = '';
  $('model-gen-stats').textContent = lm ? `a causal LM: ${vocabOf(model) ?? '?'} ids` : '';
}

export function modelClosed() {
  modelOpened(null, null);
}

// Python was restarted (a Stop on a page that is not cross-origin isolated), so the worker no
// longer holds the LM: the panel stays open and the next Generate gives the model again.
// Returns whether the panel has an LM to keep.
export function modelLost() {
  if (state.model) state.lost = true;
  return Boolean(state.model);
}

// Add the panel to the view; busy(task, what) is the view's one-action-at-a-time runner.
export function setupGenerate(view, busy) {
  view.append(panel());
  $('model-tokenizer').onchange = (event) => {
    const file = event.target.files?.[0];
    if (file) useTokenizer(file);
    event.target.value = '';
  };
  $('model-generate-run').onclick = () => generate(busy);
  return { state, generate: () => generate(busy), isCausalLM };
}
