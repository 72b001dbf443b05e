// Bench-only runners for bench/peers.py: kernelgen's and tinygrad's compiled WGSL (programs of
// kernels, buffers and launch sizes written by bench/peers.py) on one WebGPU device of ours, and
// TF.js and onnxruntime-web on theirs. Every system's GPU time of one run is measured the same
// way: from the first submit to the queue's onSubmittedWorkDone, inputs already on the GPU,
// outputs left there. prepare() also reads the output once and compares it with numpy's.
// Where the device has 'timestamp-query', a second way: GPU timestamps around each compute pass,
// summed, for every system alike: passHook adds timestampWrites (beginningOfPassWriteIndex /
// endOfPassWriteIndex) to every compute pass begun during a timed run (our runner's programs:
// one pass per kernel). (onnxruntime-web 1.31's
// WebGPU bundle is its C++ WebGPU EP, whose own profiler writes to a file in its wasm memory,
// not reachable from the page; its JSEP profiler, env.webgpu.profiling, is another build.) A
// system's pass may hold several kernels (TF.js, ORT-web): the sum is their GPU time all the
// same, without the gaps between passes.
// Playwright calls window.peers.*; each returns plain data.

const state = { device: null, adapterInfo: null, prepared: {}, timestamps: false,
  peerAdapters: {} };

function describe(info) {
  return info ? [info.description, info.vendor, info.architecture].filter(Boolean).join(' / ') : null;
}

async function fetchF32(url) {
  return new Float32Array(await (await fetch(url)).arrayBuffer());
}

async function fetchBytes(url) {
  return new Uint8Array(await (await fetch(url)).arrayBuffer());
}

// the adapter as requested by this page's flags (compatibility mode for lavapipe via ANGLE)
async function adapter() {
  const compat = new URL(location.href).searchParams.has('compat');
  return navigator.gpu.requestAdapter(compat ? { featureLevel: 'compatibility' } : {});
}

// a device of `found` with its largest compute limits (and its timestamp queries, where it has them)
function fullDevice(found) {
  const limits = {};
  for (const key of ['maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX',
    'maxComputeWorkgroupSizeY', 'maxComputeWorkgroupSizeZ', 'maxStorageBuffersPerShaderStage',
    'maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupStorageSize',
    'maxComputeWorkgroupsPerDimension']) {
    limits[key] = found.limits[key];
  }
  const stamps = found.features.has('timestamp-query');
  return found.requestDevice({ requiredLimits: limits,
    requiredFeatures: stamps ? ['timestamp-query'] : [] });
}

// In compatibility mode (lavapipe through ANGLE) every adapter request of the page asks for it:
// TF.js and ORT-web ask for a core adapter, which is SwiftShader in that browser (measured: the
// lavapipe page's ORT-web and TF.js ran on SwiftShader before this; window.peers.info() says
// where each peer runs).
if ('gpu' in navigator && new URL(location.href).searchParams.has('compat')) {
  const request = navigator.gpu.requestAdapter.bind(navigator.gpu);
  navigator.gpu.requestAdapter = (options) => request({ ...(options || {}),
    featureLevel: 'compatibility' });
}

async function device() {
  if (state.device) return state.device;
  const found = await adapter();
  state.timestamps = found.features.has('timestamp-query');
  state.device = await fullDevice(found);
  const info = found.info || {};
  state.adapterInfo = { vendor: info.vendor, architecture: info.architecture, device: info.device,
    description: info.description, isFallbackAdapter: Boolean(info.isFallbackAdapter),
    featureLevel: found.featureLevel || null, timestampQuery: state.timestamps };
  return state.device;
}

async function info() {
  await device();
  return { ...state.adapterInfo, peers: state.peerAdapters };
}

// max |got - want| / max(1, max |want|), and whether every element is within tolerance
function compare(got, want, rtol, atol) {
  let worst = 0;
  let scale = 1;
  let bad = 0;
  for (let i = 0; i < want.length; i += 1) scale = Math.max(scale, Math.abs(want[i]));
  if (got.length !== want.length) return { ok: false, error: `${got.length} values, want ${want.length}` };
  for (let i = 0; i < want.length; i += 1) {
    const diff = Math.abs(got[i] - want[i]);
    if (!(diff <= atol * scale + rtol * Math.abs(want[i]))) bad += 1;
    if (!(diff <= worst)) worst = Number.isNaN(diff) ? Infinity : Math.max(worst, diff);
  }
  return { ok: bad === 0, max_error: worst / scale, bad, first: [got[0], want[0]] };
}

async function readBuffer(dev, buffer, nbytes) {
  const staging = dev.createBuffer({ size: nbytes,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = dev.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, nbytes);
  dev.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(staging.getMappedRange().slice(0));
  staging.unmap();
  staging.destroy();
  return out;
}

// ---- compiled WGSL programs (kernelgen, tinygrad) ------------------------------------------------

// The program's buffers on our device, its inputs and constants written: {dev, program, buffers}.
async function programBuffers(spec) {
  const dev = await device();
  const program = await (await fetch(spec.program)).json();
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = [];
  for (const b of program.buffers) {
    const size = Math.max(16, Math.ceil(b.bytes / 16) * 16);
    const buffer = dev.createBuffer({ size, usage });
    if (b.file) dev.queue.writeBuffer(buffer, 0, await fetchBytes(new URL(b.file, spec.program)));
    buffers.push(buffer);
  }
  return { dev, program, buffers };
}

// Every kernel's pipeline (all created at once, createComputePipelineAsync) and bind group
// (a kernel's uniform buffer is added to `buffers`): [{pipeline, bindGroup, dispatch}].
async function programKernels({ dev, program, buffers }) {
  const made = program.kernels.map((k) => {
    dev.pushErrorScope('validation');
    const module = dev.createShaderModule({ code: k.source });
    const entries = k.bindings.map(([binding, , readonly]) => ({ binding,
      visibility: GPUShaderStage.COMPUTE, buffer: { type: readonly ? 'read-only-storage' : 'storage' } }));
    let uniform = null;
    if (k.uniform) {
      uniform = dev.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      const values = [...k.uniform.f32.map(Number), 0, 0, 0].slice(0, 4);
      dev.queue.writeBuffer(uniform, 0, new Float32Array(values));
      buffers.push(uniform);
      entries.push({ binding: k.uniform.binding, visibility: GPUShaderStage.COMPUTE,
        buffer: { type: 'uniform' } });
    }
    const layout = dev.createBindGroupLayout({ entries });
    const pipeline = dev.createComputePipelineAsync({
      layout: dev.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: k.entry } });
    const groupEntries = k.bindings.map(([binding, index]) => ({ binding,
      resource: { buffer: buffers[index] } }));
    if (uniform) groupEntries.push({ binding: k.uniform.binding, resource: { buffer: uniform } });
    const bindGroup = dev.createBindGroup({ layout, entries: groupEntries });
    return { k, pipeline, bindGroup, error: dev.popErrorScope() };
  });
  const kernels = [];
  for (const { k, pipeline, bindGroup, error } of made) {
    const failed = await error;
    if (failed) throw new Error(`kernel ${k.entry}: ${failed.message}`.slice(0, 400));
    kernels.push({ pipeline: await pipeline, bindGroup, dispatch: k.dispatch });
  }
  return kernels;
}

// One run of the kernels, one compute pass each: submit -> onSubmittedWorkDone, in ms.
function programRun(dev, kernels) {
  return async () => {
    const encoder = dev.createCommandEncoder();
    for (const k of kernels) {
      const pass = encoder.beginComputePass();
      pass.setPipeline(k.pipeline);
      pass.setBindGroup(0, k.bindGroup);
      pass.dispatchWorkgroups(...k.dispatch);
      pass.end();
    }
    const start = performance.now();
    dev.queue.submit([encoder.finish()]);
    await dev.queue.onSubmittedWorkDone();
    return performance.now() - start;
  };
}

async function prepareProgram(spec) {
  const loaded = await programBuffers(spec);
  const { dev, program, buffers } = loaded;
  const kernels = await programKernels(loaded);
  const run = programRun(dev, kernels);
  const out = program.buffers[program.output];
  const read = () => readBuffer(dev, buffers[program.output], out.bytes);
  const dispose = () => { for (const b of buffers) b.destroy(); };
  return { run, gpu: stampedRun(dev, run), read, dispose, kernels: kernels.length };
}

// ---- GPU timestamps around the compute passes a peer begins -----------------------------------

const HOOK_QUERIES = 4096;   // passes timed per run at most (2 queries each)
const passHook = { querySet: null, next: 0 };

(() => {
  if (!('gpu' in navigator)) return;
  const begin = GPUCommandEncoder.prototype.beginComputePass;
  GPUCommandEncoder.prototype.beginComputePass = function beginTimed(descriptor) {
    const i = passHook.next;
    if (!passHook.querySet || (descriptor && descriptor.timestampWrites) ||
      i + 2 > HOOK_QUERIES) return begin.call(this, descriptor);
    passHook.next += 2;
    return begin.call(this, { ...(descriptor || {}), timestampWrites: {
      querySet: passHook.querySet, beginningOfPassWriteIndex: i, endOfPassWriteIndex: i + 1 } });
  };
})();

// A GPU-timed version of `run` on `dev` (null without 'timestamp-query'): every compute pass
// begun during the run is timed; after it (its work done), the sum of the passes' ms.
function stampedRun(dev, run) {
  if (!dev.features.has('timestamp-query')) return null;
  const querySet = dev.createQuerySet({ type: 'timestamp', count: HOOK_QUERIES });
  const resolve = dev.createBuffer({ size: 8 * HOOK_QUERIES,
    usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  return async () => {
    Object.assign(passHook, { querySet, next: 0 });
    try { await run(); } finally { passHook.querySet = null; }
    const n = passHook.next;
    if (!n) return null;
    const staging = dev.createBuffer({ size: 8 * n,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = dev.createCommandEncoder();
    encoder.resolveQuerySet(querySet, 0, n, resolve, 0);
    encoder.copyBufferToBuffer(resolve, 0, staging, 0, 8 * n);
    dev.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const t = new BigUint64Array(staging.getMappedRange().slice(0));
    staging.destroy();
    const passesMs = [];
    for (let i = 0; i < n; i += 2) passesMs.push(Number(t[i + 1] - t[i]) / 1e6);
    return { ms: passesMs.reduce((a, b) => a + b, 0), kernels_ms: passesMs };
  };
}

// ---- TF.js (WebGPU backend) ------------------------------------------------------------------

const GAUSS = [1, 4, 6, 4, 1];
const SEPIA = [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]];

// the image-filter demo's chain (bench/peers.py's chain()) in TF.js ops: colour, sepia, 5x5
// Gaussian blur with edges repeated (slices concatenated: TF.js's pads are constant or mirror),
// invert
function filters(spec, img) {
  const [H, W] = img.shape;
  let x = tf.add(tf.mul(tf.sub(img, 0.5), 1.1), 0.55);
  const gray = tf.sum(tf.mul(x, tf.tensor1d([0.299, 0.587, 0.114])), -1, true);
  x = tf.add(gray, tf.mul(tf.sub(x, gray), 1.2));
  x = tf.reshape(tf.matMul(tf.reshape(x, [H * W, 3]), tf.tensor2d(SEPIA), false, true), [H, W, 3]);
  let y = tf.expandDims(tf.transpose(x, [2, 0, 1]), 3);
  const top = tf.slice(y, [0, 0, 0, 0], [3, 1, W, 1]);
  const bottom = tf.slice(y, [0, H - 1, 0, 0], [3, 1, W, 1]);
  y = tf.concat([top, top, y, bottom, bottom], 1);
  const left = tf.slice(y, [0, 0, 0, 0], [3, H + 4, 1, 1]);
  const right = tf.slice(y, [0, 0, W - 1, 0], [3, H + 4, 1, 1]);
  y = tf.concat([left, left, y, right, right], 2);
  const k = GAUSS.flatMap((a) => GAUSS.map((b) => (a * b) / 256));
  y = tf.conv2d(y, tf.tensor4d(k, [5, 5, 1, 1]), 1, 'valid');
  return tf.sub(1, tf.transpose(tf.squeeze(y, [3]), [1, 2, 0]));
}

const TF_OPS = {
  matmul: (s, a, b) => tf.matMul(a, b),
  softmax: (s, x) => tf.softmax(x),
  layernorm: (s, x) => { const m = tf.moments(x, -1, true);
    return tf.mul(tf.sub(x, m.mean), tf.rsqrt(tf.add(m.variance, 1e-5))); },
  conv2d: (s, x, w) => tf.conv2d(x, w, 1, 'same'),
  sum: (s, x) => tf.sum(x),
  blur: (s, x, w) => tf.depthwiseConv2d(x, w, 1, 'same'),
  attention: (s, q, k, v, mask) => tf.matMul(tf.softmax(tf.add(tf.mul(tf.matMul(q, k, false, true),
    s.scale), mask)), v),
  filters,
  digits: (s, p, w1, b1, w2, b2) => tf.softmax(tf.add(tf.matMul(tf.relu(tf.add(
    tf.matMul(tf.div(p, 16), w1), b1)), w2), b2)),
};

async function prepareTfjs(spec) {
  await tf.setBackend('webgpu');
  await tf.ready();
  const inputs = [];
  for (const input of spec.inputs) inputs.push(tf.tensor(await fetchF32(input.file), input.shape));
  const op = (...xs) => TF_OPS[spec.op](spec, ...xs);
  const backend = tf.backend();
  const dev = backend.device;
  state.peerAdapters.tfjs = describe(dev.adapterInfo);
  // one submit per run (TF.js otherwise submits every 15 dispatches), timed from that submit
  tf.env().set('WEBGPU_DEFERRED_SUBMIT_BATCH_SIZE', 1e9);
  let last = null;
  const run = async () => {
    if (last) last.dispose();
    last = tf.tidy(() => op(...inputs));
    const start = performance.now();
    backend.endComputePassEncoder();
    if (backend.commandEncoder) backend.submitQueue();
    await dev.queue.onSubmittedWorkDone();
    return performance.now() - start;
  };
  await run();
  const read = async () => { await run(); return last.data(); };
  const profile = await tf.profile(() => op(...inputs));
  const dispose = () => { tf.dispose([...inputs, last]); };
  return { run, gpu: stampedRun(dev, run), read, dispose, kernels: profile.kernels.length };
}

// ---- onnxruntime-web (WebGPU execution provider) -----------------------------------------------

async function prepareOrt(spec) {
  ort.env.wasm.wasmPaths = '/tfjs/onnxruntime-web/dist/';
  ort.env.wasm.numThreads = 1;
  const model = await fetchBytes(spec.model);
  // its own device, on the adapter it asks for (the page's kind: see requestAdapter above; a
  // device of ours in its WebGPU EP options runs, but its GPU-buffer inputs then fail: "no data
  // transfer registered" from device 0 to 1)
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['webgpu'], preferredOutputLocation: 'gpu-buffer' });
  const dev = await ort.env.webgpu.device;
  state.peerAdapters.ort = describe(dev.adapterInfo);
  const feeds = {};
  const made = [];
  for (const input of spec.inputs) {
    const data = await fetchF32(input.file);
    const buffer = dev.createBuffer({ size: Math.ceil(data.byteLength / 16) * 16,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    dev.queue.writeBuffer(buffer, 0, data);
    made.push(buffer);
    feeds[input.name] = ort.Tensor.fromGpuBuffer(buffer, { dataType: 'float32', dims: input.shape });
  }
  let last = null;
  const run = async () => {
    if (last) for (const t of Object.values(last)) t.dispose();
    const start = performance.now();
    last = await session.run(feeds);
    await dev.queue.onSubmittedWorkDone();
    return performance.now() - start;
  };
  const gpu = stampedRun(dev, run);
  await run();
  const read = async () => { await run(); return Object.values(last)[0].getData(); };
  const dispose = async () => {
    for (const t of Object.values(last)) t.dispose();
    await session.release();
    for (const b of made) b.destroy();
  };
  return { run, gpu, read, dispose, kernels: null };
}

// ---- the bench's calls -------------------------------------------------------------------------

const PREPARE = { program: prepareProgram, tfjs: prepareTfjs, ort: prepareOrt };

// Builds `system`'s run of row `key` and checks its output against numpy's (spec.ref).
async function prepare(key, spec) {
  try {
    const prepared = await PREPARE[spec.kind](spec);
    await prepared.run();   // warm-up: pipelines, first-run allocations
    const got = await prepared.read();
    const check = compare(got, await fetchF32(spec.ref), spec.rtol, spec.atol);
    state.prepared[key] = prepared;
    return { ...check, kernels: prepared.kernels, timestamps: Boolean(prepared.gpu) };
  } catch (error) {
    return { ok: false, error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

// reps runs of `key`: each one's wall ms (submit -> done), or with gpu its GPU timestamps'
// {ms, kernels_ms} (null where the system has none)
async function time(key, reps, gpu = false) {
  const times = [];
  const prepared = state.prepared[key];
  for (let i = 0; i < reps; i += 1) {
    if (!gpu) times.push(await prepared.run());
    else times.push(prepared.gpu ? await prepared.gpu() : null);
  }
  return times;
}

// Frees what a row's system holds on the GPU (buffers, TF.js tensors, the ORT-web session), so
// that a row is timed without the earlier rows' memory still allocated.
async function release(key) {
  const prepared = state.prepared[key];
  delete state.prepared[key];
  if (prepared) await prepared.dispose();
}

// A copy kernel moving `bytes` (read + write half each) on our device: its ms at best of reps.
async function copyMs(bytes, reps) {
  const dev = await device();
  const words = Math.ceil(bytes / 2 / 16);
  const code = `@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> b: array<vec4<f32>>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>,
    @builtin(num_workgroups) n: vec3<u32>) {
  let i = g.x + g.y * n.x * 64u;
  if (i < ${words}u) { b[i] = a[i]; }
}`;
  const usage = GPUBufferUsage.STORAGE;
  const a = dev.createBuffer({ size: words * 16, usage });
  const b = dev.createBuffer({ size: words * 16, usage });
  const pipeline = await dev.createComputePipelineAsync({ layout: 'auto',
    compute: { module: dev.createShaderModule({ code }), entryPoint: 'main' } });
  const group = dev.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [
    { binding: 0, resource: { buffer: a } }, { binding: 1, resource: { buffer: b } }] });
  const groups = Math.ceil(words / 64);
  const x = Math.min(groups, 65535);
  let best = Infinity;
  for (let i = 0; i < reps + 1; i += 1) {
    const encoder = dev.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(x, Math.ceil(groups / x));
    pass.end();
    const start = performance.now();
    dev.queue.submit([encoder.finish()]);
    await dev.queue.onSubmittedWorkDone();
    if (i > 0) best = Math.min(best, performance.now() - start);
  }
  a.destroy();
  b.destroy();
  return best;
}

// The submit floor: a program of `dispatches` trivial kernels (one thread storing one value),
// each in its own pass as the systems' programs are, timed as they are (after the same pause);
// every sample (ms).
async function floorMs(dispatches, reps, settleMs) {
  const dev = await device();
  const code = `@group(0) @binding(0) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(1) fn main() { b[0] = 1.0f; }`;
  const b = dev.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE });
  const pipeline = await dev.createComputePipelineAsync({ layout: 'auto',
    compute: { module: dev.createShaderModule({ code }), entryPoint: 'main' } });
  const group = dev.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [
    { binding: 0, resource: { buffer: b } }] });
  const samples = [];
  for (let i = 0; i < reps + 1; i += 1) {
    const encoder = dev.createCommandEncoder();
    for (let k = 0; k < dispatches; k += 1) {
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(1);
      pass.end();
    }
    await new Promise((done) => setTimeout(done, settleMs));
    const start = performance.now();
    dev.queue.submit([encoder.finish()]);
    await dev.queue.onSubmittedWorkDone();
    if (i > 0) samples.push(performance.now() - start);
  }
  b.destroy();
  return samples;
}

// The adapter's multiply-add peak: `groups` workgroups of 64 threads, each thread 8 independent
// vec4 chains of `steps` (x * m + c, in registers: no memory in the loop); best GFLOP/s of reps.
async function flopsPeak(groups, steps, reps) {
  const dev = await device();
  const code = `@group(0) @binding(0) var<storage, read_write> b: array<vec4<f32>>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let m = b[0]; let c = b[1];
  var a0 = b[2]; var a1 = a0 + c; var a2 = a1 + c; var a3 = a2 + c;
  var a4 = a3 + c; var a5 = a4 + c; var a6 = a5 + c; var a7 = a6 + c;
  for (var i = 0u; i < ${steps}u; i++) {
    a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
    a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
  }
  b[3u + g.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}`;
  const b = dev.createBuffer({ size: 16 * (3 + 64 * groups), usage: GPUBufferUsage.STORAGE |
    GPUBufferUsage.COPY_DST });
  dev.queue.writeBuffer(b, 0, new Float32Array([0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25,
    1, 1, 1, 1]));
  const pipeline = await dev.createComputePipelineAsync({ layout: 'auto',
    compute: { module: dev.createShaderModule({ code }), entryPoint: 'main' } });
  const group = dev.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [
    { binding: 0, resource: { buffer: b } }] });
  let best = Infinity;
  for (let i = 0; i < reps + 1; i += 1) {
    const encoder = dev.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(groups);
    pass.end();
    const start = performance.now();
    dev.queue.submit([encoder.finish()]);
    await dev.queue.onSubmittedWorkDone();
    if (i > 0) best = Math.min(best, performance.now() - start);
  }
  b.destroy();
  const flops = groups * 64 * steps * 8 * 4 * 2;
  return { ms: best, gflops: flops / best / 1e6 };
}

window.peers = { info, prepare, time, release, copyMs, floorMs, flopsPeak,
  // for the cold page (peers_cold.js): the same programs, checks and TF.js formulas
  parts: { device, describe, compare, fetchF32, fetchBytes, readBuffer, programBuffers,
    programKernels, programRun, TF_OPS } };
document.body.dataset.ready = 'true';
