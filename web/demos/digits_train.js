// The digits demo's "Train in the page": the MLP starts from random weights and trains in
// kernelgen's worker (Pyodide + the page's WEBGPU device) on scikit-learn's digits, which build.sh
// wrote into the site (digits_data.json). Each worker run is one chunk of Adam steps of
// digits_train.py (the model stays on the GPU between runs) and returns the loss, the held-out
// accuracy and the weights: the page plots the first two, and on Stop (or after the set number
// of epochs; one step is one epoch: the batch is the whole training set) classifies with the
// weights.
import { $, exclusive, base64 } from './common.js';

const STEPS_PER_RUN = 5;
const SHAPES = { w1: [64, 32], b1: [32], w2: [32, 10], b2: [10] };
const HEAD = 3;  // the run's out: [loss, held-out accuracy, steps, w1..., b1..., w2..., b2...]

// training: {status: 'starting' | 'running' | 'stopping' | 'stopped' | 'failed', history:
// [{step, loss, accuracy, seconds}], stepsPerSecond, reached95 (seconds or null), weights}
export const training = { status: 'idle', history: [], stepsPerSecond: 0, reached95: null,
  weights: null, stop: false, error: null };

function setStatus(status) {
  training.status = status;
  document.body.dataset.training = status;
  $('train').disabled = ['starting', 'running', 'stopping'].includes(status);
  $('stop').disabled = !['starting', 'running'].includes(status);
}

// The run's float32 weights as the demo's weight entries {shape, data: base64 float32}.
function weightEntries(values) {
  const entries = {};
  let at = HEAD;
  for (const [name, shape] of Object.entries(SHAPES)) {
    const size = shape.reduce((a, b) => a * b, 1);
    const part = Float32Array.from(values.subarray(at, at + size));
    entries[name] = { shape, data: base64(new Uint8Array(part.buffer)) };
    at += size;
  }
  return entries;
}

function header(reset, dataText) {
  const lines = [`STEPS = ${STEPS_PER_RUN}`, `RESET = ${reset ? 'True' : 'False'}`];
  if (reset) lines.push(`DATA = ${dataText}`);  // JSON of strings and ints: a Python literal too
  return `${lines.join('\n')}\n`;
}

// ---- the plot: loss (0..its largest value) and held-out accuracy (0..100%) by step ----

// The legend's strip above the plot area (no curve is drawn there, so none crosses its text).
const LEGEND = 22;

// (exported for tests: the plot of training.history)
export function drawPlot() {
  const canvas = $('train-plot');
  const ctx = canvas.getContext('2d');
  const [w, h, pad, top] = [canvas.width, canvas.height, 24, LEGEND];
  ctx.fillStyle = '#0f1216';
  ctx.fillRect(0, 0, w, h);
  ctx.strokeStyle = '#2a313c';
  ctx.strokeRect(pad, top, w - 2 * pad, h - pad - top);
  const points = training.history;
  if (!points.length) return;
  const lastStep = Math.max(10, points[points.length - 1].step);
  const maxLoss = Math.max(...points.map((p) => p.loss));
  const x = (step) => pad + (step / lastStep) * (w - 2 * pad);
  const y = (fraction) => h - pad - fraction * (h - pad - top);
  const line = (colour, value) => {
    ctx.strokeStyle = colour;
    ctx.beginPath();
    points.forEach((p, i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, x(p.step), y(value(p))));
    ctx.stroke();
  };
  ctx.setLineDash([3, 3]);
  ctx.strokeStyle = '#3fb95066';
  ctx.beginPath();
  ctx.moveTo(pad, y(0.95));
  ctx.lineTo(w - pad, y(0.95));
  ctx.stroke();
  ctx.setLineDash([]);
  line('#d29922', (p) => p.loss / maxLoss);
  line('#3fb950', (p) => p.accuracy);
  ctx.font = '10px system-ui';
  const legend = [['#d29922', `loss (max ${maxLoss.toFixed(2)})`],
    ['#3fb950', 'held-out accuracy (dashed: 95%)']];
  let at = pad;
  for (const [colour, text] of legend) {   // a colour swatch, then its label, in the strip
    ctx.fillStyle = colour;
    ctx.fillRect(at, top - 12, 10, 3);
    ctx.fillStyle = '#7d8895';
    ctx.fillText(text, at + 14, top - 7);
    at += 24 + ctx.measureText(text).width;
  }
  ctx.fillText(`step ${lastStep}`, w - pad - 44, h - 8);
}

function showProgress(maxSteps) {
  const last = training.history[training.history.length - 1];
  $('train-info').textContent = last ? `step ${last.step} of ${maxSteps}: loss ` +
    `${last.loss.toFixed(4)}, held-out accuracy ${(last.accuracy * 100).toFixed(1)}%, ` +
    `${training.stepsPerSecond.toFixed(2)} steps/s` + (training.reached95 === null ? ''
    : `; 95% after ${training.reached95.toFixed(1)} s`) : 'uploading the data, compiling…';
  drawPlot();
}

// ---- the loop ----

// Train until Stop or `epochs` steps; `ctx.kg()` boots kernelgen (its worker), `ctx.use(weights,
// summary)` makes the demo classify with the trained weights.
export async function train(ctx) {
  const maxSteps = Math.max(1, Number($('epochs').value) || 100);
  Object.assign(training, { history: [], stepsPerSecond: 0, reached95: null, weights: null,
    stop: false, error: null });
  setStatus('starting');
  showProgress(maxSteps);
  try {
    const [kg, source, dataText] = await Promise.all([ctx.kg(),
      fetch('digits_train.py').then((r) => r.text()),
      fetch('digits_data.json').then((r) => r.text())]);
    const start = performance.now();
    let runStart = start;
    for (let reset = true; !training.stop; reset = false) {
      const result = await exclusive(() => kg.run(header(reset, dataText) + source,
        { device: kg.device, timings: false }));
      const now = performance.now();
      const [loss, accuracy, step] = result.data;
      const seconds = (now - start) / 1000;
      training.history.push({ step, loss, accuracy, seconds });
      training.weights = weightEntries(result.data);
      training.stepsPerSecond = STEPS_PER_RUN / ((now - runStart) / 1000);
      runStart = now;
      if (accuracy >= 0.95 && training.reached95 === null) training.reached95 = seconds;
      if (training.status === 'starting') setStatus('running');
      showProgress(maxSteps);
      if (step >= maxSteps) break;
    }
  } catch (error) {
    training.error = { type: error.type || error.name, message: error.message };
    $('train-info').textContent = `training failed: ${training.error.type}: ${error.message}`;
    setStatus('failed');
    return training;
  }
  const last = training.history[training.history.length - 1];
  if (last) await ctx.use(training.weights, last);
  setStatus('stopped');
  return training;
}

export function setupTraining(ctx) {
  setStatus('idle');
  drawPlot();
  $('train').addEventListener('click', () => train(ctx));
  $('stop').addEventListener('click', () => {
    training.stop = true;
    setStatus('stopping');
  });
}
