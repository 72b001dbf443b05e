// Language models in the page for bench/lm_page.py: kernelgen's causal LM bundles (model.js)
// against onnxruntime-web's WebGPU and wasm backends on the same ONNX file, greedy, on one
// adapter (SwiftShader, or lavapipe through ANGLE in compatibility mode: ?compat). Playwright
// calls window.lm.*; each returns plain data.
//
// kernelgen is one bundle of the model (export/onnx_lm.py) whose step (the new tokens of a run)
// is symbolic, the KV cache its state: model.js's generate runs the whole prompt in one run, then
// one run per token, reading back only the token id; the weights are on the GPU once. The forced
// pass (untimed) feeds the reference tokens through the same bundle run by run. onnxruntime-web
// runs the same ONNX file (imported on first use: without it the page runs kernelgen alone):
// a prefill call, then one call per token with the present caches fed back as past (on the GPU
// for its WebGPU backend: preferredOutputLocation 'gpu-buffer', as transformers.js does), the
// logits read back and argmax'd here.
//
// Counted by wrapping WebGPU's prototypes before anything runs: compute dispatches
// (dispatchWorkgroups / Indirect) per decode step, and live GPU buffer bytes per device (created
// minus destroyed; a buffer left to the garbage collector stays counted) with their peak.
import { describe, largestLimits } from './bench_device.js';
import * as trace from './lm_trace.js';

const DIST = '/npm/onnxruntime-web/dist/';
const WARM_STEPS = 2;
const compat = new URL(location.href).searchParams.has('compat');
const state = { device: null, adapter: null, prepared: {}, ortGpu: null, ortWasm: null,
  ortDevice: null, peers: {} };
const counts = { dispatches: 0, devices: new Map(), buffers: new WeakMap() };

if ('gpu' in navigator && compat) {     // every adapter request of the page asks for compat
  const request = navigator.gpu.requestAdapter.bind(navigator.gpu);
  navigator.gpu.requestAdapter = (options) => request({ ...(options || {}),
    featureLevel: 'compatibility' });
}

function wrapCounters() {
  if (!('gpu' in navigator)) return;
  const pass = GPUComputePassEncoder.prototype;
  for (const name of ['dispatchWorkgroups', 'dispatchWorkgroupsIndirect']) {
    const original = pass[name];
    pass[name] = function counted(...args) {
      counts.dispatches += 1;
      return original.apply(this, args);
    };
  }
  const create = GPUDevice.prototype.createBuffer;
  GPUDevice.prototype.createBuffer = function tracked(descriptor) {
    const buffer = create.call(this, descriptor);
    const use = counts.devices.get(this) || { live: 0, peak: 0 };
    use.live += buffer.size;
    use.peak = Math.max(use.peak, use.live);
    counts.devices.set(this, use);
    counts.buffers.set(buffer, { device: this, size: buffer.size });
    return buffer;
  };
  const destroy = GPUBuffer.prototype.destroy;
  GPUBuffer.prototype.destroy = function untracked() {
    const entry = counts.buffers.get(this);
    if (entry) {
      counts.devices.get(entry.device).live -= entry.size;
      counts.buffers.delete(this);
    }
    return destroy.call(this);
  };
}
wrapCounters();

const memoryOf = (device) => (device && counts.devices.get(device)) || null;

// The peak of `device` counted again from what is live now: a row's peak is its own, not an
// earlier row's (one system per device: ours on state.device, ORT's WebGPU backend on its own).
function restartPeak(device) {
  const use = device && counts.devices.get(device);
  if (use) use.peak = use.live;
}

async function device() {
  if (state.device) return state.device;
  const found = await navigator.gpu.requestAdapter();
  const limits = largestLimits(found);
  state.adapter = describe(found.info);
  state.device = await found.requestDevice({ requiredLimits: limits });
  return state.device;
}

async function info() {
  await device();
  return { adapter: state.adapter, isolated: globalThis.crossOriginIsolated === true,
    cores: navigator.hardwareConcurrency, peers: state.peers };
}

const argmax = (a, from, n) => {
  let best = 0;
  for (let i = 1; i < n; i++) if (a[from + i] > a[from + best]) best = i;
  return best;
};

// ---- kernelgen: one bundle, its step symbolic ----------------------------------------------

async function loadBundle(base) {
  const { load } = await import(`${base}model.js`);
  return load({ device: await device(), base });
}

// The bundle's inputs for the new tokens `ids` after `done` (greedy: temperature 0), only those
// it has (position_ids is absent where the graph does not read it).
function bundleFeeds(model, ids, done) {
  const all = { input_ids: Int32Array.from(ids),
    position_ids: Int32Array.from(ids, (_, k) => done + k),
    attention_mask: new Int32Array(done + ids.length).fill(1),
    temperature: Float32Array.of(0), seed: Int32Array.of(0) };
  return Object.fromEntries(model.inputs.map((i) => [i.name, all[i.name]]));
}

// The most new tokens a run of the bundle takes: its step's top (export/onnx_lm.py), or 1 for a
// bundle of one token a run.
function stepOf(manifest) {
  const ids = manifest.inputs.find((i) => i.name === 'input_ids');
  const last = (ids.symbolic_shape || ids.shape).at(-1);
  return typeof last === 'number' ? last
    : manifest.dims.find((d) => d.name === last.terms[0][0]).hi;
}

function bundleSystem(model) {
  const step = stepOf(model.manifest);
  return {
    async prefill(prompt) {     // the whole prompt in one run (in runs of `step` if longer)
      model.reset();
      let done = 0;
      for (; prompt.length - done > step; done += step) {
        await model.run(bundleFeeds(model, prompt.slice(done, done + step), done), { outputs: [] });
      }
      const last = bundleFeeds(model, prompt.slice(done), done);
      return (await model.run(last, { outputs: ['token'] })).token[0];
    },
    async step(token, done) {
      return (await model.run(bundleFeeds(model, [token], done), { outputs: ['token'] })).token[0];
    },
    // model.js's own generate (export/generate.js): the prefill's and decode's times from its
    // onToken calls
    async generate(prompt, tokens) {
      const seen = [];
      const start = performance.now();
      const out = await model.generate(prompt, { maxNewTokens: tokens,
        onToken: () => seen.push([performance.now(), counts.dispatches]) });
      return { out, prefillMs: seen[0][0] - start, decodeMs: seen.at(-1)[0] - seen[0][0],
        decodeDispatches: seen.at(-1)[1] - seen[0][1] };
    },
    dispose() { model.destroy(); },
    memory: () => memoryOf(state.device),
    kernels: model.manifest.kernels.length,
    plannedBytes: model.manifest.memory.peak_bytes,
    weightBytes: model.manifest.weights.reduce((sum, w) => sum + model.manifest.buffers[w.buffer]
      .nbytes, 0),
  };
}

async function prepareBundle(spec) {
  return bundleSystem(await loadBundle(spec.bundle));
}

// ---- onnxruntime-web ---------------------------------------------------------------------

// onnxruntime-web's module for `ep`, imported on first use (the page runs kernelgen alone
// where .venv-bench's onnxruntime-web is absent)
async function ortModule(ep) {
  state.ortGpu = state.ortGpu || await import(`${DIST}ort.webgpu.min.mjs`);
  if (ep === 'webgpu') return state.ortGpu;
  if (!state.ortWasm) {
    try {
      state.ortWasm = await import(`${DIST}ort.wasm.min.mjs`);
    } catch (error) {
      console.warn('ort.wasm.min.mjs did not load; the WebGPU build runs wasm:', error);
      state.ortWasm = state.ortGpu;
    }
  }
  return state.ortWasm;
}

const ORT_ARRAYS = { float32: Float32Array, float16: Uint16Array };

function ortSystem(ort, session, spec, gpuDevice) {
  const empty = () => Object.fromEntries(spec.past.map((p) => [p.name, new ort.Tensor(p.dtype,
    new ORT_ARRAYS[p.dtype](0), [1, p.heads, 0, p.dim])]));
  let past = empty();
  const release = () => Object.values(past).forEach((t) => t.dispose?.());
  const run = async (ids, done) => {
    const n = ids.length;
    const total = done + n;
    const feeds = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, n]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(total).fill(1n), [1, total]),
      position_ids: new ort.Tensor('int64', BigInt64Array.from(ids, (_, k) => BigInt(done + k)),
        [1, n]),
      ...past };
    const out = await session.run(feeds);
    release();
    past = Object.fromEntries(spec.past.map((p) => [p.name,
      out[p.name.replace('past_key_values.', 'present.')]]));
    const logits = await out.logits.getData();
    out.logits.dispose?.();
    return argmax(logits, logits.length - spec.vocab, spec.vocab);   // the last position's
  };
  return {
    async prefill(prompt) {
      release();
      past = empty();
      return run(prompt, 0);
    },
    step: (token, done) => run([token], done),
    dispose() { release(); session.release(); },
    memory: () => memoryOf(gpuDevice),
    kernels: null,
    plannedBytes: null,
  };
}

async function prepareOrt(spec) {
  const ort = await ortModule(spec.ep);
  ort.env.wasm.wasmPaths = DIST;
  ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? navigator.hardwareConcurrency : 1;
  const bytes = new Uint8Array(await (await fetch(spec.model)).arrayBuffer());
  const options = { executionProviders: [spec.ep], graphOptimizationLevel: 'all' };
  if (spec.externalData) options.externalData = spec.externalData;   // a model past 2 GB
  if (spec.ep === 'webgpu') {
    options.preferredOutputLocation = Object.fromEntries(spec.past.map((p) => [
      p.name.replace('past_key_values.', 'present.'), 'gpu-buffer']));
  }
  const session = await ort.InferenceSession.create(bytes, options);
  let gpuDevice = null;
  if (spec.ep === 'webgpu') {
    gpuDevice = await ort.env.webgpu.device;
    state.ortDevice = gpuDevice;
    state.peers.webgpu = describe(gpuDevice?.adapterInfo);
  } else {
    state.peers.wasm = `threads ${ort.env.wasm.numThreads}`;
  }
  return ortSystem(ort, session, spec, gpuDevice);
}

// ---- the bench's calls -----------------------------------------------------------------------

// Loads `key`'s system (spec.kind 'bundle' or 'ort') and runs the prefill once: the time from
// fetching its files to the first token (ttftMs; the page's device made before), that token,
// or {error}; then WARM_STEPS decode steps (untimed: ORT makes its decode shaders on the
// first); `trace`: what happened meanwhile (lm_trace.js: fetches, writes, pipeline builds,
// marks loaded / first / step0 / step1).
async function prepare(key, spec) {
  restartPeak(spec.kind === 'bundle' ? state.device : spec.ep === 'webgpu' && state.ortDevice);
  try {
    await device();
    trace.start();
    const start = performance.now();
    const system = await (spec.kind === 'bundle' ? prepareBundle(spec) : prepareOrt(spec));
    const loadMs = performance.now() - start;
    trace.mark('loaded');
    const first = await system.prefill(spec.prompt);
    const ttftMs = performance.now() - start;
    trace.mark('first');
    let token = first;          // a warm-up: the decode step's shaders are made now
    for (let i = 0; i < WARM_STEPS; i++) {
      token = await system.step(token, spec.prompt.length + i);
      trace.mark(`step${i}`);
    }
    state.prepared[key] = system;
    return { ttftMs, loadMs, first, kernels: system.kernels, plannedBytes: system.plannedBytes,
      weightBytes: system.weightBytes ?? null, trace: trace.stop() };
  } catch (error) {
    trace.stop();
    return { error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

// A greedy generation by the system's prefill and step calls (the peers): its tokens, the
// prefill's ms (prompt to first token), the decode steps' ms and dispatches in all.
async function stepwise(system, prompt, tokens) {
  let start = performance.now();
  const out = [await system.prefill(prompt)];
  const prefillMs = performance.now() - start;
  const before = counts.dispatches;
  start = performance.now();
  for (let i = 1; i < tokens; i++) out.push(await system.step(out[i - 1], prompt.length + i - 1));
  return { out, prefillMs, decodeMs: performance.now() - start,
    decodeDispatches: counts.dispatches - before };
}

// One greedy generation of `tokens` new tokens after `prompt`, after a short pause (kernelgen
// through model.js's generate, the peers step by step): the prefill's ms (prompt to first
// token), the decode steps' ms in all (tokens - 1 steps), the compute dispatches per decode
// step, the live GPU buffer bytes, the tokens.
async function generate(key, prompt, tokens, settleMs) {
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  const system = state.prepared[key];
  const got = await (system.generate ? system.generate(prompt, tokens)
    : stepwise(system, prompt, tokens));
  const steps = Math.max(tokens - 1, 1);
  return { prefillMs: got.prefillMs, decodeMs: got.decodeMs, tokens: got.out,
    dispatchesPerStep: got.decodeDispatches / steps, memory: system.memory() };
}

// Forced decoding (untimed): the system fed `prompt` then the reference tokens `want`; how
// many of its top-1 tokens (the token after each position) equal want's.
async function forced(key, prompt, want) {
  const system = state.prepared[key];
  let agree = Number(await system.prefill(prompt) === want[0]);
  for (let i = 1; i < want.length; i++) {
    agree += Number(await system.step(want[i - 1], prompt.length + i - 1) === want[i]);
  }
  return agree;
}

async function release(key) {
  const system = state.prepared[key];
  delete state.prepared[key];
  if (system) await system.dispose();
}

window.lm = { info, prepare, generate, forced, release };
document.body.dataset.ready = 'true';
