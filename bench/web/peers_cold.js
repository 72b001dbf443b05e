// Cold first results for bench/peers_cold.py (issue 37): in a fresh browser (an empty shader
// cache), each system's first result of one row, timed from the start of its work to the
// result on the host and checked against numpy. warm() first readies every system without
// touching the row's kernels: its runtime booted, its device made, one unrelated op run, the
// row's inputs fetched and uploaded to its device (not timed); then first() times
//   kernelgen  kg.run of the row's program in its Pyodide worker: Python builds the graph and
//              compiles it (schedule, lower, render WGSL), the pipelines, the dispatches, the
//              readback, the result posted to the page; of that, python_ms its kernels'
//              compiles (cache_info's compile_s) and pipeline_ms the time any of its pipelines
//              was being built (web/gpu.js: the two overlap, as pipelines build while Python
//              compiles the next kernel)
//   tinygrad   its WGSL (compiled natively in CPython by bench/peers.py's worker, timed there):
//              shader modules and pipelines (all at once), the dispatches, the readback
//   tfjs       the row's TF.js formula and data()
//   ort        InferenceSession.create from the model's bytes, run, the output's data
// The programs, checks and TF.js formulas are bench/web/peers.js's (window.peers.parts).
import { createKernelgen } from '/web/kernelgen.js';

const parts = window.peers.parts;
const state = { kg: null, programs: {}, tf: null, ort: null, ortGpu: true };

// ---- warming up (not timed) ---------------------------------------------------------------------

async function warmKernelgen(spec, compatibility) {
  state.kg = await createKernelgen({ base: '/', webgpu: true, compatibility });
  const r = await state.kg.run(spec.setup, { device: 'WEBGPU', timings: false });
  return { adapter: state.kg.info.gpu?.adapter || null, warm: Array.from(r.data).slice(0, 4) };
}

async function warmTinygrad(spec) {
  state.programs.tinygrad = await parts.programBuffers(spec);
  await state.programs.tinygrad.dev.queue.onSubmittedWorkDone();
  return {};
}

async function warmTfjs(spec) {
  await tf.setBackend('webgpu');
  await tf.ready();
  await tf.floor(tf.tensor1d([1.5, 2.5])).data();   // an op no row uses
  const inputs = [];
  for (const input of spec.inputs) {
    inputs.push(tf.tensor(await parts.fetchF32(input.file), input.shape));
  }
  const backend = tf.backend();
  for (const t of inputs) backend.uploadToGPU(t.dataId);
  backend.endComputePassEncoder();
  if (backend.commandEncoder) backend.submitQueue();
  await backend.device.queue.onSubmittedWorkDone();
  state.tf = inputs;
  return { adapter: parts.describe(backend.device.adapterInfo) };
}

async function warmOrt(spec) {
  ort.env.wasm.wasmPaths = '/tfjs/onnxruntime-web/dist/';
  ort.env.wasm.numThreads = 1;
  const warm = await ort.InferenceSession.create(await parts.fetchBytes(spec.warm_model),
    { executionProviders: ['webgpu'] });
  await warm.run({ in0: new ort.Tensor('float32', new Float32Array([1.5]), [1]) });
  state.ortWarm = warm;    // kept: its WebGPU device holds the inputs below
  const dev = await ort.env.webgpu.device;
  const feeds = {};
  for (const input of spec.inputs) {
    const data = await parts.fetchF32(input.file);
    const buffer = dev.createBuffer({ size: Math.ceil(data.byteLength / 16) * 16,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    dev.queue.writeBuffer(buffer, 0, data);
    feeds[input.name] = ort.Tensor.fromGpuBuffer(buffer,
      { dataType: 'float32', dims: input.shape });
  }
  await dev.queue.onSubmittedWorkDone();
  state.ort = { feeds, model: await parts.fetchBytes(spec.model) };
  return { adapter: parts.describe(dev.adapterInfo) };
}

const WARM = { kernelgen: warmKernelgen, tinygrad: warmTinygrad, tfjs: warmTfjs, ort: warmOrt };

// Readies `system` for its first result of the row (spec: bench/peers_cold.py's).
async function warm(system, spec, compatibility) {
  try {
    return { ok: true, ...await WARM[system](spec, compatibility) };
  } catch (error) {
    return { ok: false, error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

// ---- the first result (timed) -------------------------------------------------------------------

async function firstKernelgen(spec) {
  const start = performance.now();
  const r = await state.kg.run(spec.run, { device: 'WEBGPU', timings: false });
  return { ms: performance.now() - start, data: r.data, worker_s: r.seconds,
    kernels: r.compiled, python_ms: r.compile_s * 1000, pipeline_ms: r.pipelineBusyMs,
    pipeline_sum_ms: r.pipelineMs };
}

async function firstTinygrad() {
  const loaded = state.programs.tinygrad;
  const { dev, program, buffers } = loaded;
  const start = performance.now();
  const kernels = await parts.programKernels(loaded);
  await parts.programRun(dev, kernels)();
  const out = program.buffers[program.output];
  const data = await parts.readBuffer(dev, buffers[program.output], out.bytes);
  return { ms: performance.now() - start, data, kernels: kernels.length };
}

async function firstTfjs(spec) {
  const start = performance.now();
  const out = tf.tidy(() => parts.TF_OPS[spec.op](spec, ...state.tf));
  const data = await out.data();
  const ms = performance.now() - start;
  out.dispose();
  return { ms, data };
}

async function firstOrt() {
  const start = performance.now();
  const session = await ort.InferenceSession.create(state.ort.model,
    { executionProviders: ['webgpu'] });
  const outs = await session.run(state.ort.feeds);
  const data = await Object.values(outs)[0].getData();
  return { ms: performance.now() - start, data };
}

const FIRST = { kernelgen: firstKernelgen, tinygrad: firstTinygrad, tfjs: firstTfjs,
  ort: firstOrt };

// `system`'s first result of the row, timed, and its check against numpy's (spec.ref).
async function first(system, spec) {
  try {
    const { data, ...got } = await FIRST[system](spec);
    const check = parts.compare(data, await parts.fetchF32(spec.ref), spec.rtol, spec.atol);
    return { ...got, ...check };
  } catch (error) {
    return { ok: false, error: `${error.name || 'Error'}: ${error.message}`.slice(0, 400) };
  }
}

window.cold = { warm, first };
document.body.dataset.cold = 'true';
