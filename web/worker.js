// The Pyodide worker: Python (kernelgen) and WebGPU (gpu.js) both live here, so the page never
// freezes. Everything is loaded from this site's own origin (see web/BUILDING.md).
//
// Pyodide starts booting as soon as this module runs (while the page still sets up its editor),
// compiling its wasm while it streams in; the kernelgen wheel follows by name from the
// rewritten lockfile. Commands run one at a time, in the order they arrive.
//
// Messages in:  {id, cmd, args}  with cmd one of boot, compile, run, reference, verify, selftest,
//               loseDevice, info
// Stop: a cross-origin isolated page gets Pyodide's interrupt buffer from boot and writes 2 into
// it (KeyboardInterrupt in the running command); any other page terminates this worker.
// Messages out: {type: 'progress', step, state, ms, at, loaded, total}   (at: epoch ms)
//               {type: 'progress', step: 'work', state: 'pipelines', pipelines: {made, making}}
//                 as the GPU's pipelines are created (all of a plan's at once: gpu.js prepare)
//               {type: 'progress', step: 'work', state: 'kernel', done, total, name, device,
//                 running} while a command runs kernels (realize.progress): each kernel's start
//                 (running: true), and its end at most once per WORK_PROGRESS_MS (the last
//                 kernel's always)
//               {id, ok: true, result} | {id, ok: false, error: {type, message, line, ...}}
import { loadPyodide } from '../pyodide/pyodide.mjs';
import { GpuExecutor } from './gpu.js';
import { pipelineKey, sourceHash } from './gpu_pipelines.js';
import { readStored, writeStored } from './store.js';

const PYODIDE_URL = new URL('../pyodide/', import.meta.url).href;
// The runtime's big files: their bytes drive the page's progress bar.
const RUNTIME_FILES = ['pyodide.asm.wasm', 'python_stdlib.zip'];
// The download progress the page is told of goes in steps of this share of the bytes.
const PROGRESS_STEP = 0.01;
// interrupt: Pyodide's interrupt buffer, on a cross-origin isolated page only (it needs a
// SharedArrayBuffer): the page writes 2 (SIGINT) and Python raises KeyboardInterrupt.
// firstRunDone: the page's first run of kernels is over (its launch order stored); prebuilt: the
// boot's prebuild, a promise of the pipeline hashes it started (prebuildStored).
const state = { pyodide: null, api: null, gpu: null, gpuInfo: null, jspi: false, interrupt: null,
  firstRunDone: false, prebuilt: null };

function post(message, transfer = []) {
  self.postMessage(message, transfer);
}

const now = () => performance.timeOrigin + performance.now();  // comparable with the page's clock

function progress(step, phase, extra = {}) {
  post({ type: 'progress', step, state: phase, at: now(), ...extra });
}

// Kernels a command runs, told to the page (its progress bar) at most this often.
const WORK_PROGRESS_MS = 100;
let lastWorkPost = 0;

function workProgress(done, total, name, device, running) {
  const t = performance.now();
  if (!running && done < total && t - lastWorkPost < WORK_PROGRESS_MS) return;
  lastWorkPost = t;
  progress('work', 'kernel', { done, total, name, device, running: Boolean(running) });
}

async function timed(step, work) {
  const start = performance.now();
  progress(step, 'start');
  const result = await work();
  progress(step, 'done', { ms: performance.now() - start });
  return result;
}

// A fetch that counts the bytes of the runtime files as Pyodide reads them (it still streams
// them: the wasm compiles while it downloads, and nothing is buffered twice).
function countingFetch(realFetch) {
  // shown: the bytes the last 'bytes' message reported (one message per PROGRESS_STEP of the
  // total, not one per chunk: each message makes garbage in both threads and a page layout)
  const bytes = { loaded: 0, total: 0, done: 0, shown: 0, start: performance.now() };
  progress('download', 'start');
  return async (url, options) => {
    const response = await realFetch(url, options);
    if (!RUNTIME_FILES.some((name) => String(url).endsWith('/' + name)) || !response.body) {
      return response;
    }
    bytes.total += Number(response.headers.get('content-length') || 0);
    const counter = new TransformStream({
      transform(chunk, controller) {
        bytes.loaded += chunk.byteLength;
        if (bytes.loaded - bytes.shown >= bytes.total * PROGRESS_STEP) {
          bytes.shown = bytes.loaded;
          progress('download', 'bytes', { loaded: bytes.loaded, total: bytes.total });
        }
        controller.enqueue(chunk);
      },
      flush() {
        if (++bytes.done === RUNTIME_FILES.length) {
          progress('download', 'done', { ms: performance.now() - bytes.start });
        }
      },
    });
    const { status, statusText, headers } = response;
    return new Response(response.body.pipeThrough(counter), { status, statusText, headers });
  };
}

async function installKernelgen(pyodide) {
  await pyodide.loadPackage('kernelgen', { messageCallback: () => {} });
  if (!('kernelgen' in pyodide.loadedPackages)) {
    throw new Error('the kernelgen wheel did not load (is pyodide-lock.json rewritten? ' +
      'run ./build.sh site)');
  }
  return pyodide.pyimport('kernelgen.web_api');
}

// Pyodide and kernelgen, started when the worker starts (not when the page asks to boot).
// steps: when (ms since the worker started) Pyodide was loaded and kernelgen installed.
const pythonSteps = {};

async function startPython() {
  self.fetch = countingFetch(self.fetch.bind(self));
  const pyodide = await timed('boot', () => loadPyodide({ indexURL: PYODIDE_URL }));
  pythonSteps.pyodide = performance.now();
  const api = await timed('install', () => installKernelgen(pyodide));
  pythonSteps.install = performance.now();
  return { pyodide, api };
}

const python = startPython();
python.catch(() => {});  // reported by the boot command

async function boot({ compatibility = false, webgpu = true, prebuild = true } = {}) {
  // ms from this command's start to each step's end (bench/warm_reload.py); worker: when the
  // worker started (<= 0: Python's boot starts with it, before this command)
  const start = performance.now();
  const phases = { worker: -start };
  const mark = (name) => (value) => { phases[name] = performance.now() - start; return value; };
  state.gpu = new GpuExecutor({ compatibility });
  state.gpu.onPipelines = (pipelines) => progress('work', 'pipelines', { pipelines });
  const gpuReady = (webgpu ? timed('gpu', () => state.gpu.init()) : Promise.resolve({
    available: false, reason: 'WebGPU was turned off for this page' })).then(mark('gpu'));
  mark('gpu_call')();   // init()'s synchronous part: the GPU process's channel (a reload waits)
  state.records = readStored().catch((error) => {
    console.warn('kernelgen worker: the stored kernels could not be read:', error);
    return {};
  }).then(mark('store_read'));
  if (prebuild) {
    state.prebuilt = gpuReady.then((info) => info.available && prebuildStored(state.records))
      .catch(() => []);
  }
  Object.assign(state, await python.then(mark('python')));
  phases.pyodide = pythonSteps.pyodide - start;
  phases.install = pythonSteps.install - start;
  state.jspi = typeof WebAssembly.Suspending === 'function';
  if (self.crossOriginIsolated && typeof SharedArrayBuffer === 'function') {
    state.interrupt = new Uint8Array(new SharedArrayBuffer(1));
    state.pyodide.setInterruptBuffer(state.interrupt);
  }
  state.gpuInfo = await gpuReady;
  const setup = state.api.setup(state.gpuInfo.available ? state.gpu : undefined, state.jspi,
    workProgress);
  const result = toPlain(setup);
  setup.destroy?.();
  mark('setup')();
  result.stored = await loadStored(phases);
  mark('load_stored')();
  state.gpu.launchOrder = state.gpuInfo.available ? new Set() : null;   // the first run's
  enqueue({ cmd: 'warm' });  // runs after this reply: the imports a first compile needs
  return { ...result, gpu: state.gpuInfo, jspi: state.jspi, interrupt: state.interrupt, phases };
}

// Build, while Python boots, the pipelines a warm first run needs, in the order it launches
// them: the stored launch order (ORDER_KEY, written after the page's first WEBGPU run) names
// each pipeline by a hash of its source (gpu_pipelines.js pipelineKey), and the stored kernels'
// launches give the sources. All are asked for at once, in that order (the driver takes them
// in turn; a window refilled as builds end would wait for the worker's thread, which Pyodide's
// boot holds for seconds at a time), so the pipeline a run needs next is never queued behind
// one it needs later; one the run already asked for (prepare) is not started twice, and none
// outside the order is built. Returns the hashes in the order their builds started (tests).
async function prebuildStored(records) {
  const all = await records;
  const order = all[ORDER_KEY];
  if (!order || order.kind !== 'order' || !Array.isArray(order.pipelines)) return [];
  const launches = new Map();   // hash -> launch
  for (const record of Object.values(all)) {
    if (!record || record.kind !== 'kernel' || typeof record.text !== 'string') continue;
    try {
      const { launch } = JSON.parse(record.text);
      launches.set(sourceHash(pipelineKey(launch)), launch);
    } catch {
      // not a kernel's launch: Python rejects the record when it is asked for
    }
  }
  const started = [];
  const strayed = runStrayed(new Set(order.pipelines));
  for (const hash of order.pipelines) {
    const launch = launches.get(hash);
    if (strayed()) break;      // the page runs something else, or its first run is over
    if (!launch || state.gpu.pipelineState(launch) !== 'none') continue;
    state.gpu.prepare(launch);
    if (state.gpu.pipelineState(launch) === 'making') started.push(hash);
  }
  return started;
}

// A function saying whether the page's first run is over, or has launched a pipeline the stored
// order does not name (`wanted`: its hashes): the rest of a prebuild would be work wasted.
function runStrayed(wanted) {
  let checked = 0;
  return () => {
    if (state.firstRunDone) return true;
    const launched = Array.from(state.gpu.launchOrder || []);
    for (; checked < launched.length; checked += 1) {
      if (!wanted.has(sourceHash(launched[checked]))) return true;
    }
    return false;
  };
}

// After the page's first WEBGPU run: store the order its pipelines were first dispatched in,
// for the next page load's prebuild (prebuildStored). Written once per page load.
async function saveLaunchOrder() {
  const order = state.gpu?.launchOrder;
  if (!order || !order.size) return;
  state.gpu.launchOrder = null;
  state.firstRunDone = true;
  const pipelines = Array.from(order, sourceHash);
  try {
    await writeStored({ cleared: false, records: { [ORDER_KEY]: { kind: 'order', pipelines } } });
  } catch (error) {
    console.warn('kernelgen worker: the launch order could not be stored:', error);
  }
}

// The compiled kernels the browser kept from earlier page loads, given to Python; how many.
async function loadStored(phases = {}) {
  try {
    const records = await state.records;
    state.records = null;
    if (!Object.keys(records).length) return 0;
    const text = JSON.stringify(records);
    phases.store_bytes = text.length;
    phases.store_records = Object.keys(records).length;
    return await callPython('load_stored', text);
  } catch (error) {
    console.warn('kernelgen worker: the stored kernels could not be read:', error);
    return 0;
  }
}

// Write what Python compiled since (and a clear_cache()) to the browser's store.
async function saveStored() {
  if (!state.api) return;
  try {
    await writeStored(JSON.parse(await callPython('take_stored')));
  } catch (error) {
    console.warn('kernelgen worker: the compiled kernels could not be stored:', error);
  }
}

// The store's key of the launch order record (saveLaunchOrder).
const ORDER_KEY = 'launch-order';

// Commands that run kernels: after the page's first, its launch order is stored.
const RUNS = new Set(['run', 'runModel', 'generate']);

// Commands after which nothing new was compiled (the store is not written).
const NOT_STORED = new Set(['boot', 'warm', 'release', 'info', 'loseDevice']);

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

async function run({ code, device, reference = true, search = false, timings = true }) {
  const status = device === 'WEBGPU' ? await ensureGpu() : { recreated: false };
  if (device === 'WEBGPU') await state.gpu.takeTimings();  // drop those of a failed earlier run
  if (device === 'WEBGPU') state.gpu.timeBatches = timings;
  const built = { ...state.gpu.stats };
  try {
    const result = await callPython('run_program', code, device, reference, search);
    if (result.ok && device === 'WEBGPU') result.timings = await state.gpu.takeTimings();
    // the run's pipeline builds (ms: each summed, and the time any was under way; gpu.js)
    result.pipeline_ms = state.gpu.stats.pipelineMs - built.pipelineMs;
    result.pipeline_busy_ms = state.gpu.stats.pipelineBusyMs - built.pipelineBusyMs;
    result.recreated = status.recreated;
    result.lost_reason = status.reason || null;
    return result;
  } finally {  // also after a KeyboardInterrupt (Stop)
    if (device === 'WEBGPU') state.gpu.timeBatches = false;
    if (device === 'WEBGPU') enqueue({ cmd: 'release' });  // after this reply: free GPU buffers
  }
}

// The Models view: run the loaded ONNX model on its random inputs for `seed` (or on `inputs`,
// {name: Uint8Array of the raw little-endian values}), with the GPU's per-kernel times as the
// editor's Run gets them.
async function runModel({ seed = 0, device, inputs = null }) {
  const status = device === 'WEBGPU' ? await ensureGpu() : { recreated: false };
  if (device === 'WEBGPU') await state.gpu.takeTimings();  // drop those of a failed earlier run
  if (device === 'WEBGPU') state.gpu.timeBatches = true;
  const built = { ...state.gpu.stats };
  try {
    const result = await callPython('run_model', seed, device, inputs ?? undefined);  // None
    if (result.ok && device === 'WEBGPU') result.timings = await state.gpu.takeTimings();
    // the run's pipeline builds (ms: each summed, and the time any was under way), as run's
    result.pipeline_ms = state.gpu.stats.pipelineMs - built.pipelineMs;
    result.pipeline_busy_ms = state.gpu.stats.pipelineBusyMs - built.pipelineBusyMs;
    result.recreated = status.recreated;
    return result;
  } finally {
    if (device === 'WEBGPU') state.gpu.timeBatches = false;
    if (device === 'WEBGPU') enqueue({ cmd: 'release' });
  }
}

// Generate from a causal LM (its ONNX bytes, or null: the one given last) with kg.generate;
// each token is posted to the page as it comes ({type: 'token', token}).
async function generate({ data = null, options }) {
  const device = JSON.parse(options).device || 'WEBGPU';
  if (device === 'WEBGPU') await ensureGpu();
  const onToken = (token) => post({ type: 'token', token });
  try {
    return await callPython('generate_model', data ?? undefined, options, onToken);
  } finally {
    if (device === 'WEBGPU') enqueue({ cmd: 'release' });
  }
}

const COMMANDS = {
  boot,
  run,
  runModel,
  generate,
  // an ONNX file's bytes (a Uint8Array) -> inputs, outputs, histogram, WGSL and PTX kernels
  loadModel: ({ data, arch, seed = 0 }) => callPython('load_model', data, arch, seed),
  compareModel: () => callPython('compare_model'),
  compile: ({ code, arch, targets }) => callPython('compile_program', code, arch, targets),
  exportBundles: ({ code, arch }) => callPython('export_bundles', code, arch),
  // the last run of `code` compared with the PYTHON interpreter (see web_api.check_reference)
  reference: ({ code }) => callPython('check_reference', code),
  verify: async ({ code, arch }) => {
    await ensureGpu();
    return callPython('verify_ptx', code, arch, state.gpuInfo?.available ? 'WEBGPU' : 'PYTHON');
  },
  selftest: ({ files }) => callPython('self_test', state.pyodide.toPy(files)),
  warm: () => callPython('warm'),
  release: () => callPython('release'),
  // the loaded model, its run's buffers and every compiled pipeline dropped (before the next
  // model: pipelines hold the driver's compiled code): {freed, buffers, pipelines}
  unloadModel: async () => {
    const result = await callPython('unload_model');
    if (result.ok) result.pipelines = state.gpu?.clearPipelines() ?? 0;
    return result;
  },
  loseDevice: async () => {
    await state.gpu.destroyDevice();
    return true;
  },
  info: () => ({ gpu: state.gpu.info() }),
  // the boot's prebuild: the pipeline hashes it started, in order (prebuildStored), once done;
  // the pipelines built (compile() calls) and held
  prebuilt: async () => ({ started: (await state.prebuilt) || [],
    builds: state.gpu.stats.pipelineBuilds, pipelines: state.gpu.pipelines.size }),
};

function errorData(error) {
  if (error && typeof error.toJSON === 'function') return error.toJSON();
  if (error && error.type && error.message !== undefined && !(error instanceof Error)) return error;
  return { type: error?.type || error?.name || 'Error', message: String(error?.message || error),
    line: null };
}

// The result bytes the page gets are moved to it, not copied (each is a fresh copy from Python).
function transferables(result) {
  const views = [result?.out?.data, result?.ptxsim?.data, result?.other?.data];
  const buffers = views.filter((v) => ArrayBuffer.isView(v)).map((v) => v.buffer);
  return [...new Set(buffers)];
}

async function handle({ id, cmd, args }) {
  if (state.interrupt) state.interrupt[0] = 0;  // a Stop meant for an earlier command
  try {
    const result = await COMMANDS[cmd](args || {});
    if (id !== undefined) post({ id, ok: true, result }, transferables(result));
  } catch (error) {
    if (id !== undefined) post({ id, ok: false, error: errorData(error) });
    else console.warn(`kernelgen worker: ${cmd} failed:`, error);
  }
  if (!NOT_STORED.has(cmd)) await saveStored();
  if (RUNS.has(cmd)) await saveLaunchOrder();
}

// One command at a time: Python is single-threaded, and with JSPI a command that waits for the
// GPU would otherwise let the next one start in the middle of it.
let queue = Promise.resolve();

function enqueue(message) {
  queue = queue.then(() => handle(message));
}

self.onmessage = ({ data }) => enqueue(data);
