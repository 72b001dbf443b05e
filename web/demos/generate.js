// The Generate demo: a small GPT (examples/train_lm.py) writes text from a prompt. The forward
// pass is an exported bundle (lm_bundle/, made by build.sh from lm_model.py: the next-token
// logits after n tokens, n a symbolic size up to the model's CONTEXT); tokenizer.js encodes the
// prompt and streams the text out (incomplete UTF-8 held back). Sampling (temperature, top-k, a
// seeded generator) is plain JavaScript over the logits the bundle reads back: no Python runs in
// the page unless "Continue training" boots it (generate_train.js).
import { $ } from './common.js';
import { Tokenizer } from './tokenizer.js';
import { setupTraining, training } from './generate_train.js';

const state = { model: null, tokenizer: null, log: null, running: null, stopWanted: false,
  last: null, error: null, runs: 0, trainedSteps: 0 };

// A seeded generator (mulberry32): the same seed and settings give the same text.
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The next id: argmax at temperature 0, else a draw from softmax(logits / T) over the top k.
export function sample(logits, temperature, topK, random) {
  let order = Array.from(logits.keys());
  if (temperature <= 0) return order.reduce((best, i) => (logits[i] > logits[best] ? i : best), 0);
  order.sort((a, b) => logits[b] - logits[a]);
  if (topK > 0) order = order.slice(0, topK);
  const top = logits[order[0]];
  const weights = order.map((i) => Math.exp((logits[i] - top) / temperature));
  let r = random() * weights.reduce((s, w) => s + w, 0);
  for (let j = 0; j < order.length; j++) {
    r -= weights[j];
    if (r <= 0) return order[j];
  }
  return order[order.length - 1];
}

// The bundle's input: the text's last `context` ids (its length is the symbolic size n).
function windowInputs(ids, context) {
  return { ids: Int32Array.from(ids.slice(-context)) };
}

function settings() {
  return { temperature: Number($('temperature').value), topK: Math.floor(Number($('top-k').value)),
    maxTokens: Math.max(1, Math.floor(Number($('max-tokens').value))),
    seed: Math.floor(Number($('seed').value)) || 0, stopAtEnd: $('stop-at-end').checked };
}

function showStats({ tokens, seconds, gpuMs, hasGpuTimes }) {
  $('stat-tokens').textContent = String(tokens);
  if (!tokens) return;
  $('stat-rate').textContent = (tokens / seconds).toFixed(1);
  $('stat-ms').textContent = ((seconds * 1000) / tokens).toFixed(1);
  $('stat-gpu').textContent = hasGpuTimes ? (gpuMs / tokens).toFixed(2)
    : 'n/a (no timestamp-query on this adapter)';
}

// Generate from the prompt until maxTokens, <|endoftext|> or Stop.
export async function generate() {
  if (state.running) return state.running;
  state.running = run().finally(() => {
    state.running = null;
    state.stopWanted = false;
    $('generate').disabled = false;
    $('stop').disabled = true;
    document.body.dataset.generating = 'false';
  });
  return state.running;
}

async function run() {
  const { temperature, topK, maxTokens, seed, stopAtEnd } = settings();
  const tok = state.tokenizer;
  const context = state.model.inputs.find((i) => i.name === 'ids').shape[1];
  const end = tok.added.find((t) => t.content === '<|endoftext|>')?.id;
  const prompt = $('prompt').value;
  const ids = tok.encode(prompt);
  if (!ids.length) ids.push(end ?? 0);
  const stream = tok.decodeStream();
  const random = generator(seed);
  $('generate').disabled = true;
  $('stop').disabled = false;
  document.body.dataset.generating = 'true';
  document.body.dataset.tokens = '0';
  $('output-prompt').textContent = prompt;
  $('output-new').textContent = '';
  const stats = { tokens: 0, seconds: 0, gpuMs: 0, hasGpuTimes: false, ids: [], text: '' };
  state.last = stats;
  const started = performance.now();
  while (stats.tokens < maxTokens && !state.stopWanted) {
    const out = await state.model.run(windowInputs(ids, context));
    const next = sample(out.logits, temperature, topK, random);
    const timings = state.model.timings || [];
    stats.hasGpuTimes = timings.length > 0;
    stats.gpuMs += timings.reduce((s, t) => s + t.ms, 0);
    stats.tokens += 1;
    stats.seconds = (performance.now() - started) / 1000;
    if (next === end && stopAtEnd) break;
    ids.push(next);
    stats.ids.push(next);
    const text = stream.step(next);
    stats.text += text;
    $('output-new').textContent += text;
    showStats(stats);
    document.body.dataset.tokens = String(stats.tokens);
  }
  const rest = stream.flush();
  stats.text += rest;
  $('output-new').textContent += rest;
  stats.stopped = state.stopWanted;
  showStats(stats);
  state.runs += 1;
  document.body.dataset.runs = String(state.runs);
  return stats;
}

export function stop() {
  if (state.running) state.stopWanted = true;
}

// A tokenizer.json from the file input: it replaces the shipped one if it reads and fits the
// model's vocabulary; otherwise its TokenizerError shows under the input.
async function useTokenizerFile(file) {
  $('tokenizer-error').textContent = '';
  try {
    const tok = Tokenizer.fromString(await file.text());
    const vocab = state.model?.outputs.find((o) => o.name === 'logits').shape[1];
    if (vocab && tok.vocabSize > vocab) {
      throw Object.assign(new Error(`this tokenizer has ${tok.vocabSize} ids, the model ${vocab}`),
        { name: 'TokenizerError' });
    }
    state.tokenizer = tok;
    $('tokenizer-info').textContent = `using ${file.name}: ${tok.vocabSize} ids`;
  } catch (error) {
    state.error = { type: error.name, message: error.message };
    $('tokenizer-error').textContent = `${error.name}: ${error.message}`;
  }
  const loads = Number(document.body.dataset.tokenizerLoads || 0);
  document.body.dataset.tokenizerLoads = String(loads + 1);
}

function showModel(log) {
  const c = log.config;
  const held = log.held_out ? `, held-out perplexity ${log.held_out.perplexity.toFixed(1)} ` +
    `(bigram ${log.bigram.perplexity.toFixed(1)})` : '';
  $('model-info').textContent = `${c.parameters.toLocaleString()} parameters: ` +
    `${c.layers} layers, ` +
    `width ${c.dim}, ${c.heads} heads, window ${c.context}, vocabulary ${c.vocab}; trained ` +
    `${log.held_out?.step ?? c.steps} steps${held}.`;
  $('context').textContent = String(c.context);
}

// Generate with weights trained in the page from now on: written into the loaded bundle (no
// recompiling), then a generation from the prompt shows what they write.
async function useTrainedWeights(weights, steps) {
  await state.running;
  state.model.setWeights((name) => weights[name]);
  state.trainedSteps = steps;
  $('weights-info').textContent = `weights: the committed model trained ${steps} more steps in ` +
    'this page';
  document.body.dataset.trainedSteps = String(steps);
  await generate();
}

async function main() {
  const [tokText, log] = await Promise.all([
    fetch('lm/tokenizer.json').then((r) => r.text()),
    fetch('lm/train_log.json').then((r) => r.json())]);
  state.tokenizer = Tokenizer.fromString(tokText);
  state.log = log;
  showModel(log);
  $('tokenizer-info').textContent = `lm/tokenizer.json: ${state.tokenizer.vocabSize} ids ` +
    '(trained by kg.text.train_bpe on the standard library)';
  $('tokenizer-file').addEventListener('change', (e) => {
    if (e.target.files[0]) useTokenizerFile(e.target.files[0]);
  });
  if (!navigator.gpu) {
    throw new Error('this demo runs its exported bundle on WebGPU, which this browser lacks');
  }
  const { load } = await import('./lm_bundle/model.js');
  state.model = await load({ timings: true });
  $('device').textContent = 'WEBGPU';
  $('device').className = 'pill webgpu';
  $('adapter').textContent = 'WebGPU: the exported bundle lm_bundle/model.js (no Python)';
  $('generate').disabled = false;
  $('generate').addEventListener('click', () => generate());
  $('stop').addEventListener('click', stop);
  setupTraining(() => ({ model: state.model, use: useTrainedWeights }));
  document.body.dataset.ready = 'true';
}

window.generateDemo = { state, generate, stop, sample, training };
main().catch((error) => {
  $('notice').textContent = `The demo failed to start: ${error.message}`;
  $('notice').hidden = false;
  document.body.dataset.ready = 'false';
});
