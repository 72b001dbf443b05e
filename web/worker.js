// The Pyodide worker: Python (kernelgen) and WebGPU (gpu.js) both live here, so the page never
// freezes. Everything is loaded from this site's own origin (see web/BUILDING.md).
//
// Messages in:  {id, cmd, args}  with cmd one of boot, compile, run, verify, selftest, loseDevice
// Messages out: {type: 'progress', step, state, ms, loaded, total}
//               {id, ok: true, result} | {id, ok: false, error: {type, message, line, ...}}
import { loadPyodide } from '../pyodide/pyodide.mjs';
import { GpuExecutor } from './gpu.js';

const PYODIDE_URL = new URL('../pyodide/', import.meta.url).href;
const state = { pyodide: null, api: null, gpu: null, gpuInfo: null, jspi: false };

function post(message) {
  self.postMessage(message);
}

async function timed(step, work) {
  const start = performance.now();
  post({ type: 'progress', step, state: 'start' });
  const result = await work();
  post({ type: 'progress', step, state: 'done', ms: performance.now() - start });
  return result;
}

// Fetch a file with byte-level progress messages; returns its bytes as a Blob.
async function download(url, step, progress) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`could not load ${url}: HTTP ${response.status}`);
  progress.total += Number(response.headers.get('content-length') || 0);
  const reader = response.body.getReader();
  const chunks = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    progress.loaded += value.byteLength;
    post({ type: 'progress', step, state: 'bytes', loaded: progress.loaded, total: progress.total });
  }
  return new Blob(chunks);
}

// Download the big runtime files with progress; returns their blobs (wasm, standard library).
function downloadRuntime() {
  const progress = { loaded: 0, total: 0 };
  const files = ['pyodide.asm.wasm', 'python_stdlib.zip'].map((name) => PYODIDE_URL + name);
  return Promise.all(files.map((url) => download(url, 'download', progress)));
}

// Boot Pyodide from the downloaded files: the wasm is handed over by answering Pyodide's own
// fetch of it (once, during the boot), so nothing is downloaded twice.
async function bootPython([wasm, stdlib]) {
  const realFetch = self.fetch;
  self.fetch = (url, options) => (String(url).endsWith('/pyodide.asm.wasm')
    ? Promise.resolve(new Response(wasm, { headers: { 'Content-Type': 'application/wasm' } }))
    : realFetch(url, options));
  try {
    return await loadPyodide({ indexURL: PYODIDE_URL, stdLibURL: URL.createObjectURL(stdlib) });
  } finally {
    self.fetch = realFetch;
  }
}

async function installKernelgen(pyodide) {
  await pyodide.loadPackage('kernelgen', { messageCallback: () => {} });
  if (!('kernelgen' in pyodide.loadedPackages)) {
    throw new Error('the kernelgen wheel did not load (is pyodide-lock.json rewritten? ' +
      'run ./build.sh site)');
  }
  return pyodide.pyimport('kernelgen.web_api');
}

async function boot({ compatibility = false, webgpu = true } = {}) {
  state.gpu = new GpuExecutor({ compatibility });
  const gpuReady = webgpu ? state.gpu.init() : Promise.resolve({
    available: false, reason: 'WebGPU was turned off for this page' });
  const files = await timed('download', downloadRuntime);
  state.pyodide = await timed('boot', () => bootPython(files));
  state.jspi = typeof WebAssembly.Suspending === 'function';
  state.api = await timed('install', () => installKernelgen(state.pyodide));
  state.gpuInfo = await gpuReady;
  const setup = state.api.setup(state.gpuInfo.available ? state.gpu : undefined, state.jspi);
  const result = toPlain(setup);
  setup.destroy?.();
  return { ...result, gpu: state.gpuInfo, jspi: state.jspi };
}

// Python results (dicts, lists, bytes) as plain JS objects, typed arrays for bytes.
function toPlain(value) {
  if (value && typeof value.toJs === 'function') {
    const plain = value.toJs({ dict_converter: Object.fromEntries, create_pyproxies: false });
    value.destroy();
    return plain;
  }
  return value;
}

// Call a web_api function; with JSPI, the Python code may block on GPU promises (run_sync).
async function callPython(name, ...args) {
  const fn = state.api[name];
  try {
    const result = state.jspi ? await fn.callPromising(...args) : fn(...args);
    return toPlain(result);
  } finally {
    fn.destroy();
  }
}

async function ensureGpu() {
  if (!state.gpuInfo?.available) return { recreated: false };
  const status = await state.gpu.ensureDevice();
  if (status.recreated) state.gpuInfo = state.gpu.info();
  return status;
}

async function run({ code, device, reference = true }) {
  const status = device === 'WEBGPU' ? await ensureGpu() : { recreated: false };
  const result = await callPython('run_program', code, device, reference);
  if (result.ok && device === 'WEBGPU') result.timings = await state.gpu.takeTimings();
  result.recreated = status.recreated;
  result.lost_reason = status.reason || null;
  return result;
}

const COMMANDS = {
  boot,
  run,
  compile: ({ code, arch, targets }) => callPython('compile_program', code, arch, targets),
  verify: async ({ code, arch }) => {
    await ensureGpu();
    return callPython('verify_ptx', code, arch, state.gpuInfo?.available ? 'WEBGPU' : 'PYTHON');
  },
  selftest: ({ files }) => callPython('self_test', state.pyodide.toPy(files)),
  loseDevice: () => {
    state.gpu.destroyDevice();
    return true;
  },
  info: () => ({ gpu: state.gpu.info() }),
};

function errorData(error) {
  if (error && typeof error.toJSON === 'function') return error.toJSON();
  if (error && error.type && error.message !== undefined && !(error instanceof Error)) return error;
  return { type: error?.type || error?.name || 'Error', message: String(error?.message || error),
    line: null };
}

self.onmessage = async ({ data }) => {
  const { id, cmd, args } = data;
  try {
    const result = await COMMANDS[cmd](args || {});
    post({ id, ok: true, result });
  } catch (error) {
    post({ id, ok: false, error: errorData(error) });
  }
};
