// The digits demo: a drawing pad, downsampled the way scikit-learn's digits were made (the digit
// scaled into a 32x32 box, ink counted in 4x4 blocks: 8x8 values 0..16), classified by an MLP
// whose forward pass is a kernelgen program run on WebGPU (or the PYTHON fallback). With WebGPU
// the page runs the program's exported bundle (digits_bundle/, made by build.sh from
// digits_model.py) and boots no Python; Pyodide boots only for "show kernels" or without WebGPU.
import { $, exclusive, boot, fallbackNotice, KernelsView, KERNELS_VIEW_HTML } from './common.js';
import { setupTraining, training } from './digits_train.js';

const PAD_INK = 24;        // pen width on the 280x280 pad
const BOX = 32;            // the digit is scaled to fit a BOX x BOX bitmap ...
const BLOCK = 4;           // ... whose BLOCK x BLOCK blocks become the 8x8 input
const GRID = BOX / BLOCK;
const BOX_INK = 7;         // the dataset's strokes are ~7 of 32 pixels wide: thinner ones are widened

const state = { kg: null, model: null, weights: null, input: null, probs: null, runs: 0,
  busy: null, wanted: null, kernels: null, last: null, error: null };

// ---- the program ----

// The forward pass, as the page runs it: weights come in as base64 float32 string literals.
const FORWARD = `import base64


def param(text, *shape):
  """float32 values stored as little-endian base64, as a tensor of \`shape\`."""
  return Tensor(memoryview(base64.b64decode(text)).cast('f')).reshape(*shape)


pixels = Tensor(PIXELS, dtype='float32').reshape(1, 64)  # the 8x8 input, 0..16, row-major
w1, b1 = param(W1, 64, 32), param(B1, 32)
w2, b2 = param(W2, 32, 10), param(B2, 10)
hidden = ((pixels / 16) @ w1 + b1).relu()
logits = hidden @ w2 + b2
out = logits.contiguous().softmax(axis=-1)  # class probabilities, shape (1, 10)
`;

function program(pixels, { elide = false } = {}) {
  const w = state.weights;
  const literal = (name) => (elide ? `"<${w[name].shape.join('x')} float32, base64>"`
    : JSON.stringify(w[name].data));
  const header = ['W1', 'B1', 'W2', 'B2'].map((n) => `${n} = ${literal(n.toLowerCase())}`);
  return `${header.join('\n')}\nPIXELS = ${JSON.stringify(pixels)}\n${FORWARD}`;
}

// ---- classify (the latest input wins while a run is in flight) ----

export function classify(pixels) {
  state.wanted = pixels;
  if (!state.busy) state.busy = drain();
  return state.busy;
}

async function drain() {
  let result = null;
  try {
    while (state.wanted) {
      const pixels = state.wanted;
      state.wanted = null;
      result = await runOnce(pixels);
    }
  } finally {
    state.busy = null;
  }
  return result;
}

// The forward pass on the exported bundle, else through kernelgen in Pyodide.
async function forward(pixels, code) {
  if (state.model) {
    const out = await state.model.run({ pixels: Float32Array.from(pixels) });
    return { data: out.probs, device: 'WEBGPU', timings: [] };
  }
  return exclusive(() => state.kg.run(code, { device: state.kg.device }));
}

async function runOnce(pixels) {
  const code = program(pixels);
  const start = performance.now();
  try {
    const result = await forward(pixels, code);
    const ms = performance.now() - start;
    state.input = pixels;
    state.probs = Array.from(result.data);
    state.error = null;
    state.last = { device: result.device || state.kg.device, ms, timings: result.timings };
    showResult(state.probs, state.last);
    state.kernels?.update(code, result.timings);
  } catch (error) {
    state.error = { type: error.type, message: error.message };
    $('run-info').textContent = `${error.type}: ${error.message}`;
  }
  drawGrid(pixels);
  state.runs += 1;
  document.body.dataset.runs = String(state.runs);
  return { input: state.input, probs: state.probs, error: state.error };
}

// ---- showing results ----

function makeBars() {
  $('bars').replaceChildren(...Array.from({ length: 10 }, (_, digit) => {
    const row = document.createElement('div');
    row.className = 'bar-row';
    row.innerHTML = `<span class="label">${digit}</span><div class="track"><div class="value">` +
      '</div></div><span class="pct">–</span>';
    return row;
  }));
}

function showResult(probs, { device, ms, timings }) {
  const best = probs.indexOf(Math.max(...probs));
  [...$('bars').children].forEach((row, digit) => {
    row.classList.toggle('top', digit === best);
    row.querySelector('.value').style.width = `${(probs[digit] * 100).toFixed(1)}%`;
    row.querySelector('.pct').textContent = `${(probs[digit] * 100).toFixed(1)}%`;
  });
  $('digit').textContent = String(best);
  $('confidence').textContent = `${(probs[best] * 100).toFixed(1)}% sure`;
  $('run-info').textContent = `${device}: ${ms.toFixed(0)} ms per classification ` +
    (state.model ? '(exported bundle: upload + run + read back)'
      : '(compile + upload + run + read back)');
  const rows = (timings || []).map((t) => `<tr><td>${t.name}</td><td class="ms">` +
    `${t.ms.toFixed(3)} ms</td></tr>`);
  $('timings').innerHTML = rows.length ? `<tr><th>kernel</th><th>GPU time</th></tr>${rows.join('')}`
    : '';
}

function drawGrid(pixels) {
  const ctx = $('grid').getContext('2d');
  const cell = $('grid').width / GRID;
  pixels.forEach((value, i) => {
    const level = Math.round((value / 16) * 255);
    ctx.fillStyle = `rgb(${level},${level},${level})`;
    ctx.fillRect((i % GRID) * cell, Math.floor(i / GRID) * cell, cell, cell);
  });
}

// ---- the pad: drawing, and the 8x8 input it makes ----

function inkBox(data, width, height) {
  let [x0, y0, x1, y1] = [width, height, -1, -1];
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (data[(y * width + x) * 4] < 40) continue;
      x0 = Math.min(x0, x); x1 = Math.max(x1, x);
      y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
  }
  return x1 < 0 ? null : { x: x0, y: y0, w: x1 - x0 + 1, h: y1 - y0 + 1 };
}

// The pad's drawing as the network's input: 64 ints 0..16, or null for an empty pad.
export function padPixels() {
  const pad = $('pad');
  const data = pad.getContext('2d').getImageData(0, 0, pad.width, pad.height).data;
  const box = inkBox(data, pad.width, pad.height);
  if (!box) return null;
  const small = new OffscreenCanvas(BOX, BOX);
  const ctx = small.getContext('2d');
  const scale = BOX / Math.max(box.w, box.h);
  const [w, h] = [box.w * scale, box.h * scale];
  // Widen the scaled strokes to the data set's by drawing them shifted within a disc (lighten).
  const radius = Math.max(0, Math.round((BOX_INK - PAD_INK * scale) / 2));
  ctx.globalCompositeOperation = 'lighten';
  for (let dy = -radius; dy <= radius; dy++) {
    for (let dx = -radius; dx <= radius; dx++) {
      if (dx * dx + dy * dy > radius * radius + 1) continue;
      ctx.drawImage(pad, box.x, box.y, box.w, box.h, (BOX - w) / 2 + dx, (BOX - h) / 2 + dy, w, h);
    }
  }
  const ink = ctx.getImageData(0, 0, BOX, BOX).data;
  return Array.from({ length: GRID * GRID }, (_, i) => {
    let sum = 0;
    for (let dy = 0; dy < BLOCK; dy++) {
      for (let dx = 0; dx < BLOCK; dx++) {
        const [x, y] = [(i % GRID) * BLOCK + dx, Math.floor(i / GRID) * BLOCK + dy];
        sum += ink[(y * BOX + x) * 4] / 255;
      }
    }
    return Math.min(16, Math.round(sum));
  });
}

function clearPad() {
  const ctx = $('pad').getContext('2d');
  ctx.fillStyle = '#000';
  ctx.fillRect(0, 0, $('pad').width, $('pad').height);
}

function setupPad() {
  const pad = $('pad');
  const ctx = pad.getContext('2d', { willReadFrequently: true });
  let drawing = false;
  let frame = 0;
  const at = (event) => {
    const rect = pad.getBoundingClientRect();
    return [(event.clientX - rect.left) * (pad.width / rect.width),
      (event.clientY - rect.top) * (pad.height / rect.height)];
  };
  const update = () => {
    frame = 0;
    const pixels = padPixels();
    if (pixels) classify(pixels);
  };
  pad.addEventListener('pointerdown', (event) => {
    drawing = true;
    pad.setPointerCapture(event.pointerId);
    Object.assign(ctx, { strokeStyle: '#fff', lineWidth: PAD_INK, lineCap: 'round', lineJoin: 'round' });
    ctx.beginPath();
    ctx.moveTo(...at(event));
    ctx.lineTo(...at(event));
    ctx.stroke();
  });
  pad.addEventListener('pointermove', (event) => {
    if (!drawing) return;
    ctx.lineTo(...at(event));
    ctx.stroke();
    if (!frame) frame = requestAnimationFrame(update);
  });
  const end = () => {
    if (!drawing) return;
    drawing = false;
    cancelAnimationFrame(frame);
    update();
  };
  pad.addEventListener('pointerup', end);
  pad.addEventListener('pointercancel', end);
  clearPad();
}

// Show 64 values 0..16 on the pad (as big gray blocks) and classify exactly those values.
export function setInput(pixels) {
  const ctx = $('pad').getContext('2d');
  const cell = $('pad').width / GRID;
  pixels.forEach((value, i) => {
    const level = Math.round((value / 16) * 255);
    ctx.fillStyle = `rgb(${level},${level},${level})`;
    ctx.fillRect((i % GRID) * cell, Math.floor(i / GRID) * cell, cell, cell);
  });
  return classify(pixels);
}

function setupSamples(samples) {
  for (const sample of samples) {
    const button = document.createElement('button');
    button.textContent = String(sample.label);
    button.title = `a held-out test image labelled ${sample.label}`;
    button.dataset.sample = String(sample.label);
    button.addEventListener('click', () => setInput(sample.pixels));
    $('samples').append(button);
  }
}

// ---- start ----

// The exported bundle on WebGPU, or null (no WebGPU, `?webgpu=0`, or no bundle in this build).
async function loadBundle() {
  if (new URLSearchParams(location.search).get('webgpu') === '0') return null;
  try {
    const { load } = await import('./digits_bundle/model.js');
    return await load();
  } catch (error) {
    console.info(`digits: running through Pyodide (${error.message})`);
    return null;
  }
}

function showBundleDevice() {
  $('loader').classList.add('done');
  $('device').textContent = 'WEBGPU';
  $('device').className = 'pill webgpu';
  $('adapter').textContent = 'WebGPU: the exported bundle digits_bundle/model.js (no Python)';
  document.body.dataset.device = 'WEBGPU';
}

// kernelgen's worker (Pyodide): booted on first use when the bundle runs.
async function ensureKg() {
  if (!state.kg) {
    $('loader').classList.remove('done');
    state.kg = await boot();
    if (state.model) showBundleDevice();
  }
  return state.kg;
}

// Classify with weights trained in the page from now on: through kernelgen in the worker (the
// exported bundle holds the shipped weights), and again the input on show.
async function useTrainedWeights(weights, { accuracy, step }) {
  state.weights = { ...state.weights, ...weights };
  state.model = null;
  state.trained = { accuracy, step };
  $('accuracy').textContent = `Now classifying with the weights trained in this page: held-out ` +
    `accuracy ${(accuracy * 100).toFixed(1)}% after ${step} steps.`;
  $('adapter').textContent = `${state.kg.device}: kernelgen in the worker (Pyodide), with the ` +
    'weights trained in this page';
  if (state.input) await classify(state.input);
}

// "Show kernels" compiles the program in Pyodide: booted on first use when the bundle runs.
async function toggleKernels() {
  if (!state.kernels) {
    await ensureKg();
    const view = $('kernels-view');
    view.innerHTML = KERNELS_VIEW_HTML;
    state.kernels = new KernelsView(state.kg, view);
    if (state.input) state.kernels.update(program(state.input), state.last?.timings);
  }
  return state.kernels.toggle();
}

async function main() {
  makeBars();
  setupPad();
  drawGrid(new Array(64).fill(0));
  const weights = fetch('digits_weights.json').then((r) => r.json());
  state.model = await loadBundle();
  if (state.model) {
    showBundleDevice();
  } else {
    state.kg = await boot();
    fallbackNotice(state.kg, 'Each classification takes around a second.');
  }
  state.weights = await weights;
  $('show-kernels').addEventListener('click', toggleKernels);
  $('clear').addEventListener('click', clearPad);
  setupTraining({ kg: ensureKg, use: useTrainedWeights });
  setupSamples(state.weights.samples);
  $('program').textContent = program('[...]'.split(), { elide: true }).replace(
    'PIXELS = ["[...]"]', 'PIXELS = [...]  # 64 values from the pad');
  const acc = state.weights.accuracy;
  $('accuracy').textContent = `Held-out test accuracy ${(acc.test * 100).toFixed(1)}% on ` +
    `${acc.n_test} digits (trained on ${acc.n_train}).`;
  document.body.dataset.ready = 'true';
}

window.digitsDemo = { state, classify, setInput, padPixels, program, clearPad, training };
main().catch((error) => {
  $('notice').textContent = `The demo failed to start: ${error.message}`;
  $('notice').hidden = false;
  document.body.dataset.ready = 'false';
});
