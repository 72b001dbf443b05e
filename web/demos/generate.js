// The Generate demo: a small GPT (examples/train_lm.py) writes text from a prompt. The forward
// pass is an exported bundle (lm_bundle/, made by build.sh from lm_model.py: one step with a KV
// cache kept in the bundle's state); model.generate() prefills the prompt and runs one step per
// token, the token drawn on the GPU (top-k 0) or here from the logits read back (top-k > 0).
// tokenizer.js encodes the prompt and streams the text out (incomplete UTF-8 held back). No
// Python runs in the page unless "Continue training" boots it (generate_train.js).
import { $ } from './common.js';
import { Tokenizer } from './tokenizer.js';
import { setupTraining, training } from './generate_train.js';

const state = { model: null, tokenizer: null, log: null, running: null, stopper: null,
  last: null, error: null, runs: 0, trainedSteps: 0 };

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
    state.stopper = null;
    $('generate').disabled = false;
    $('stop').disabled = true;
    document.body.dataset.generating = 'false';
  });
  return state.running;
}

async function run() {
  const { temperature, topK, maxTokens, seed, stopAtEnd } = settings();
  const tok = state.tokenizer;
  const context = state.log.config.context;     // the model's positions (the bundle's context)
  const end = tok.added.find((t) => t.content === '<|endoftext|>')?.id;
  const prompt = $('prompt').value;
  const ids = tok.encode(prompt);
  if (!ids.length) ids.push(end ?? 0);
  const stream = tok.decodeStream();
  state.stopper = new AbortController();
  $('generate').disabled = true;
  $('stop').disabled = false;
  document.body.dataset.generating = 'true';
  document.body.dataset.tokens = '0';
  $('output-prompt').textContent = prompt;
  $('output-new').textContent = '';
  const stats = { tokens: 0, seconds: 0, gpuMs: 0, hasGpuTimes: false, ids: [], text: '' };
  state.last = stats;
  const started = performance.now();
  const onToken = (next, { gpuMs }) => {
    stats.hasGpuTimes = (state.model.timings || []).length > 0;
    stats.gpuMs += gpuMs;
    stats.tokens += 1;
    stats.seconds = (performance.now() - started) / 1000;
    if (next === end && stopAtEnd) return;
    stats.ids.push(next);
    const text = stream.step(next);
    stats.text += text;
    $('output-new').textContent += text;
    showStats(stats);
    document.body.dataset.tokens = String(stats.tokens);
  };
  await state.model.generate(ids.slice(-context), { maxNewTokens: maxTokens, temperature, topK,
    seed, stop: stopAtEnd && end !== undefined ? end : null, onToken,
    signal: state.stopper.signal });
  const rest = stream.flush();
  stats.text += rest;
  $('output-new').textContent += rest;
  stats.stopped = state.stopper.signal.aborted;
  showStats(stats);
  state.runs += 1;
  document.body.dataset.runs = String(state.runs);
  return stats;
}

export function stop() {
  if (state.running) state.stopper?.abort();
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

// A model train_lm.py grew from a shallower one (--grow-from): which, and how far it had come.
function grownFrom(log) {
  const g = log.grown_from;
  if (!g) return '';
  const steps = g.held_out ? ` after its ${g.held_out.step} steps` : '';
  return ` (grown from a ${g.layers}-layer model of ${g.parameters.toLocaleString()} ` +
    `parameters${steps})`;
}

function showModel(log) {
  const c = log.config;
  const held = log.held_out ? `, held-out perplexity ${log.held_out.perplexity.toFixed(1)} ` +
    `(bigram ${log.bigram.perplexity.toFixed(1)})` : '';
  $('model-info').textContent = `${c.parameters.toLocaleString()} parameters: ` +
    `${c.layers} layers, ` +
    `width ${c.dim}, ${c.heads} heads, window ${c.context}, vocabulary ${c.vocab}; trained ` +
    `${log.held_out?.step ?? c.steps} steps${grownFrom(log)}${held}.`;
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

window.generateDemo = { state, generate, stop, training };
main().catch((error) => {
  $('notice').textContent = `The demo failed to start: ${error.message}`;
  $('notice').hidden = false;
  document.body.dataset.ready = 'false';
});
