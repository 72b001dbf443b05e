// The Generate demo's "Continue training in the page": the committed model trains on, in
// kernelgen's worker (Pyodide + the page's WEBGPU device), on the corpus examples/train_lm.py
// used (the standard library's modules, Pyodide's own). Each worker run is one chunk of AdamW
// steps of lm_train.py (the model stays on the GPU between runs) and returns the chunk's mean
// loss: the page plots it. On Stop, or after the set number of steps, a last run returns the
// weights, which are written into the exported bundle (model.setWeights): Generate then uses
// them, with no reload and no recompiling.
import { $, exclusive, base64, boot } from './common.js';

const STEPS_PER_RUN = 4;

// training: {status: 'idle' | 'starting' | 'running' | 'stopping' | 'stopped' | 'failed',
// history: [{step, loss, seconds}], stepsPerSecond, weights: {bundle name: Float32Array}}
export const training = { status: 'idle', history: [], stepsPerSecond: 0, weights: null,
  stop: false, error: null, kg: null };

function setStatus(status) {
  training.status = status;
  document.body.dataset.training = status;
  $('train').disabled = ['starting', 'running', 'stopping'].includes(status);
  $('train-stop').disabled = !['starting', 'running'].includes(status);
}

// The first run's header: the model's source, tokenizer, weights and the bundle's weight names
// (JSON strings and lists are Python literals too).
function header({ steps, exportWeights, reset, files, names }) {
  const py = (flag) => (flag ? 'True' : 'False');
  const lines = [`STEPS = ${steps}`, `EXPORT = ${py(exportWeights)}`, `RESET = ${py(reset)}`];
  if (reset) {
    lines.push(`TINY_GPT = ${JSON.stringify(files.source)}`,
      `TOKENIZER = ${JSON.stringify(files.tokenizer)}`,
      `WEIGHTS = "${base64(new Uint8Array(files.weights))}"`, `NAMES = ${JSON.stringify(names)}`);
  }
  return `${lines.join('\n')}\n`;
}

// ---- the plot: the loss of each chunk by step ----

export function drawPlot() {
  const canvas = $('train-plot');
  const ctx = canvas.getContext('2d');
  const [w, h, pad] = [canvas.width, canvas.height, 24];
  ctx.fillStyle = '#0f1216';
  ctx.fillRect(0, 0, w, h);
  ctx.strokeStyle = '#2a313c';
  ctx.strokeRect(pad, pad, w - 2 * pad, h - 2 * pad);
  const points = training.history;
  if (!points.length) return;
  const lastStep = Math.max(10, points[points.length - 1].step);
  const losses = points.map((p) => p.loss);
  const [low, high] = [Math.min(...losses), Math.max(...losses)];
  const span = Math.max(high - low, 0.05);
  const x = (step) => pad + (step / lastStep) * (w - 2 * pad);
  const y = (loss) => h - pad - ((loss - low) / span) * (h - 2 * pad);
  ctx.strokeStyle = '#d29922';
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, x(p.step), y(p.loss)));
  ctx.stroke();
  ctx.fillStyle = '#d29922';
  points.forEach((p) => ctx.fillRect(x(p.step) - 1.5, y(p.loss) - 1.5, 3, 3));
  ctx.font = '10px system-ui';
  ctx.fillStyle = '#7d8895';
  ctx.fillText(`training loss ${high.toFixed(3)} … ${low.toFixed(3)}`, pad, pad - 8);
  ctx.fillText(`step ${lastStep}`, w - pad - 44, h - 8);
  canvas.dataset.points = String(points.length);
}

function showProgress(maxSteps) {
  const last = training.history[training.history.length - 1];
  $('train-info').textContent = last ? `step ${last.step} of ${maxSteps}: loss ` +
    `${last.loss.toFixed(4)} (mean of the last ${STEPS_PER_RUN} steps), ` +
    `${training.stepsPerSecond.toFixed(2)} steps/s` : 'starting kernelgen, tokenizing the ' +
    'corpus, compiling the training step…';
  drawPlot();
}

// {bundle weight name: Float32Array} from a run's out: [loss, steps, weights in names order]
function weightsOf(values, model) {
  const weights = {};
  let at = 2;
  for (const spec of model.manifest.weights) {
    const size = spec.shape.reduce((a, b) => a * b, 1);
    weights[spec.name] = Float32Array.from(values.subarray(at, at + size));
    at += size;
  }
  return weights;
}

async function kernelgen() {
  if (!training.kg) {
    $('loader').hidden = false;
    training.kg = await boot();
  }
  return training.kg;
}

// Train until Stop or the set number of steps; `use(weights, steps)` makes Generate use them.
export async function train({ model, use }) {
  const maxSteps = Math.max(1, Math.floor(Number($('train-steps').value)) || 200);
  Object.assign(training, { history: [], stepsPerSecond: 0, weights: null, stop: false,
    error: null });
  setStatus('starting');
  showProgress(maxSteps);
  try {
    const [kg, source, files] = await Promise.all([kernelgen(),
      fetch('lm_train.py').then((r) => r.text()), fetchFiles()]);
    const names = model.manifest.weights.map((w) => w.name);
    const run = (options) => exclusive(() => kg.run(header({ ...options, files, names }) +
      source, { device: kg.device, timings: false }));
    const start = performance.now();
    let runStart = start;
    for (let reset = true, step = 0; !training.stop && step < maxSteps; reset = false) {
      const steps = Math.min(STEPS_PER_RUN, maxSteps - step);
      const result = await run({ steps, exportWeights: false, reset });
      const now = performance.now();
      const [loss, reached] = result.data;
      step = reached;
      training.history.push({ step, loss, seconds: (now - start) / 1000 });
      training.stepsPerSecond = steps / ((now - runStart) / 1000);
      runStart = now;
      if (training.status === 'starting') setStatus('running');
      showProgress(maxSteps);
    }
    if (training.history.length) {
      const result = await run({ steps: 0, exportWeights: true, reset: false });
      training.weights = weightsOf(result.data, model);
      await use(training.weights, result.data[1]);
    }
  } catch (error) {
    training.error = { type: error.type || error.name, message: error.message };
    $('train-info').textContent = `training failed: ${training.error.type}: ${error.message}`;
    setStatus('failed');
    return training;
  }
  setStatus('stopped');
  return training;
}

// The model's source (tiny_gpt.py, which build.sh copies beside the weights; its __future__
// import must go: the header comes first), the tokenizer and the committed weights.
async function fetchFiles() {
  const [source, tokenizer, weights] = await Promise.all([
    fetch('lm/tiny_gpt.py').then((r) => r.text()), fetch('lm/tokenizer.json').then((r) => r.text()),
    fetch('lm/weights.safetensors').then((r) => r.arrayBuffer())]);
  return { source: source.replace(/^from __future__ import .*$/m, ''), tokenizer, weights };
}

export function setupTraining(ctx) {
  setStatus('idle');
  drawPlot();
  $('train').addEventListener('click', () => train(ctx()));
  $('train-stop').addEventListener('click', () => {
    training.stop = true;
    setStatus('stopping');
  });
}
