// ONNX model inference for bench/onnx_models.py: kernelgen (its Pyodide worker and WebGPU
// device, through the embedding API) and onnxruntime-web's WebGPU backend, in one page on one
// adapter. Playwright calls the functions on window.bench, interleaving the two; each returns
// plain data (the output's values, wall and GPU milliseconds, per-kernel GPU times).
import { createKernelgen } from '/web/kernelgen.js';
import * as ort from '/npm/onnxruntime-web/dist/ort.webgpu.min.mjs';

const state = { kg: null, session: null, feeds: null, input: null, name: null, kernels: [],
  compatibility: false };

// The adapter both use: compatibility mode where only that is offered (lavapipe via ANGLE).
async function adapterInfo(compatibility) {
  const adapter = await navigator.gpu.requestAdapter(compatibility
    ? { featureLevel: 'compatibility' } : {});
  if (!adapter) return null;
  const info = adapter.info || {};
  return { adapter, name: `${info.vendor || ''} ${info.architecture || ''} ${info.description || ''}`
    .trim(), timestamps: adapter.features.has('timestamp-query') };
}

// kernelgen: boot the worker (not timed: the page's boot), then file bytes -> first result.
async function kgFirst(bytes, input, compatibility) {
  state.kg ||= await createKernelgen({ base: '/', webgpu: true, compatibility });
  const start = performance.now();
  const model = await state.kg.loadModel(new Uint8Array(bytes), { arch: 'sm_80' });
  const loaded = performance.now();
  state.name = model.inputs[0].name;
  state.input = new Uint8Array(new Float32Array(input).buffer);
  const run = await state.kg.runModel({ device: 'WEBGPU', inputs: { [state.name]: state.input } });
  const end = performance.now();
  return { firstMs: end - start, loadMs: loaded - start, runMs: end - loaded,
    kernels: model.wgsl.kernels.length, adapter: state.kg.info.gpu?.adapter || null,
    output: Array.from(run.outputs[0].data), shape: run.outputs[0].shape };
}

// kernelgen, one more inference: wall time (Python builds the lazy graph, finds the cached
// kernels, uploads the input, dispatches, reads back) and the kernels' GPU timestamps.
async function kgRun() {
  const start = performance.now();
  const run = await state.kg.runModel({ device: 'WEBGPU', inputs: { [state.name]: state.input } });
  const wallMs = performance.now() - start;
  const timings = run.timings || [];
  return { wallMs, gpuMs: timings.length ? timings.reduce((s, t) => s + t.ms, 0) : null,
    kernels: timings, output: Array.from(run.outputs[0].data) };
}

// onnxruntime-web: session (WebGPU EP) from the file's bytes, then the first result.
async function ortFirst(bytes, input, compatibility) {
  ort.env.wasm.wasmPaths = '/npm/onnxruntime-web/dist/';
  ort.env.wasm.numThreads = 1;
  const picked = await adapterInfo(compatibility);
  if (picked) ort.env.webgpu.adapter = picked.adapter;
  ort.env.webgpu.profiling = { mode: picked?.timestamps ? 'default' : 'off',
    ondata: (d) => state.kernels.push({ name: `${d.kernelType} ${d.programName}`,
      ms: Number(d.endTime - d.startTime) / 1e6 }) };
  const start = performance.now();
  state.session = await ort.InferenceSession.create(new Uint8Array(bytes),
    { executionProviders: ['webgpu'], graphOptimizationLevel: 'all' });
  const created = performance.now();
  const name = state.session.inputNames[0];
  const shape = state.session.inputMetadata?.[0]?.shape?.map((d) => (typeof d === 'number' ? d : 1));
  state.feeds = { [name]: new ort.Tensor('float32', new Float32Array(input), shape) };
  const out = await ortOutput();
  const end = performance.now();
  return { firstMs: end - start, loadMs: created - start, runMs: end - created,
    adapter: picked?.name || null, output: out, ort: ort.env.versions?.web || null };
}

async function ortOutput() {
  const results = await state.session.run(state.feeds);
  const tensor = results[state.session.outputNames[0]];
  const data = Array.from(await tensor.getData());
  tensor.dispose?.();
  return data;
}

// onnxruntime-web, one more inference: wall time to the output on the CPU. (Kernel GPU times
// would come from the JSEP profiler's ondata; 1.31's WebGPU bundle is the C++ EP, which does
// not call it, so gpuMs stays null.)
async function ortRun() {
  state.kernels = [];
  const start = performance.now();
  const output = await ortOutput();
  const wallMs = performance.now() - start;
  await new Promise((resolve) => setTimeout(resolve, 50));  // profiler callbacks settle
  const kernels = state.kernels;
  return { wallMs, gpuMs: kernels.length ? kernels.reduce((s, k) => s + k.ms, 0) : null,
    kernels, output };
}

window.bench = { kgFirst, kgRun, ortFirst, ortRun };
document.body.dataset.ready = 'true';
