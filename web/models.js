// The Models view: open an ONNX file (file input or drop), see its inputs, outputs, operator
// histogram and the WGSL and PTX kernels it compiles to, download them as a .zip, run it on the
// page's device with reproducible random inputs (a seed) and compare with the PYTHON
// interpreter; an image model (one float input [N, 3, H, W] or [N, H, W, 3]) also runs on a
// picture (pictures.js) and shows its top-5 classes, with the model's labels when it has them
// (web_api.LABEL_KEYS); a causal LM opens a Generate panel (models_generate.js). Python work
// goes to kernelgen's worker (web_api.load_model / run_model / compare_model); errors show as
// the editor's do, and the rest of the page keeps working.
import { download } from './downloads.js';
import { pictureInput } from './pictures.js';
import { highlightInto } from './editors.js';
import { el, previewText, showError, showKernels, timingsTable } from './views.js';
import { modelClosed, modelLost, modelOpened, setupGenerate } from './models_generate.js';

const $ = (id) => document.getElementById(id);
// app: {kg(), arch(), device(), busy(task, action), busyNow(), lastStop()} from app.js
// maxBytes: a file this large or larger is refused before it is read (kg.onnx's own limit,
// kernelgen.onnx.data.MAX_MODEL_BYTES: 1 GiB)
const state = { app: null, model: null, compiled: null, selected: 0, busy: false, run: null,
  name: null, maxBytes: 2 ** 30, picture: null };

function setButtons() {
  const ready = Boolean(state.app?.kg()) && !state.busy && !state.app.busyNow();
  $('model-file').disabled = !ready;
  $('model-run').disabled = !ready || !state.model;
  $('model-compare').disabled = !ready || !state.run;
  $('model-image').disabled = !ready || !state.model?.image;
  $('model-image-actions').hidden = !state.model?.image;
  $('model-zip').disabled = !state.compiled || !(state.compiled.wgsl.ok || state.compiled.ptx.ok);
  $('models-view').dataset.busy = state.busy ? '1' : '0';
}

// One model action at a time, through the page's own busy() (so the header's Stop ends it and
// Run/Compile wait); a failure shows in the view's error box and resolves to {error}. After a
// Stop, Python may have restarted without the model: the view forgets it (open it again).
async function busy(task, what) {
  if (state.busy || !state.app?.kg()) return undefined;
  state.busy = true;
  $('model-error').hidden = true;
  $('model-meta').textContent = `${what}…`;
  setButtons();
  try {
    const result = await state.app.busy(async () => {
      try {
        return await task(state.app.kg());
      } catch (error) {
        return { failed: error };
      }
    }, `model: ${what}`);
    if (result === undefined) throw { type: 'Busy', message: 'another action is running' };
    if (result.stopped) throw stopped(state.app.lastStop(), what);
    if (result.failed) throw result.failed;
    return result;
  } catch (error) {
    showError($('model-error'), error, () => {});
    $('model-meta').textContent = '';
    $('models-view').dataset.last = 'error';
    return { error: { type: error.type, message: error.message } };
  } finally {
    state.busy = false;
    setButtons();
  }
}

// After Stop: a restarted Python no longer holds the model, so the view forgets it and all it
// showed (its facts, kernels, results), but a causal LM's Generate panel stays open (its next
// Generate gives the model to Python again); Python interrupted in place keeps it, and the view
// too.
function stopped(result, what) {
  const after = `Stopped by you (${what}, after ${(result.seconds ?? 0).toFixed(1)} s)`;
  if (result.how === 'interrupted') {
    return { type: 'Stopped', message: `${after}: KeyboardInterrupt in Python, which keeps ` +
      'running; the model is still loaded.' };
  }
  Object.assign(state, { model: null, compiled: null, run: null, selected: 0 });
  const panel = modelLost() ? ' The Generate panel gives it to Python again when you Generate.'
    : '';
  $('model-info').replaceChildren();
  $('model-kernels').replaceChildren();
  $('model-results').replaceChildren();
  $('model-kernel-count').textContent = '';
  for (const id of ['model-wgsl', 'model-ptx']) $(id).replaceChildren();
  return { type: 'Stopped', message: `${after}: Python was restarted, so ${state.name} is no ` +
    'longer loaded and what the view showed of it is cleared. Open the model again to run it.' +
    panel };
}

const dims = (shape) => `(${shape.join(', ')})`;

function valueTable(title, values) {
  return el('table', { class: 'timings', id: `model-${title}` },
    el('tr', {}, el('th', {}, title), el('th', {}, 'shape'), el('th', {}, 'dtype')),
    values.map((v) => el('tr', {}, el('td', {}, v.name), el('td', {}, dims(v.shape)),
      el('td', {}, v.dtype ?? '?'))));
}

function histogramTable(histogram) {
  return el('table', { class: 'timings', id: 'model-histogram' },
    el('tr', {}, el('th', {}, 'operator'), el('th', {}, 'nodes')),
    Object.entries(histogram).map(([op, n]) => el('tr', {}, el('td', {}, op),
      el('td', {}, String(n)))));
}

function sourceText(target, label) {
  const { error } = target;
  if (!target.ok) return `// ${label} unavailable:\n// ${error.type}: ${error.message}`;
  return target.kernels[state.selected]?.source ?? '';
}

function showSources() {
  const { wgsl, ptx, arch } = state.compiled;
  highlightInto($('model-wgsl'), sourceText(wgsl, 'WGSL'), 'wgsl');
  highlightInto($('model-ptx'), sourceText(ptx, `PTX for ${arch}`), 'ptx');
  const kernels = (wgsl.ok ? wgsl : ptx).kernels || [];
  showKernels($('model-kernels'), kernels, state.selected, (index) => {
    state.selected = index;
    showSources();
  });
  const plural = kernels.length === 1 ? '' : 's';
  $('model-kernel-count').textContent = `${kernels.length} kernel${plural}` +
    ` · WGSL ${wgsl.ok ? 'ok' : wgsl.error.type} · PTX ${ptx.ok ? arch : ptx.error.type}`;
}

function showModel(model) {
  $('model-info').replaceChildren(
    el('div', { class: 'facts' }, el('span', {}, el('b', {}, 'model '), state.name),
      el('span', {}, el('b', {}, 'opset '), String(model.opset)),
      el('span', {}, el('b', {}, 'nodes '), String(model.nodes)), imageFacts(model)),
    valueTable('inputs', model.inputs), valueTable('outputs', model.outputs),
    histogramTable(model.histogram));
  $('model-results').replaceChildren(el('p', { class: 'muted' },
    'Run the model to see its outputs on random inputs.'));
}

// What the view knows of an image model: its picture size and layout, its label set.
function imageFacts(model) {
  const { image, labels } = model;
  if (!image) return null;
  const set = labels ? `${labels.labels.length} (metadata "${labels.key}")` : 'none (indices)';
  return [el('span', { id: 'model-image-facts' }, el('b', {}, 'image input '),
    `${image.name}: ${image.width}×${image.height} ${image.layout}`),
  el('span', { id: 'model-labels' }, el('b', {}, 'labels '), set)];
}

// Open a model: its file's bytes to the worker, what it holds into the view.
async function open(file) {
  return busy(async (kg) => {
    Object.assign(state, { model: null, compiled: null, run: null, selected: 0, name: file.name });
    $('model-info').replaceChildren();
    $('model-kernels').replaceChildren();
    $('model-results').replaceChildren();
    $('model-wgsl').textContent = '';
    $('model-ptx').textContent = '';
    modelClosed();
    if (file.size >= state.maxBytes) {
      throw { type: 'LimitError', message: `${file.name} is ${file.size} bytes, over the page's ` +
        `limit of ${state.maxBytes} (kg.onnx's MAX_MODEL_BYTES): it was not read; keep large ` +
        'weights as external data, or run the model in CPython' };
    }
    const bytes = new Uint8Array(await file.arrayBuffer());
    const arch = state.app.arch();
    const model = await kg.loadModel(bytes, { arch, seed: seed() });
    state.model = model;
    state.compiled = { wgsl: model.wgsl, ptx: model.ptx, arch };
    showModel(model);
    showSources();
    modelOpened(model, bytes, file);   // a causal LM opens the Generate panel
    $('model-meta').textContent = `${file.name} · ${bytes.length} bytes` +
      (model.stored ? ' · kernels from the browser\'s store (no compile)' : '');
    $('models-view').dataset.last = 'load';
    return model;
  }, `loading ${file.name}`);
}

function seed() {
  return Number.parseInt($('model-seed').value, 10) || 0;
}

function outputView(output) {
  const first = Array.from(output.data.slice(0, 8), (v) => Number(v));
  return el('div', { class: 'model-output' },
    el('div', { class: 'facts' }, el('span', {}, el('b', {}, output.name)),
      el('span', {}, el('b', {}, 'shape '), dims(output.shape)),
      el('span', {}, el('b', {}, 'dtype '), output.dtype)),
    el('div', { class: 'preview' }, previewText(output.shape, output.dtype, output.data)),
    el('span', { class: 'first-values', hidden: '' }, JSON.stringify(first)));
}

// How many kernels a run compiled, and how many came from the browser's store instead.
function compiledText(result) {
  const parts = [];
  if (result.compiled) parts.push(`${result.compiled} kernels compiled`);
  if (result.stored) parts.push(`${result.stored} from the browser's store`);
  return parts.length ? ` · ${parts.join(', ')}` : '';
}

function showRun(result, what) {
  state.run = result;
  $('model-results').replaceChildren(
    el('p', { class: 'muted', id: 'model-run-facts' }, `${result.device} · ${what} · ` +
      `${(result.seconds * 1000).toFixed(0)} ms` + compiledText(result)),
    ...result.outputs.map(outputView), timingsTable(result.timings, result.seconds));
  $('model-meta').textContent = `ran on ${result.device}`;
}

// Run the model on the page's device with the random inputs of the seed.
async function run() {
  return busy(async (kg) => {
    const result = await kg.runModel({ seed: seed(), device: state.app.device() });
    showRun(result, `random inputs, seed ${seed()}`);
    $('models-view').dataset.last = 'run';
    return result;
  }, 'running');
}

// The top-5 classes of a run: index, label (when the model has a label set), probability.
function topTable(top, labels) {
  if (!top) {
    return el('p', { class: 'muted' }, 'no output is one class vector: no top-5 to show');
  }
  const names = labels?.labels;
  const what = top.probabilities ? 'probabilities' : 'softmax of the scores';
  return el('table', { class: 'timings', id: 'model-top' },
    el('tr', {}, el('th', {}, 'class'), names ? el('th', {}, 'label') : null,
      el('th', {}, `${top.output}: ${what}`)),
    top.top.map((t) => el('tr', {}, el('td', {}, String(t.index)),
      names ? el('td', {}, names[t.index] ?? '') : null,
      el('td', {}, t.probability.toFixed(4)))));
}

// Run the model on a picture (an image model's only input): its top-5 classes first.
async function runImage(file) {
  return busy(async (kg) => {
    const image = state.model?.image;
    if (!image) {
      throw { type: 'ModelError', message: state.model ? 'this model is not an image model ' +
        '(one float input of shape [N, 3, H, W] or [N, H, W, 3]): run it with random inputs'
        : 'no model is loaded: open an image model (.onnx) first, then the picture' };
    }
    const norm = $('model-norm');
    const { bytes, size } = await pictureInput(file, image, norm.value);
    const result = await kg.runModel({ device: state.app.device(),
      inputs: { [image.name]: bytes } });
    const normName = norm.options[norm.selectedIndex].textContent;
    showRun(result, `${file.name} (${size[0]}×${size[1]} → ${image.width}×${image.height}, ` +
      `${normName})`);
    state.picture = { name: file.name, size, normalization: norm.value };
    $('model-results').children[0].after(topTable(result.top, state.model.labels));
    $('models-view').dataset.last = 'image';
    return result;
  }, `running on ${file.name}`);
}

const isPicture = (file) => file.type.startsWith('image/') ||
  /\.(png|jpe?g|gif|webp|bmp)$/i.test(file.name);

// The last run compared with the PYTHON interpreter on the same inputs.
async function compare() {
  return busy(async (kg) => {
    const result = await kg.compareModel();
    const badges = result.comparisons.map((c) => (c.match
      ? el('span', { class: 'badge good' }, `✓ ${c.name} matches the PYTHON reference · ` +
        `max |Δ| ${Number(c.max_abs_error).toExponential(2)}`)
      : el('span', { class: 'badge bad' }, `✗ ${c.name} differs from the PYTHON reference: ` +
        `${c.mismatches ?? ''} values ${c.reason || ''}`)));
    $('model-results').prepend(el('div', { id: 'model-reference' }, ...badges));
    const ms = (result.seconds * 1000).toFixed(0);
    $('model-meta').textContent = `compared with PYTHON in ${ms} ms`;
    $('models-view').dataset.last = 'compare';
    return result;
  }, 'comparing with PYTHON');
}

function show(view) {
  const models = view === 'models';
  $('models-view').hidden = !models;
  document.querySelector('main.layout').hidden = models;
  $('models-tab').classList.toggle('active', models);
  document.body.dataset.view = view;
}

function bindDrop(zone) {
  zone.addEventListener('dragover', (event) => {
    event.preventDefault();
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (event) => {
    event.preventDefault();
    zone.classList.remove('over');
    const file = event.dataTransfer?.files?.[0];
    if (file && isPicture(file)) runImage(file);
    else if (file) open(file);
  });
}

// Wire the view; `app`: {kg(), arch(), device(), busy(task, action), busyNow()}. Returns the
// actions (window.kgApp.models).
export function setupModels(app) {
  state.app = app;
  $('models-tab').onclick = () => show($('models-view').hidden ? 'models' : 'editor');
  $('model-file').onchange = (event) => {
    const file = event.target.files?.[0];
    if (file) open(file);
    event.target.value = '';
  };
  $('model-image').onchange = (event) => {
    const file = event.target.files?.[0];
    if (file) runImage(file);
    event.target.value = '';
  };
  bindDrop($('models-view'));
  $('model-run').onclick = run;
  $('model-compare').onclick = compare;
  $('model-zip').onclick = () => download('zip', state.compiled, state.selected);
  const generate = setupGenerate($('models-view'), busy);
  setButtons();
  return { state, open, run, runImage, compare, show, ready: setButtons, generate };
}
