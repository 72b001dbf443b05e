// The phases of an exported bundle's warm call in the page, for bench/call_phases.py: the
// bundle's model.js called as a page calls it (typed arrays in, outputs back), its device's
// queue and readback wrapped to stamp each WebGPU call with performance.now() (this page's
// instrumentation, nothing in model.js), and beside it the adapter's floors: one copy and one
// map (no dispatch), and K trivial dispatches (one thread storing one value) with that copy and
// map. Playwright calls window.phases.*; each returns plain data.
import { describe, largestLimits } from './bench_device.js';

const ARRAYS = { float32: Float32Array, float16: Uint16Array, int32: Int32Array,
  uint32: Uint32Array, int64: BigInt64Array, uint8: Uint8Array, bool: Uint8Array };
const TRIVIAL = '@group(0) @binding(0) var<storage, read_write> b: array<f32>;\n' +
  '@compute @workgroup_size(1) fn k() { b[0] = 1.0f; }\n';
const state = { device: null, bundles: {}, marks: [], floor: null };
const compat = new URL(location.href).searchParams.has('compat');

async function device() {
  if (state.device) return state.device;
  const adapter = await navigator.gpu.requestAdapter(compat ? { featureLevel: 'compatibility' }
    : {});
  const stamps = adapter.features.has('timestamp-query') ? ['timestamp-query'] : [];
  state.device = await adapter.requestDevice({ requiredLimits: largestLimits(adapter),
    requiredFeatures: stamps });
  state.adapter = describe(adapter.info);
  return state.device;
}

// obj[name] stamped: [tag, start, end] into state.marks (and '<tag> done' when its promise is)
function stamp(obj, name, tag) {
  const call = obj[name].bind(obj);
  obj[name] = (...args) => {
    const start = performance.now();
    const result = call(...args);
    state.marks.push([tag, start, performance.now()]);
    result?.then?.(() => state.marks.push([`${tag} done`, start, performance.now()]), () => {});
    return result;
  };
}

function floors(dev) {
  const rb = dev.createBuffer({ size: 8,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const src = dev.createBuffer({ size: 8,
    usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.STORAGE });
  const module = dev.createShaderModule({ code: TRIVIAL });
  const pipeline = dev.createComputePipeline({ layout: 'auto', compute: { module,
    entryPoint: 'k' } });
  const group = dev.createBindGroup({ layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: src } }] });
  return { rb, src, pipeline, group };
}

// Loads the bundle at base as `key` (its inputs from files: [{name, dtype, file}], the outputs
// a call reads: read), warmed up by `warm` calls: {adapter, kernels, timestamps}.
async function prepare(key, base, files, read, warm) {
  const dev = await device();
  const { load } = await import(`${base}model.js`);
  const model = await load({ device: dev, base });
  const inputs = {};
  for (const f of files) {
    inputs[f.name] = new ARRAYS[f.dtype](await (await fetch(f.file)).arrayBuffer());
  }
  for (let i = 0; i < warm; i += 1) await model.run(inputs, { outputs: read });
  if (!state.floor) {
    stamp(dev.queue, 'writeBuffer', 'write');
    stamp(dev.queue, 'submit', 'submit');
    state.floor = floors(dev);
  }
  stamp(model.readback, 'mapAsync', 'map');
  state.bundles[key] = { model, inputs, read, base };
  return { adapter: state.adapter, kernels: model.steps.length,
    timestamps: dev.features.has('timestamp-query') };
}

// one warm call of bundle `key`: its wall ms and phases (ms): before (run() to submit: checks,
// writes, encoding), submit (the submit call itself), wait (submit's return to the readback
// mapped), after (mapped to run()'s result), and what model.calls counted
async function bundleCall(key) {
  const { model, inputs, read } = state.bundles[key];
  state.marks = [];
  const start = performance.now();
  await model.run(inputs, { outputs: read });
  const ms = performance.now() - start;
  const first = (tag) => state.marks.find((m) => m[0] === tag);
  const submit = first('submit');
  const mapped = first('map done');
  return { ms, before: submit[1] - start, submit: submit[2] - submit[1],
    wait: mapped[2] - submit[2], after: start + ms - mapped[2], calls: { ...model.calls } };
}

async function trivial(k) {
  const { rb, src, pipeline, group } = state.floor;
  const dev = state.device;
  const start = performance.now();
  const encoder = dev.createCommandEncoder();
  if (k) {
    const pass = encoder.beginComputePass();
    for (let d = 0; d < k; d += 1) {
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(1);
    }
    pass.end();
  }
  encoder.copyBufferToBuffer(src, 0, rb, 0, 8);
  dev.queue.submit([encoder.finish()]);
  await rb.mapAsync(GPUMapMode.READ);
  rb.unmap();
  return { ms: performance.now() - start };
}

// One of each case in `order` (a bundle's key, or 'K dispatches': K trivial dispatches, then
// the copy and the map), each after a pause of settleMs: {case: {ms, ...}}.
async function round(order, settleMs) {
  const out = {};
  for (const c of order) {
    await new Promise((resolve) => setTimeout(resolve, settleMs));
    out[c] = c in state.bundles ? await bundleCall(c) : await trivial(parseInt(c, 10));
  }
  return out;
}

// Bundle `key` loaded again with a timestamped pass per kernel: the best of `runs` runs' total
// GPU ms and its kernels [{name, ms}], or null without timestamp queries.
async function gpuTimes(key, runs) {
  const dev = await device();
  if (!dev.features.has('timestamp-query')) return null;
  const { base, inputs, read } = state.bundles[key];
  const { load } = await import(`${base}model.js`);
  const model = await load({ device: dev, base, timings: true });
  let best = null;
  try {
    for (let i = 0; i < runs; i += 1) {
      await model.run(inputs, { outputs: read });
      const total = model.timings.reduce((s, t) => s + t.ms, 0);
      if (!best || total < best.total) best = { total, kernels: model.timings };
    }
  } finally {
    model.destroy();
  }
  return best;
}

window.phases = { prepare, round, gpuTimes };
document.body.dataset.ready = 'true';
