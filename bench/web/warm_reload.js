// First results for bench/warm_reload.py (issue 37): kernelgen's (its Pyodide worker booted, then
// the Models view's loadModel + runModel of an ONNX model, or the editor's kg.run of a program)
// and onnxruntime-web's (wasm: InferenceSession.create + run), each timed from the start of its
// work to its output on the page; then steady calls. The driver loads this page on a fresh
// profile (cold) and reloads it (warm: kernelgen's store, IndexedDB, from the first load).
import { createKernelgen } from '/web/kernelgen.js';

const state = { kg: null, kgRun: null, session: null, feeds: null };

async function fetchBytes(url) {
  return new Uint8Array(await (await fetch(url)).arrayBuffer());
}

async function timed(fn) {
  const start = performance.now();
  const value = await fn();
  return [performance.now() - start, value];
}

// kernelgen's first result: boot (Pyodide, the wheel, the store read), then the model's load
// (its WGSL and PTX: compiled, or from the store) and first run, or the program's first run.
async function kgFirst(spec, compatibility) {
  const start = performance.now();
  const options = { base: '/', webgpu: true, compatibility };
  if (spec.prebuild !== null) options.prebuild = spec.prebuild;   // null: the default
  state.kg = await createKernelgen(options);
  const booted = performance.now();
  let load = { ms: 0 };
  if (spec.model) {
    const [ms, model] = await timed(async () => state.kg.loadModel(await fetchBytes(spec.model)));
    load = { ms, stored: Boolean(model.stored), kernels: model.wgsl.kernels.length };
    const x = await fetchBytes(spec.input);
    const inputs = { [model.inputs[0].name]: x };
    state.kgRun = async () => (await state.kg.runModel({ device: 'WEBGPU', inputs }));
  } else {
    state.kgRun = async () => state.kg.run(spec.code, { device: 'WEBGPU', timings: false });
  }
  const ran = performance.now();
  const r = await state.kgRun();
  const done = performance.now();
  await state.kg.call('info');   // the worker idle: the store written
  const data = spec.model ? r.outputs[0].data : r.data;
  return { ms: done - start, boot_ms: booted - start, load_ms: load.ms, run_ms: done - ran,
    since_navigation_ms: done, load_stored: load.stored ?? null, compiled: r.compiled,
    stored: r.stored, compile_ms: (r.compile_s || 0) * 1000, worker_ms: r.seconds * 1000,
    pipeline_ms: r.pipeline_busy_ms ?? r.pipelineBusyMs, adapter: state.kg.info.gpu?.adapter,
    phases: state.kg.info.phases ?? null, prebuilt: await prebuilt(),
    data: Array.from(data, Number) };
}

// The boot's prebuild (worker.js prebuildStored: pipelines started, builds, pipelines held), or
// null where the worker has no such command (an older site).
async function prebuilt() {
  try {
    const info = await state.kg.call('prebuilt');
    return { started: info.started.length, builds: info.builds, pipelines: info.pipelines };
  } catch {
    return null;
  }
}

// onnxruntime-web (wasm, one thread): the session made from the model's bytes, run, the output.
async function ortFirst(spec) {
  ort.env.wasm.wasmPaths = '/tfjs/onnxruntime-web/dist/';
  ort.env.wasm.numThreads = 1;
  const bytes = await fetchBytes(spec.model);
  const x = new Float32Array((await fetchBytes(spec.input)).buffer);
  const start = performance.now();
  state.session = await ort.InferenceSession.create(bytes, { executionProviders: ['wasm'] });
  state.feeds = { [spec.name]: new ort.Tensor('float32', x, spec.shape) };
  const outs = await state.session.run(state.feeds);
  const data = await outs[state.session.outputNames[0]].getData();
  return { ms: performance.now() - start, data: Array.from(data, Number) };
}

// `reps` more calls of what the first result ran: each one's ms, and the last output.
async function steady(system, reps) {
  const times = [];
  let data = null;
  for (let i = 0; i < reps; i += 1) {
    const start = performance.now();
    if (system === 'kernelgen') {
      const r = await state.kgRun();
      data = r.outputs ? r.outputs[0].data : r.data;
    } else {
      const outs = await state.session.run(state.feeds);
      data = await outs[state.session.outputNames[0]].getData();
    }
    times.push(performance.now() - start);
  }
  return { times, data: Array.from(data, Number) };
}

async function guard(fn) {
  try {
    return { ok: true, ...await fn() };
  } catch (error) {
    return { ok: false, error: `${error.name || error.type || 'Error'}: ${error.message}`
      .slice(0, 400) };
  }
}

window.warm = {
  kgFirst: (spec, compat) => guard(() => kgFirst(spec, compat)),
  ortFirst: (spec) => guard(() => ortFirst(spec)),
  steady: (system, reps) => guard(() => steady(system, reps)),
};
document.body.dataset.ready = 'true';
