// Language models in the page for bench/lm_page.py: kernelgen's causal LM bundles (model.js)
// against onnxruntime-web's WebGPU and wasm backends on the same ONNX file, greedy, on one
// adapter (SwiftShader, or lavapipe through ANGLE in compatibility mode: ?compat). Playwright
// calls window.lm.*; each returns plain data.
//
// kernelgen is two bundles of the model (export/onnx_lm.py): a prefill program (a step of the
// prompt's length) and a decode program (a step of one token), each with the KV cache as its
// state on one device. After the prefill run its cache is copied into the decode program's on the
// GPU (this page reaches into model.js's Model for that: its storage and row counts), then each
// token is a decode run reading back only the token id. onnxruntime-web runs the same ONNX file:
// a prefill call, then one call per token with the present caches fed back as past (on the GPU
// for its WebGPU backend: preferredOutputLocation 'gpu-buffer', as transformers.js does), the
// logits read back and argmax'd here.
//
// Counted by wrapping WebGPU's prototypes before anything runs: compute dispatches
// (dispatchWorkgroups / Indirect) per decode step, and live GPU buffer bytes per device (created
// minus destroyed; a buffer left to the garbage collector stays counted) with their peak.
import * as ortGpu from '/npm/onnxruntime-web/dist/ort.webgpu.min.mjs';
import { describe, largestLimits } from './bench_device.js';

const DIST = '/npm/onnxruntime-web/dist/';
const WARM_STEPS = 2;
const compat = new URL(location.href).searchParams.has('compat');
const state = { device: null, adapter: null, prepared: {}, ortWasm: null, peers: {} };
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

// ---- kernelgen: the prefill and decode bundles ----------------------------------------------

async function loadBundle(base) {
  const { load } = await import(`${base}model.js`);
  return load({ device: await device(), base });
}

// The prefill model's cache (its state buffers, `rows` rows each) copied into the decode
// model's on the GPU: both were exported with the same context, so the same layout.
function handOver(prefill, decode) {
  const dev = prefill.device;
  const encoder = dev.createCommandEncoder();
  for (const s of prefill.state) {
    const storageOf = (m) => m.storage[m.buffer(m.manifest.inputs.find((i) => i.name === s.name))
      .storage];
    const src = storageOf(prefill);
    encoder.copyBufferToBuffer(src, 0, storageOf(decode), 0, src.size);
  }
  dev.queue.submit([encoder.finish()]);
  decode.rows = { ...prefill.rows };
}

function bundleSystem(prefill, decode) {
  const all = (ids, done) => ({ input_ids: Int32Array.from(ids),
    position_ids: Int32Array.from(ids, (_, k) => done + k),
    attention_mask: new Int32Array(done + ids.length).fill(1),
    temperature: Float32Array.of(0), seed: Int32Array.of(0) });
  const feeds = (ids, done) => {     // the inputs the programs have (position_ids may be unread)
    const given = all(ids, done);
    return Object.fromEntries(decode.inputs.map((i) => [i.name, given[i.name]]));
  };
  return {
    async prefill(prompt) {
      prefill.reset();
      const got = await prefill.run(feeds(prompt, 0), { outputs: ['token'] });
      handOver(prefill, decode);
      return got.token[0];
    },
    async step(token, done) {
      return (await decode.run(feeds([token], done), { outputs: ['token'] })).token[0];
    },
    dispose() { prefill.destroy(); decode.destroy(); },
    memory: () => memoryOf(state.device),
    kernels: { prefill: prefill.manifest.kernels.length, decode: decode.manifest.kernels.length },
    plannedBytes: prefill.manifest.memory.peak_bytes + decode.manifest.memory.peak_bytes,
  };
}

async function prepareBundle(spec) {
  const prefill = await loadBundle(spec.prefill);
  const decode = await loadBundle(spec.decode);
  return bundleSystem(prefill, decode);
}

// ---- onnxruntime-web ---------------------------------------------------------------------

async function ortModule(ep) {
  if (ep === 'webgpu') return ortGpu;
  if (!state.ortWasm) {
    try {
      state.ortWasm = await import(`${DIST}ort.wasm.min.mjs`);
    } catch (error) {
      console.warn('ort.wasm.min.mjs did not load; the WebGPU build runs wasm:', error);
      state.ortWasm = ortGpu;
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
  if (spec.ep === 'webgpu') {
    options.preferredOutputLocation = Object.fromEntries(spec.past.map((p) => [
      p.name.replace('past_key_values.', 'present.'), 'gpu-buffer']));
  }
  const session = await ort.InferenceSession.create(bytes, options);
  let gpuDevice = null;
  if (spec.ep === 'webgpu') {
    gpuDevice = await ort.env.webgpu.device;
    state.peers.webgpu = describe(gpuDevice?.adapterInfo);
  } else {
    state.peers.wasm = `threads ${ort.env.wasm.numThreads}`;
  }
  return ortSystem(ort, session, spec, gpuDevice);
}

// ---- the bench's calls -----------------------------------------------------------------------

// Loads `key`'s system (spec.kind 'bundle' or 'ort') and runs the prefill once: the time from
// fetching its files to the first token (ttftMs), that token, or {error}; then WARM_STEPS
// decode steps (untimed: ORT makes its decode shaders on the first).
async function prepare(key, spec) {
  try {
    const start = performance.now();
    const system = await (spec.kind === 'bundle' ? prepareBundle(spec) : prepareOrt(spec));
    const loadMs = performance.now() - start;
    const first = await system.prefill(spec.prompt);
    const ttftMs = performance.now() - start;
    let token = first;          // a warm-up: the decode step's shaders are made now
    for (let i = 0; i < WARM_STEPS; i++) token = await system.step(token, spec.prompt.length + i);
    state.prepared[key] = system;
    return { ttftMs, loadMs, first, kernels: system.kernels, plannedBytes: system.plannedBytes };
  } catch (error) {
    return { error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

// One greedy generation of `tokens` new tokens after `prompt`, after a short pause: the
// prefill's ms (prompt to first token), the decode steps' ms in all (tokens - 1 steps), the
// compute dispatches per decode step, the tokens.
async function generate(key, prompt, tokens, settleMs) {
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  const system = state.prepared[key];
  let start = performance.now();
  const out = [await system.prefill(prompt)];
  const prefillMs = performance.now() - start;
  const before = counts.dispatches;
  start = performance.now();
  for (let i = 1; i < tokens; i++) out.push(await system.step(out[i - 1], prompt.length + i - 1));
  const decodeMs = performance.now() - start;
  const steps = Math.max(tokens - 1, 1);
  return { prefillMs, decodeMs, tokens: out,
    dispatchesPerStep: (counts.dispatches - before) / steps, memory: system.memory() };
}

async function release(key) {
  const system = state.prepared[key];
  delete state.prepared[key];
  if (system) await system.dispose();
}

window.lm = { info, prepare, generate, release };
document.body.dataset.ready = 'true';
