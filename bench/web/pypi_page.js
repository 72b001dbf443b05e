// Real models in the page for bench/pypi_page.py: kernelgen's exported WebGPU bundles (model.js,
// as a page that ships a fixed model uses them) against onnxruntime-web's WebGPU and wasm
// backends, on the same inputs, on one adapter (SwiftShader, or lavapipe through ANGLE in
// compatibility mode: ?compat). Every call is timed the way a page calls a model: typed arrays on
// the CPU in, every output back on the CPU. Playwright calls window.pypi.*; each returns plain
// data (outputs as arrays of numbers, for the Python side to check against onnxruntime's).
import * as ortGpu from '/npm/onnxruntime-web/dist/ort.webgpu.min.mjs';
import { describe, largestLimits } from './bench_device.js';

const DIST = '/npm/onnxruntime-web/dist/';
const ARRAYS = { float32: Float32Array, float16: Uint16Array, int32: Int32Array,
  uint32: Uint32Array, int64: BigInt64Array, uint8: Uint8Array, int8: Int8Array,
  bool: Uint8Array, int16: Int16Array, uint16: Uint16Array };
const compat = new URL(location.href).searchParams.has('compat');
const state = { device: null, adapter: null, prepared: {}, ortWasm: null, peers: {} };

// In compatibility mode every adapter request of the page asks for it (as bench/web/peers.js):
// onnxruntime-web asks for a core adapter, which that browser answers with SwiftShader.
if ('gpu' in navigator && compat) {
  const request = navigator.gpu.requestAdapter.bind(navigator.gpu);
  navigator.gpu.requestAdapter = (options) => request({ ...(options || {}),
    featureLevel: 'compatibility' });
}

// our device: the page's adapter with its largest compute limits (bundles share it)
async function device() {
  if (state.device) return state.device;
  const found = await navigator.gpu.requestAdapter();
  const limits = largestLimits(found);
  state.adapter = describe(found.info);
  // (subgroups where the adapter has them: bundles run their kernels' subgroups forms there, and
  // those exported with --subgroups need them)
  const wanted = ['timestamp-query', 'subgroups'].filter((name) => found.features.has(name));
  state.device = await found.requestDevice({ requiredLimits: limits, requiredFeatures: wanted });
  return state.device;
}

async function info() {
  await device();
  return { adapter: state.adapter, isolated: globalThis.crossOriginIsolated === true,
    cores: navigator.hardwareConcurrency, peers: state.peers };
}

async function fetchArray(url, dtype) {
  const bytes = await (await fetch(url)).arrayBuffer();
  return new ARRAYS[dtype](bytes);
}

// every output as {name: [numbers]} (int64 as Numbers)
function plain(outputs) {
  return Object.fromEntries(Object.entries(outputs).map(([name, data]) => [name,
    Array.from(data, Number)]));
}

// ---- kernelgen: the exported bundle's model.js --------------------------------------------------

async function prepareBundle(spec) {
  const dev = await device();
  const { load } = await import(`${spec.base}model.js`);
  const start = performance.now();
  const model = await load({ device: dev, base: spec.base });
  const loadMs = performance.now() - start;
  const inputs = {};
  for (const input of spec.inputs) inputs[input.name] = await fetchArray(input.file, input.dtype);
  // a timed call reads back spec.read (a streaming model: not its state, kept on the GPU);
  // checked calls start the state anew and read every output
  return { run: () => model.run(inputs, { outputs: spec.read }), dispose: () => model.destroy(),
    all: () => { model.reset(); return model.run(inputs); }, calls: () => model.calls, loadMs,
    kernels: model.manifest?.kernels?.length ?? null, forms: model.forms ?? null };
}

// ---- onnxruntime-web: its WebGPU and its wasm backends ---------------------------------------

async function ortModule(ep) {
  if (ep === 'webgpu') return ortGpu;
  if (!state.ortWasm) {        // the wasm-only build (what a wasm user loads), else the same one
    try {
      state.ortWasm = await import(`${DIST}ort.wasm.min.mjs`);
    } catch (error) {
      console.warn('ort.wasm.min.mjs did not load; the WebGPU build runs wasm:', error);
      state.ortWasm = ortGpu;
    }
  }
  return state.ortWasm;
}

async function prepareOrt(spec) {
  const ort = await ortModule(spec.ep);
  ort.env.wasm.wasmPaths = DIST;
  ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? navigator.hardwareConcurrency : 1;
  const bytes = new Uint8Array(await (await fetch(spec.model)).arrayBuffer());
  const start = performance.now();
  const session = await ort.InferenceSession.create(bytes, {
    executionProviders: [spec.ep], graphOptimizationLevel: 'all' });
  const loadMs = performance.now() - start;
  if (spec.ep === 'webgpu') {
    state.peers.webgpu = describe((await ort.env.webgpu.device)?.adapterInfo);
  }
  if (spec.ep === 'wasm') state.peers.wasm = `threads ${ort.env.wasm.numThreads}`;
  const feeds = {};
  for (const input of spec.inputs) {
    feeds[input.name] = new ort.Tensor(input.dtype, await fetchArray(input.file, input.dtype),
      input.shape);
  }
  const run = async () => {
    const results = await session.run(feeds);
    const out = {};
    for (const [name, tensor] of Object.entries(results)) {
      out[name] = await tensor.getData();
      tensor.dispose?.();
    }
    return out;
  };
  return { run, dispose: () => session.release(), loadMs, kernels: null };
}

// ---- the bench's calls -----------------------------------------------------------------------

// Builds `key`'s runner (spec.kind 'bundle' or 'ort'), runs it once and returns that run's
// outputs (the warm-up: pipelines, first allocations) with its load time, or {error}.
async function prepare(key, spec) {
  try {
    const prepared = await (spec.kind === 'bundle' ? prepareBundle(spec) : prepareOrt(spec));
    state.prepared[key] = prepared;
    const start = performance.now();
    const outputs = plain(await (prepared.all || prepared.run)());
    const firstRunMs = performance.now() - start;
    await prepared.run();                  // a warm call's counts (model.calls)
    return { outputs, loadMs: prepared.loadMs, firstRunMs, kernels: prepared.kernels,
      calls: prepared.calls?.() ?? null, forms: prepared.forms ?? null };
  } catch (error) {
    return { error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

// one call of `key`: wall ms, inputs on the CPU to every output on the CPU, after a short pause
// (the previous system's leftover work settles first)
async function time(key, settleMs) {
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  const start = performance.now();
  await state.prepared[key].run();
  return performance.now() - start;
}

// the last call's outputs, again (checked after the timed rounds too)
async function outputs(key) {
  const prepared = state.prepared[key];
  return plain(await (prepared.all || prepared.run)());
}

// the adapter's storage buffers per shader stage (what bundles may be compiled for)
async function storageBuffers() {
  await device();
  return state.device.limits.maxStorageBuffersPerShaderStage;
}

// The bundle at spec.base loaded again with per-kernel GPU timestamps (where the adapter has
// them): the best of `runs` runs' [{name, ms}] of each kernel, or null without timestamps.
async function profile(spec, runs) {
  const dev = await device();
  if (!dev.features.has('timestamp-query')) return null;
  const { load } = await import(`${spec.base}model.js`);
  const model = await load({ device: dev, base: spec.base, timings: true });
  const inputs = {};
  for (const input of spec.inputs) inputs[input.name] = await fetchArray(input.file, input.dtype);
  let best = null;
  try {
    for (let i = 0; i < runs; i += 1) {
      await model.run(inputs);
      const total = model.timings.reduce((s, t) => s + t.ms, 0);
      if (!best || total < best.total) best = { total, kernels: model.timings };
    }
  } finally {
    model.destroy();
  }
  return best;
}

async function release(key) {
  const prepared = state.prepared[key];
  delete state.prepared[key];
  if (prepared) await prepared.dispose();
}

window.pypi = { info, prepare, time, outputs, release, profile, storageBuffers };
document.body.dataset.ready = 'true';
