// What both demos share: booting kernelgen (web/kernelgen.js) with a progress bar, the device
// pill and the no-WebGPU notice, passing bytes into a program, and the "show kernels" view.
import { createKernelgen } from '../kernelgen.js';

export const $ = (id) => document.getElementById(id);

// The site root (the folder holding web/ and pyodide/), from this module's own URL.
const SITE_ROOT = new URL('../../', import.meta.url).href;

// Boot kernelgen, driving the #progress bar and #steps; `?webgpu=0` forces the fallback.
export async function boot() {
  const steps = {};
  const webgpu = new URLSearchParams(location.search).get('webgpu') !== '0';
  const kg = await createKernelgen({ base: SITE_ROOT, webgpu, onProgress: (p) => progress(p, steps) });
  $('loader').classList.add('done');
  showDevice(kg);
  return kg;
}

function progress({ step, state, ms, loaded, total }, steps) {
  if (step === 'work') return;   // kernels of a run (the editor page's progress bar)
  const label = document.querySelector(`[data-step="${step}"]`);
  if (state === 'start') label?.classList.add('active');
  if (state === 'done') {
    steps[step] = ms;
    label?.classList.replace('active', 'done');
    if (label) label.textContent += ` ${(ms / 1000).toFixed(1)} s`;
  }
  const done = Object.keys(steps).length;
  const fraction = state === 'bytes' && total ? (loaded / total) * 0.6 : 0.6 + done * 0.13;
  $('progress').style.width = `${Math.min(100, fraction * 100).toFixed(0)}%`;
}

// The device pill, the adapter line and, without WebGPU, the fallback notice.
function showDevice(kg) {
  const pill = $('device');
  pill.textContent = kg.device;
  pill.className = `pill ${kg.device.toLowerCase()}`;
  const gpu = kg.info.gpu || {};
  const adapter = gpu.adapter || {};
  $('adapter').textContent = kg.device === 'WEBGPU'
    ? `WebGPU adapter: ${[adapter.vendor, adapter.architecture, adapter.description]
      .filter(Boolean).join(' ') || 'unknown'}`
    : `No WebGPU: ${gpu.reason || 'navigator.gpu has no adapter'}`;
  document.body.dataset.device = kg.device;
}

// Show the no-WebGPU notice with a demo-specific sentence.
export function fallbackNotice(kg, text) {
  if (kg.device === 'WEBGPU') return;
  const notice = $('notice');
  notice.textContent = `No WebGPU in this browser: kernelgen runs the kernels on its PYTHON ` +
    `interpreter instead, which is much slower. ${text}`;
  notice.hidden = false;
}

// One kernelgen call at a time: a run and a compile in flight together can stall the worker.
let tail = Promise.resolve();
export function exclusive(work) {
  const next = tail.then(work, work);
  tail = next.catch(() => {});
  return next;
}

// Bytes as a base64 string, to pass data into a program as a Python string literal.
export function base64(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

export function download(name, text) {
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function element(tag, props = {}, children = []) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

// "Show kernels": the WGSL and PTX of the program that last ran, one tab per kernel and target,
// each downloadable. `timings` (name -> ms) annotate the list.
export class KernelsView {
  constructor(kg, root) {
    this.kg = kg;
    this.root = root;
    this.code = null;
    this.compiled = null;
    this.selected = { index: 0, target: 'wgsl' };
    root.querySelector('.arch').addEventListener('change', () => this.refresh());
    root.querySelectorAll('[data-target]').forEach((button) => button.addEventListener('click',
      () => this.select(this.selected.index, button.dataset.target)));
    root.querySelector('.download').addEventListener('click', () => this.downloadSelected());
  }

  get open() {
    return !this.root.hidden;
  }

  // Remember the program that just ran; recompile it when the view is open.
  update(code, timings = []) {
    this.code = code;
    this.timings = timings;
    if (this.open) return this.refresh();
    return null;
  }

  async toggle() {
    this.root.hidden = !this.root.hidden;
    if (this.open) await this.refresh();
  }

  async refresh() {
    if (!this.code) return;
    const arch = this.root.querySelector('.arch').value;
    this.root.dataset.state = 'compiling';
    try {
      const compiled = await exclusive(() => this.kg.compileAll(this.code, { arch }));
      this.compiled = { wgsl: compiled.wgsl.kernels || [], ptx: compiled.ptx.kernels || [], arch,
        errors: [compiled.wgsl.error, compiled.ptx.error].filter(Boolean) };
    } catch (error) {
      this.compiled = { wgsl: [], ptx: [], arch, errors: [error] };
    }
    this.renderList();
    this.select(Math.min(this.selected.index, this.compiled.wgsl.length - 1), this.selected.target);
    this.root.dataset.state = 'ready';
  }

  renderList() {
    const list = this.root.querySelector('.kernel-list');
    list.replaceChildren(...this.compiled.wgsl.map((kernel, index) => {
      const ms = this.timings.find((t) => t.name === kernel.name)?.ms;
      const time = ms === undefined ? '' : `${ms.toFixed(3)} ms`;
      const item = element('li', {}, [element('span', { className: 'name', textContent: kernel.name }),
        element('span', { className: 'meta', textContent:
          `grid ${kernel.global_size.join('×')} · local ${kernel.local_size.join('×')} ${time}` })]);
      item.addEventListener('click', () => this.select(index, this.selected.target));
      return item;
    }));
    const errors = this.compiled.errors.map((e) => `${e.type}: ${e.message}`).join('\n');
    this.root.querySelector('.kernel-errors').textContent = errors;
  }

  select(index, target) {
    this.selected = { index: Math.max(0, index), target };
    const kernel = this.compiled?.[target][this.selected.index];
    this.root.querySelectorAll('.kernel-list li').forEach((li, i) =>
      li.classList.toggle('selected', i === this.selected.index));
    this.root.querySelectorAll('[data-target]').forEach((b) =>
      b.classList.toggle('selected', b.dataset.target === target));
    this.root.querySelector('.source').textContent = kernel ? kernel.source : '';
  }

  downloadSelected() {
    const { index, target } = this.selected;
    const kernel = this.compiled?.[target][index];
    if (!kernel) return;
    const suffix = target === 'ptx' ? `_${this.compiled.arch}.ptx` : '.wgsl';
    download(`${kernel.name}${suffix}`, kernel.source);
  }
}

// The HTML of a kernels view (both pages put it in a <section class="kernels-view">).
export const KERNELS_VIEW_HTML = `
  <div class="kv-bar">
    <span class="kv-title">Kernels of the last run</span>
    <button data-target="wgsl" class="selected">WGSL</button>
    <button data-target="ptx">PTX</button>
    <label>arch <select class="arch"><option>sm_75</option><option selected>sm_80</option>
      <option>sm_86</option><option>sm_89</option><option>sm_90</option></select></label>
    <button class="download">Download</button>
  </div>
  <div class="kv-body">
    <ul class="kernel-list"></ul>
    <pre class="source"></pre>
  </div>
  <pre class="kernel-errors"></pre>`;
