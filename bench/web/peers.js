// Bench-only runners for bench/peers.py: kernelgen's and tinygrad's compiled WGSL (programs of
// kernels, buffers and launch sizes written by bench/peers.py) on one WebGPU device of ours, and
// TF.js and onnxruntime-web on theirs. Every system's GPU time of one run is measured the same
// way: from the first submit to the queue's onSubmittedWorkDone, inputs already on the GPU,
// outputs left there. prepare() also reads the output once and compares it with numpy's.
// Playwright calls window.peers.*; each returns plain data.

const state = { device: null, adapterInfo: null, prepared: {} };

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

async function device() {
  if (state.device) return state.device;
  const found = await adapter();
  const limits = {};
  for (const key of ['maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX',
    'maxComputeWorkgroupSizeY', 'maxComputeWorkgroupSizeZ', 'maxStorageBuffersPerShaderStage',
    'maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupStorageSize']) {
    limits[key] = found.limits[key];
  }
  state.device = await found.requestDevice({ requiredLimits: limits });
  const info = found.info || {};
  state.adapterInfo = { vendor: info.vendor, architecture: info.architecture, device: info.device,
    description: info.description, isFallbackAdapter: Boolean(info.isFallbackAdapter),
    featureLevel: found.featureLevel || null };
  return state.device;
}

async function info() {
  await device();
  return state.adapterInfo;
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

async function prepareProgram(spec) {
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
  const kernels = [];
  for (const k of program.kernels) {
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
    const pipeline = await dev.createComputePipelineAsync({
      layout: dev.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: k.entry } });
    const groupEntries = k.bindings.map(([binding, index]) => ({ binding,
      resource: { buffer: buffers[index] } }));
    if (uniform) groupEntries.push({ binding: k.uniform.binding, resource: { buffer: uniform } });
    const bindGroup = dev.createBindGroup({ layout, entries: groupEntries });
    const error = await dev.popErrorScope();
    if (error) throw new Error(`kernel ${k.entry}: ${error.message}`.slice(0, 400));
    kernels.push({ pipeline, bindGroup, dispatch: k.dispatch });
  }
  const run = async () => {
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
  const out = program.buffers[program.output];
  const read = () => readBuffer(dev, buffers[program.output], out.bytes);
  const dispose = () => { for (const b of buffers) b.destroy(); };
  return { run, read, dispose, kernels: kernels.length };
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
  return { run, read, dispose, kernels: profile.kernels.length };
}

// ---- onnxruntime-web (WebGPU execution provider) -----------------------------------------------

async function prepareOrt(spec) {
  ort.env.wasm.wasmPaths = '/tfjs/onnxruntime-web/dist/';
  ort.env.wasm.numThreads = 1;
  const model = await fetchBytes(spec.model);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['webgpu'], preferredOutputLocation: 'gpu-buffer' });
  const dev = await ort.env.webgpu.device;
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
  await run();
  const read = async () => { await run(); return Object.values(last)[0].getData(); };
  const dispose = async () => {
    for (const t of Object.values(last)) t.dispose();
    await session.release();
    for (const b of made) b.destroy();
  };
  return { run, read, dispose, kernels: null };
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
    return { ...check, kernels: prepared.kernels };
  } catch (error) {
    return { ok: false, error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

async function time(key, reps) {
  const times = [];
  for (let i = 0; i < reps; i += 1) times.push(await state.prepared[key].run());
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

window.peers = { info, prepare, time, release, copyMs, floorMs };
document.body.dataset.ready = 'true';
