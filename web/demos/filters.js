// The image filters demo: a chain of kernelgen ops over an RGB image, run on WebGPU (or the
// PYTHON fallback, on a reduced image), with the result on a canvas and each kernel's GPU time.
// With WebGPU the sample image runs through bundles exported at build time (filters_bundles/,
// one per stage, from filters_model.py): no Python in the page. Pyodide boots for another
// image's size, for "show kernels", or without WebGPU.
import { $, exclusive, base64, boot, fallbackNotice, KernelsView, KERNELS_VIEW_HTML } from './common.js';

const FALLBACK_WIDTH = 48;   // on the PYTHON interpreter the image is reduced to this width
const MAX_WIDTH = 320;       // a user's own image is reduced to at most this width

// 3x3 convolution presets (the user can edit the weights)
const PRESETS = {
  sharpen: [0, -1, 0, -1, 5, -1, 0, -1, 0],
  emboss: [-2, -1, 0, -1, 1, 1, 0, 1, 2],
  outline: [-1, -1, -1, -1, 8, -1, -1, -1, -1],
  'box blur': [1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9],
  identity: [0, 0, 0, 0, 1, 0, 0, 0, 0],
};

// The stages, in chain order: name, label, sliders [name, min, max, step, default], default on.
const STAGES = [
  { name: 'colour', label: 'Colour: brightness, contrast, saturation', on: true,
    params: [['brightness', -0.5, 0.5, 0.05, 0], ['contrast', 0, 2, 0.05, 1.1],
      ['saturation', 0, 2, 0.05, 1.3]] },
  { name: 'sepia', label: 'Sepia tone (a 3×3 colour matrix)', on: false },
  { name: 'blur', label: 'Gaussian blur 5×5', on: false },
  { name: 'conv', label: '3×3 convolution (edit the weights)', on: true, weights: true },
  { name: 'sobel', label: 'Sobel edges', on: false },
  { name: 'invert', label: 'Invert', on: false },
];

// The helpers every chain program starts with (after its IMAGE, H and W).
const PRELUDE = `import base64

img = Tensor(memoryview(base64.b64decode(IMAGE))).reshape(H, W, 3).cast(dtypes.float32) / 255


def edge_pad(x, n):
  """x (C, 1, H, W) with its edge rows and columns repeated n times on each side."""
  return x.pad(((0, 0), (0, 0), (n, n), (n, n)), mode="edge")


def conv(img, k):
  """Each channel of img (H, W, C) correlated with the square kernel k (edges repeated)."""
  n = len(k)
  x = edge_pad(img.permute(2, 0, 1).unsqueeze(1), n // 2)
  return x.conv2d(Tensor(k, dtype='float32').reshape(1, 1, n, n)).squeeze(1).permute(1, 2, 0)


def luma(img):
  return (img * Tensor([0.299, 0.587, 0.114])).sum(axis=-1, keepdim=True)


def colour(img, brightness, contrast, saturation):
  img = (img - 0.5) * contrast + 0.5 + brightness
  gray = luma(img)
  return gray + (img - gray) * saturation


def sepia(img):
  return img @ Tensor([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]]).T


def blur(img):
  g = [1, 4, 6, 4, 1]
  return conv(img, [[a * b / 256 for b in g] for a in g])


def sobel(img):
  gray = luma(img)
  gx = conv(gray, [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]])
  gy = conv(gray, [[-1, -2, -1], [0, 0, 0], [1, 2, 1]])
  return ((gx * gx + gy * gy).sqrt() / 4).expand(H, W, 3)


def invert(img):
  return 1 - img

`;

const state = { kg: null, bundles: null, image: null, sampleImage: null, chain: [], busy: null,
  wanted: false, runs: 0, kernels: null, output: null, error: null, last: null };

// ---- the chain: from the controls, to the controls, to a program ----

// The enabled stages as [{name, ...params}] in chain order.
export function chain() {
  return STAGES.filter((s) => $(`on-${s.name}`).checked).map((stage) => {
    const spec = { name: stage.name };
    for (const [param] of stage.params || []) spec[param] = Number($(`${stage.name}-${param}`).value);
    if (stage.weights) spec.weights = weightsOf(stage.name);
    return spec;
  });
}

function weightsOf(name) {
  const cells = [...document.querySelectorAll(`#${name}-weights input`)].map((i) => Number(i.value));
  return [cells.slice(0, 3), cells.slice(3, 6), cells.slice(6, 9)];
}

// Set the controls to `specs` (the stages not listed are turned off) and run the chain.
export function setChain(specs) {
  for (const stage of STAGES) {
    const spec = specs.find((s) => s.name === stage.name);
    $(`on-${stage.name}`).checked = Boolean(spec);
    $(`stage-${stage.name}`).classList.toggle('on', Boolean(spec));
    for (const [param] of stage.params || []) {
      if (spec && spec[param] !== undefined) $(`${stage.name}-${param}`).value = spec[param];
      showValue(stage.name, param);
    }
    if (stage.weights && spec?.weights) setWeights(stage.name, spec.weights.flat());
  }
  return run();
}

function pythonNumber(value) {
  return Number.isInteger(value) ? value.toFixed(1) : String(value);
}

function stageLine(spec) {
  if (spec.name === 'colour') {
    return `img = colour(img, brightness=${pythonNumber(spec.brightness)}, ` +
      `contrast=${pythonNumber(spec.contrast)}, saturation=${pythonNumber(spec.saturation)})`;
  }
  if (spec.name === 'conv') {
    const rows = spec.weights.map((row) => `[${row.map(pythonNumber).join(', ')}]`);
    return `img = conv(img, [${rows.join(', ')}])`;
  }
  return `img = ${spec.name}(img)`;
}

export function program(specs, { elide = false } = {}) {
  const { width, height, rgb } = state.image;
  const image = elide ? `"<${width}x${height} RGB bytes, base64>"` : `"${base64(rgb)}"`;
  const lines = specs.map(stageLine);
  return `IMAGE = ${image}\nH, W = ${height}, ${width}\n${PRELUDE}` +
    `${lines.join('\n')}\nout = img.clip(0, 1)\n`;
}

// ---- running (the latest settings win while a run is in flight) ----

export function run() {
  state.wanted = true;
  if (!state.busy) state.busy = drain();
  return state.busy;
}

async function drain() {
  let result = null;
  try {
    while (state.wanted) {
      state.wanted = false;
      result = await runOnce(chain());
    }
  } finally {
    state.busy = null;
  }
  return result;
}

// The exported stage bundles fit the image (the sample's size).
function bundlesFit() {
  const shape = state.bundles?.invert.inputs[0].shape;
  return Boolean(shape) && shape[0] === state.image.height && shape[1] === state.image.width;
}

// The chain through the stage bundles: each stage's output is the next one's input.
async function runBundles(specs) {
  const { width, height, rgb } = state.image;
  let img = Float32Array.from(rgb, (v) => v / 255);
  const timings = [];
  for (const spec of specs) {
    const model = state.bundles[spec.name];
    const inputs = { img };
    for (const [param] of STAGES.find((s) => s.name === spec.name).params || []) {
      inputs[param] = Float32Array.of(spec[param]);
    }
    if (spec.weights) inputs.weights = Float32Array.from(spec.weights.flat());
    img = (await model.run(inputs)).img;
    timings.push(...model.timings.map((t) => ({ name: `${spec.name}: ${t.name}`, ms: t.ms })));
  }
  return { data: img.map((v) => Math.min(1, Math.max(0, v))), shape: [height, width, 3], timings };
}

// The chain through kernelgen in Pyodide (booted on first use when the bundles run).
async function runPython(code) {
  if (!state.kg) await bootPython();
  return exclusive(() => state.kg.run(code, { device: state.kg.device }));
}

function deviceName() {
  return state.bundles ? 'WEBGPU' : state.kg.device;
}

async function runOnce(specs) {
  const code = program(specs);
  $('program').textContent = program(specs, { elide: true });
  $('run-info').textContent = `running on ${deviceName()}…`;
  const start = performance.now();
  try {
    const bundled = bundlesFit();
    const result = await (bundled ? runBundles(specs) : runPython(code));
    state.last = { ms: performance.now() - start, timings: result.timings || [], specs, bundled };
    state.output = result.data;
    state.error = null;
    drawOutput(result.data, result.shape);
    showTimings(state.last);
    showPath(bundled);
    state.kernels?.update(code, state.last.timings);
  } catch (error) {
    state.error = { type: error.type, message: error.message };
    $('run-info').textContent = `${error.type}: ${error.message}`;
  }
  state.runs += 1;
  document.body.dataset.runs = String(state.runs);
  return { error: state.error, specs };
}

function showTimings({ ms, timings, specs, bundled }) {
  const names = specs.map((s) => s.name).join(' → ') || 'no filters';
  $('run-info').textContent = `${deviceName()}: ${names} in ${ms.toFixed(0)} ms ` +
    (bundled ? '(exported bundles: upload + run + read back)'
      : '(compile + upload + run + read back)');
  const total = timings.reduce((sum, t) => sum + t.ms, 0);
  const rows = timings.map((t) => `<tr><td>${t.name}</td><td class="ms">${t.ms.toFixed(3)} ms</td></tr>`);
  $('timings').innerHTML = rows.length ? `<tr><th>kernel</th><th>GPU time</th></tr>${rows.join('')}` +
    `<tr><th>${timings.length} kernels</th><td class="ms">${total.toFixed(3)} ms</td></tr>` : '';
}

// ---- images in and out ----

function drawOutput(data, [height, width]) {
  const canvas = $('after');
  Object.assign(canvas, { width, height });
  const pixels = new ImageData(width, height);
  for (let i = 0; i < width * height; i++) {
    for (let c = 0; c < 3; c++) pixels.data[i * 4 + c] = Math.round(data[i * 3 + c] * 255);
    pixels.data[i * 4 + 3] = 255;
  }
  canvas.getContext('2d').putImageData(pixels, 0, 0);
  $('after-caption').textContent = `result (${width}×${height})`;
}

// An image element as {width, height, rgb (Uint8Array)}, at most `maxWidth` wide.
function imageBytes(image, maxWidth) {
  const scale = Math.min(1, maxWidth / image.naturalWidth);
  const width = Math.max(1, Math.round(image.naturalWidth * scale));
  const height = Math.max(1, Math.round(image.naturalHeight * scale));
  const canvas = $('before');
  Object.assign(canvas, { width, height });
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  ctx.drawImage(image, 0, 0, width, height);
  const rgba = ctx.getImageData(0, 0, width, height).data;
  const rgb = new Uint8Array(width * height * 3);
  for (let i = 0; i < width * height; i++) rgb.set(rgba.subarray(i * 4, i * 4 + 3), i * 3);
  return { width, height, rgb };
}

async function useImage(image, what) {
  const maxWidth = deviceName() === 'WEBGPU' ? MAX_WIDTH : FALLBACK_WIDTH;
  state.image = imageBytes(image, maxWidth);
  const { width, height } = state.image;
  $('before-caption').textContent = `${what} (${width}×${height})`;
  return run();
}

async function loadImage(url) {
  const image = new Image();
  image.src = url;
  await image.decode();
  return image;
}

// ---- the controls ----

function showValue(name, param) {
  $(`${name}-${param}-value`).textContent = Number($(`${name}-${param}`).value).toFixed(2);
}

function setWeights(name, values) {
  document.querySelectorAll(`#${name}-weights input`).forEach((input, i) => {
    input.value = String(Math.round(values[i] * 1000) / 1000);
  });
}

function stageHtml(stage) {
  const sliders = (stage.params || []).map(([param, min, max, step, value]) =>
    `<span>${param}</span><input type="range" id="${stage.name}-${param}" min="${min}" ` +
    `max="${max}" step="${step}" value="${value}"><span id="${stage.name}-${param}-value"></span>`);
  const presets = Object.keys(PRESETS).map((p) => `<option>${p}</option>`).join('');
  const weights = stage.weights ? `<div class="weights" id="${stage.name}-weights">` +
    '<input type="number" step="0.1">'.repeat(9) + '</div>' +
    `<label class="hint">preset <select id="${stage.name}-preset">${presets}</select></label>` : '';
  return `<label><input type="checkbox" id="on-${stage.name}" ${stage.on ? 'checked' : ''}>` +
    `${stage.label}</label>${sliders.length ? `<div class="params">${sliders.join('')}</div>` : ''}` +
    weights;
}

function setupStages() {
  for (const stage of STAGES) {
    const box = document.createElement('div');
    box.className = `stage${stage.on ? ' on' : ''}`;
    box.id = `stage-${stage.name}`;
    box.innerHTML = stageHtml(stage);
    $('stages').append(box);
    for (const [param] of stage.params || []) showValue(stage.name, param);
    if (stage.weights) setWeights(stage.name, PRESETS.sharpen);
  }
  $('stages').addEventListener('input', (event) => {
    const [name, param] = event.target.id.split('-');
    if (event.target.type === 'range') showValue(name, param);
    if (param === 'preset') setWeights(name, PRESETS[event.target.value]);
    if (event.target.type === 'checkbox') $(`stage-${param}`).classList.toggle('on', event.target.checked);
    if (state.image) run();
  });
}

function setupInputs() {
  $('run').addEventListener('click', () => run());
  $('use-sample').addEventListener('click', () => useImage(state.sampleImage, 'sample image'));
  $('file').addEventListener('change', async () => {
    const file = $('file').files[0];
    if (!file) return;
    const url = URL.createObjectURL(file);
    try {
      await useImage(await loadImage(url), file.name);
    } catch (error) {
      $('run-info').textContent = `Could not read ${file.name}: ${error.message}`;
    } finally {
      URL.revokeObjectURL(url);
    }
  });
}

// The stage bundles on one WebGPU device (timed per kernel), or null without WebGPU.
async function loadBundles() {
  if (new URLSearchParams(location.search).get('webgpu') === '0') return null;
  try {
    const adapter = await navigator.gpu.requestAdapter();
    const timer = adapter.features.has('timestamp-query') ? ['timestamp-query'] : [];
    const device = await adapter.requestDevice({ requiredFeatures: timer });
    const { load } = await import('./filters_bundles/invert/model.js');
    const models = await Promise.all(STAGES.map((stage) => load({ device, timings: true,
      base: new URL(`./filters_bundles/${stage.name}/`, import.meta.url) })));
    return Object.fromEntries(STAGES.map((stage, i) => [stage.name, models[i]]));
  } catch (error) {
    console.info(`filters: running through Pyodide (${error.message})`);
    return null;
  }
}

// The footer: what ran the last image (the bundles, or kernelgen in Pyodide for an image of
// another size than the bundles were exported for).
function showPath(bundled) {
  if (!state.bundles) return;
  $('adapter').textContent = bundled ? BUNDLES_NOTE : 'WebGPU through kernelgen in Pyodide ' +
    '(this image is not the size the exported bundles were made for, so Python compiled the ' +
    'chain for it)';
  document.body.dataset.path = bundled ? 'bundles' : 'python';
}

const BUNDLES_NOTE = 'WebGPU: the exported bundles filters_bundles/ (no Python)';

function showBundleDevice() {
  $('loader').classList.add('done');
  $('device').textContent = 'WEBGPU';
  $('device').className = 'pill webgpu';
  $('adapter').textContent = state.last && !state.last.bundled ? $('adapter').textContent
    : BUNDLES_NOTE;
  document.body.dataset.device = 'WEBGPU';
}

async function bootPython() {
  $('loader').classList.remove('done');
  state.kg = await boot();
  if (state.bundles) showBundleDevice();
}

async function toggleKernels() {
  if (!state.kernels) {
    if (!state.kg) await bootPython();
    const view = $('kernels-view');
    view.innerHTML = KERNELS_VIEW_HTML;
    state.kernels = new KernelsView(state.kg, view);
    if (state.last) state.kernels.update(program(state.last.specs), state.last.timings);
  }
  return state.kernels.toggle();
}

async function main() {
  setupStages();
  const sample = loadImage('sample.png');
  state.bundles = await loadBundles();
  if (state.bundles) {
    showBundleDevice();
  } else {
    state.kg = await boot();
    fallbackNotice(state.kg, `The image is reduced to ${FALLBACK_WIDTH} pixels wide and a run ` +
      'takes several seconds.');
  }
  $('show-kernels').addEventListener('click', toggleKernels);
  setupInputs();
  state.sampleImage = await sample;
  await useImage(state.sampleImage, 'sample image');
  $('run').disabled = false;
  document.body.dataset.ready = 'true';
}

window.filtersDemo = { state, chain, setChain, run, program, STAGES, PRESETS };
main().catch((error) => {
  $('notice').textContent = `The demo failed to start: ${error.message}`;
  $('notice').hidden = false;
  document.body.dataset.ready = 'false';
});
