// A kernelgen WebGPU bundle's loader (written as DIR/model.js by kg.export): runs the exported
// program's WGSL kernels on WebGPU. An ES module with no dependencies (but generate(), which
// loads generate.js from next to it); the bundle's other files sit next to it: manifest.json,
// a .wgsl per distinct kernel, weights.safetensors, generate.js.
// One concept, the bundle's loader, and one file on purpose (a page copies model.js next to its
// bundle and imports it alone), so it runs past 500 lines.
//
//   import { load } from './DIR/model.js';
//   const model = await load({ device });   // device optional: share the page's GPUDevice
//   model.inputs; model.outputs;            // [{name, shape, dtype}]
//   const out = await model.run({ x: new Float32Array(64) });   // {y: Float32Array, ...}
//   model.destroy();
//
// `load({ device, timings: true })` also times each kernel on the GPU (timestamp queries, where
// the device has 'timestamp-query'): after each run, model.timings is [{name, ms}].
// model.workgroups: the workgroups the last run launched (a symbolic size launches only those
// its bound value needs). model.calls: what the last run asked of WebGPU, {submits (1),
// dispatches (one per kernel), writes (writeBuffer: the inputs, and the dims' values when they
// change), copies (state kept on the GPU), reads (outputs read back), maps (mapAsync: 1, all the
// outputs read back share one buffer; 0 when none is asked for)}.
//
// Limits: a bundle exported for more than WebGPU's default limits (kg.export(...,
// max_storage_buffers=32): fewer, wider kernels) lists them in manifest.limits; load() asks the
// adapter for them (an Error where it cannot give them), and a device passed in must have them.
//
// Symbolic sizes (kg.Dim): manifest.dims lists each dim with its range; an input whose shape has
// one (its symbolic_shape) takes any length in range, which gives the dim's value; the kernels
// take the values as uniforms and the outputs come back at the bound sizes. A length out of range
// is an Error naming the dim and its range.
//
// Buffers, bind groups and each kernel's pipeline are made once, in load(); a symbolic kernel's
// variants (the same kernel for small bound values) are built later, in the background, once
// runs ask for them (see Model.pick), or all at once by `await model.buildVariants()`;
// model.pipelines is {built, total}. run() writes the inputs,
// dispatches every kernel in one compute pass, and reads the outputs back. Intermediate buffers
// share storage as the manifest plans it. Every failure is an Error saying what to do.
//
// State (manifest.state, kg.export(..., state=)): inputs the model keeps between runs, such as a
// KV cache. The caller passes none of them; after each run the paired output's rows are copied
// into the state's buffer on the GPU; model.reset() empties them. A fixed state (dim null: a
// recurrent model's hidden state of one shape) is copied whole and starts as zeros. `run(inputs, { outputs })`
// reads back only the outputs named. A causal LM bundle (state, input ids, output logits) has
// `generate(promptIds, { maxNewTokens, temperature, topK, topP, seed, stop, onToken, signal })`:
// prefill, then one step per token, the token drawn on the GPU where the bundle has a `token`
// output (only its id read back); see generate.js.

// dtype -> the typed array run() takes and returns (float16: raw bits, or a Float16Array)
const ARRAYS = {
  float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int16: Int16Array,
  uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array,
};

function fail(message) {
  throw new Error(`kernelgen model: ${message}`);
}

const roundUp4 = (n) => Math.max(4, Math.ceil(n / 4) * 4);
const roundUp8 = (n) => Math.max(8, Math.ceil(n / 8) * 8);
// The workgroups a kernel needs under the dims' values: its dispatch, the first dimension cut
// to ceil(need / per) where it has a run-time grid ([[terms, const, per, unit?]]), need being
// const + sum(c * dim) rounded up to a multiple of unit (1 where absent).
function gridDispatch(dispatch, grid, values) {
  if (!grid?.length) return dispatch;
  const [terms, c, per, unit = 1] = grid[0];
  if (terms.some(([name]) => !(name in values))) return dispatch;
  const sum = terms.reduce((total, [name, k]) => total + k * values[name], c);
  const need = Math.ceil(sum / unit) * unit;
  return [Math.min(dispatch[0], Math.max(1, Math.ceil(need / per))), ...dispatch.slice(1)];
}

// Whether variant `v` (its dim, most, exact) serves the dims' `values`: the dim bound to at most
// `most`, and exactly `most` where the variant is pinned to that value (`exact`: its stores are
// gated by dim == most, so at another value it writes nothing): uop/program.py `serves`.
const serves = (v, values) => values[v.dim] <= v.most && (!v.exact || values[v.dim] === v.most);

// Every kernel of the manifest followed by its variants (lowering/variants.py: the same kernel
// for small bound values of a dim, run where the value is at most `most`), each variant with its
// kernel's bindings and uniforms: the pipelines to make, the source files to fetch.
const withVariants = (kernels) => kernels.flatMap((k) => [k,
  ...(k.variants || []).map((v) => ({ ...k, grid: undefined, variants: undefined, ...v }))]);
// When a variant not built yet is built (ski rental; the same rule as the page's runtime,
// runtime/webgpu_browser.py DEFAULT_MS_PER_BYTE): until it is built, the kernel runs its values
// (renting); once the time its runs took reaches the variant's build cost, it is built (buying).
// - cost: the variant's WGSL bytes x the build rate (buildRate): the time the background builds
//   so far added to the runs they overlapped, per source byte: each run during a build against
//   the time per work (workOf) of the last run of its like (the same pipelines and outputs) with
//   no build under way. That is what a build costs the runs, not its own wall time: a driver
//   that compiles on another thread builds beside the runs, one that compiles on the runs'
//   thread holds them up (measure). Before any background build was measured: the wall time
//   this model was busy building pipelines per source byte (load()'s: msPerByte), or
//   DEFAULT_MS_PER_BYTE;
// - lost: at each read, the run's wall time is shared out among its kernels by their estimated
//   work at the bound values (the manifest's `work`: multiply-adds or outputs, times the padding
//   their grid launches there: whole tiles at small values; workOf) under the launch that runs: a
//   built variant's own grid, so a variant built for small values counts its own work, not its
//   kernel's padding, and does not absorb the charge of the unbuilt variants beside it (issue 37).
//   A built variant's work counts at its measured rate (time per work, the kernels' being 1:
//   rate): at the first read no build overlapped that takes it where the last such read of the
//   same shape took its kernel, its runs took what the kernel's did then less the time saved (a
//   variant of the same work at a value, without padding to save, runs ~10x faster on lavapipe:
//   counted at its work it kept the charge of the unbuilt ones beside it). Each variant asked for
//   is charged the share of the kernels that ran in its place: their own time, the most it could
//   save (an upper bound; a run of one kernel charges its whole time). Charged the run's whole
//   time each, the variants of every layer's matmuls that one 128-token prefill asks for were all
//   bought in its first rounds, and their builds slowed SwiftShader's decode (5.0 tok/s, 8.6 once
//   settled); shared out equally, the prefill's were never bought (issue 37). So the charges of
//   one run add up to at most its time, and a variant whose kernels are most of a run is bought
//   first;
// - at a read, a variant charged its cost or more is queued (one up to its dim's top at the first
//   read that asks for it: a one-off kernel's own capped tile, whose kernel is the cheapest to
//   build for the first result, lowering/cheap_first.py); the builds start after a
//   read, one at a time, the shortest first (startBuilds). So a build costs at most the time
//   already lost (at most twice the best choice made knowing the future), and a value asked
//   once for a short run builds nothing.
// Measured (bench/lm_page.py smollm2-135m q4, 2 layers, 128-token prompt, 32 tokens, 6 rounds,
// A/B against the whole-run rule in turn, wall ms, loaded machine): SwiftShader decode 6.9-14.5 s
// per 31 tokens against 12.9-19.3, prefill 1.1-1.6 s against 1.7-3.7 (load 4-8); lavapipe
// decode alike (2.0-3.0 s against 1.7-2.6) but its prefill's 7 variants (365-396 KB each, 7-23 %
// of the prefill's work each) not bought in 7 prompts: 0.6-1.1 s against 0.18-0.23 once the
// whole-run rule bought them (load 3-5): open, issue 37 asks them bought in 1-3 prompts.
// Priced at what the builds cost the runs (measure) instead of their wall time, the same bench
// A/B against main's whole-run rule in turn: the background builds held SwiftShader's runs up about
// as long as they took (0.059 ms per byte measured against 0.066 wall, load 18), lavapipe's less
// (0.015 against 0.027 at load 18, 0.006 against 0.025 at load 12): lavapipe's decode variants
// bought in 1-3 prompts, its prefill's biggest two (each charged ~0.2 s a prompt at 2 s) due
// about the 7th prompt, the others later: their shares of the prefill's work undercount their
// time (the LM head's variant, built, keeps ~75 % of the work), so lavapipe's prefill stays at
// 2.9-5.4 s against main's 1.5-2.1 from its 3rd prompt (load 10-12): open. SwiftShader: prefill
// 5.6-11.9 s, decode 1.1-2.3 tok/s against main's 12-28 s and 0.7-1.0 (load 18-22).
// Logged in lavapipe's 128-token prefill (--last-logits: its LM head is static, so main's shares
// are the same there): the 7 variants asked for hold 89 % of the work, 22 % each the two
// 1536-wide, bought by the 3rd prompt; built, they counted 44 % of the work while running
// faster: measured, their rate came out 0.28-0.34 (load 11), so the others' shares rise. Whether
// the prefill's variants are bought in 1-3 prompts still turns on the build rate measured first:
// 0.001 ms per byte (all 7 bought at the first prompt; prefill 0.5-0.6 s from the 4th, load 11)
// or 0.006-0.011 (the two by the 3rd, the rest later); A/B runs against main (load 10-16) fall
// within that spread either way.
// Before (a flat 2 asks per multiple of the kernel's source length), bench/lm_page.py's q4
// 128-token prefill on lavapipe ran 369 tokens/s for 20 prompts where its variants run 927.
// 20 ms per KB: SwiftShader's ~300 KB (9,000-line) 128-row matmul variants take 4-10 s
const DEFAULT_MS_PER_BYTE = 0.02;
// The least share of its steps' time a built variant is measured to take (rate)
const RATE_FLOOR = 0.02;
// A step's estimated work at the dims' `values`: its manifest `work` factors ([terms, const],
// each const + sum(c * dim)) multiplied, times the padding its run-time grid launches there
// (the workgroups' share of the grid over what the values need: whole tiles of padding at small
// values, what its variants save); where it has none, or a dim is not bound, the threads it
// launches there (uop/program.py launch_work)
function workOf(step, values) {
  const affine = ([terms, c]) => terms.reduce((sum, [name, k]) => sum + k * values[name], c);
  const bound = (terms) => terms.every(([name]) => name in values);
  const launched = gridDispatch(step.dispatch, step.grid, values);
  if (step.work?.length && step.work.every(([terms]) => bound(terms))) {
    const work = step.work.reduce((acc, f) => acc * Math.max(1, affine(f)), 1);
    const [terms, c, per] = step.grid?.[0] || [[], 0, 0];
    const need = affine([terms, c]);
    return step.grid?.length && bound(terms)
      ? work * Math.max(1, launched[0] * per / Math.max(need, 1)) : work;
  }
  return launched[0] * launched[1] * launched[2] * step.threads;
}
// what a launch's pipeline depends on: its source file, entry point, bindings and uniforms
const pipelineKey = (k) => JSON.stringify([k.file, k.entry_point, k.features,
  k.bindings.map((b) => [b.slot, b.access]), (k.uniforms || []).length]);
const uniformSlot = (kernel) => Math.max(-1, ...kernel.bindings.map((b) => b.slot)) + 1;
// a symbolic_shape entry (an int, or {terms: [[dim, coefficient]], const, div?}) at the dims'
// values: floor((const + sum(c * dim)) / div) (div only on a floored size, as x[::2] has)
const sizeOf = (s, values) => (typeof s === 'number' ? s
  : Math.floor(s.terms.reduce((acc, [name, c]) => acc + c * values[name], s.const) / (s.div ?? 1)));

// `data` (row-major, logical `shape`) at the front of each axis of `phys`, or back (`back`)
function relayout(data, shape, phys, back) {
  const out = new data.constructor(count(back ? shape : phys));
  const copy = (src, dst, axis, si, di) => {
    const inner = count(shape.slice(axis + 1));
    const pinner = count(phys.slice(axis + 1));
    if (axis === shape.length - 1 || shape.slice(axis + 1).every((n, k) => n === phys[axis + 1 + k])) {
      const n = shape[axis] * inner;
      if (back) out.set(src.subarray(di, di + n), si);
      else out.set(src.subarray(si, si + n), di);
      return;
    }
    for (let i = 0; i < shape[axis]; i++) copy(src, dst, axis + 1, si + i * inner, di + i * pinner);
  };
  if (shape.length) copy(data, out, 0, 0, 0);
  return out;
}
const count = (shape) => shape.reduce((a, b) => a * b, 1);
const describe = (specs) => specs.map((s) => `${s.name} (${s.dtype} [${s.shape}])`).join(', ');

// The URL of `name`, a file the manifest names, inside the bundle folder `folder`: a plain relative
// path (no scheme, no leading '/' or '\\', no '..', '.', '%', '?' or '#' that could lead out), so
// a manifest cannot make the loader fetch from another folder or origin; the folder (and so its
// origin) is the one the caller chose with `base`.
function inFolder(folder, name, what) {
  const plain = typeof name === 'string' && name.length > 0 &&
    !/^[a-z][a-z0-9+.-]*:|^[\\/]|[\\?#%]/i.test(name) &&
    !name.split('/').some((part) => part === '..' || part === '.' || part === '');
  const url = plain ? new URL(name, folder) : null;
  if (!url || url.origin !== folder.origin || !url.pathname.startsWith(folder.pathname)) {
    fail(`the manifest names ${what} ${JSON.stringify(String(name).slice(0, 80))}, which is not a ` +
      'file inside the bundle folder: re-export the bundle');
  }
  return url;
}

const isCount = (v, least) => Number.isSafeInteger(v) && v >= least;

// Throws unless the manifest has the lists and indices run() relies on (kg.export writes them):
// a damaged or hostile manifest is refused before any buffer is made.
function checkManifest(m) {
  const lists = ['inputs', 'outputs', 'weights', 'buffers', 'storage', 'kernels', 'features'];
  const bad = (what) => fail(`the manifest's ${what} is damaged: re-export the bundle`);
  lists.forEach((key) => Array.isArray(m[key]) || bad(key));
  m.storage.forEach((s, i) => isCount(s?.nbytes, 0) || bad(`storage[${i}].nbytes`));
  m.buffers.forEach((b, i) => (isCount(b?.storage, 0) && b.storage < m.storage.length) ||
    bad(`buffers[${i}].storage`));
  const buffer = (v) => isCount(v, 0) && v < m.buffers.length;
  ['inputs', 'outputs', 'weights'].forEach((key) => m[key].forEach((s, i) =>
    (buffer(s?.buffer) && Array.isArray(s.shape) && s.shape.every((d) => isCount(d, 0))) ||
    bad(`${key}[${i}]`)));
  if (m.state !== undefined && !Array.isArray(m.state)) bad('state');
  if (m.limits !== undefined && !(m.limits && typeof m.limits === 'object' &&
    Object.values(m.limits).every((v) => isCount(v, 1)))) bad('limits');
  (m.state || []).forEach((s, i) => (m.inputs.some((x) => x.name === s?.name) &&
    m.outputs.some((o) => o.name === s.output && (s.dim === null ? !o.symbolic_shape
      : o.symbolic_shape?.[s.axis])) &&
    ['row', 'outer', 'in_rows', 'out_rows'].every((key) => isCount(s[key], 0)) && ARRAYS[s.dtype]) ||
    bad(`state[${i}]`));
  m.kernels.forEach((k, i) => {
    const three = (v, least) => Array.isArray(v) && v.length === 3 && v.every((d) => isCount(d, least));
    if (!three(k?.workgroup_size, 1)) bad(`kernels[${i}].workgroup_size`);
    if (!three(k.dispatch, 0)) bad(`kernels[${i}].dispatch`);
    if (k.variants !== undefined && !(Array.isArray(k.variants) && k.variants.every((v) =>
      typeof v?.dim === 'string' && isCount(v.most, 0) && three(v.workgroup_size, 1) &&
      three(v.dispatch, 0) && [undefined, true].includes(v.exact)))) bad(`kernels[${i}].variants`);
    if (k.work !== undefined && !(Array.isArray(k.work) && k.work.every((f) => Array.isArray(f) &&
      Array.isArray(f[0]) && Number.isInteger(f[1]) && f[0].every((t) => Array.isArray(t) &&
      typeof t[0] === 'string' && Number.isInteger(t[1]))))) bad(`kernels[${i}].work`);
    if (!Array.isArray(k.bindings) || !k.bindings.every((b) => buffer(b?.buffer) &&
      isCount(b.slot, 0))) bad(`kernels[${i}].bindings`);
  });
}

async function fetchOk(url, what) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    fail(`could not fetch ${what} (${url}): ${error.message}; serve the bundle folder over http`);
  }
  if (!response.ok) {
    fail(`could not fetch ${what} (${url}): HTTP ${response.status}; serve the whole bundle ` +
      'folder (manifest.json, *.wgsl, weights.safetensors) next to model.js');
  }
  return response;
}

// The device limits the bundle was compiled for (manifest.limits, e.g. 32 storage buffers per
// kernel: kg.export(..., max_storage_buffers=32)), as requestDevice's requiredLimits; an Error
// naming each limit this adapter cannot give.
function requiredLimits(adapter, limits = {}) {
  const short = Object.entries(limits).filter(([name, v]) => !(adapter.limits[name] >= v));
  if (short.length) {
    fail(`this model was exported for ${short.map(([n, v]) => `${n} ${v}`).join(', ')}; this ` +
      `adapter gives ${short.map(([n]) => adapter.limits[n] ?? 'none').join(', ')}: export it ` +
      'for this adapter (kg.export(..., max_storage_buffers=N) with N at most its limit)');
  }
  return limits;
}

async function newDevice(features, timings, limits) {
  if (!globalThis.navigator?.gpu) {
    fail('this browser has no WebGPU (navigator.gpu is missing): use a browser with WebGPU ' +
      'enabled, on a page served over https or from localhost');
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) {
    fail('no WebGPU adapter: the browser offers none on this machine; enable WebGPU or ' +
      'hardware acceleration, or update the GPU driver');
  }
  const missing = features.filter((name) => !adapter.features.has(name));
  if (missing.length) {
    fail(`this model needs the WebGPU feature(s) ${missing.join(', ')}, which this adapter ` +
      'lacks: export it without them (kg.export(..., f16=False, subgroups=False))');
  }
  const timer = timings && adapter.features.has('timestamp-query') ? ['timestamp-query'] : [];
  return adapter.requestDevice({ requiredFeatures: [...features, ...timer],
    requiredLimits: requiredLimits(adapter, limits) });
}

function checkDevice(device, manifest) {
  const missing = manifest.features.filter((name) => !device.features.has(name));
  if (missing.length) {
    fail(`this model needs the WebGPU feature(s) ${missing.join(', ')}: create the device ` +
      `with requiredFeatures: ${JSON.stringify(manifest.features)}, or let load() create it`);
  }
  const short = Object.entries(manifest.limits || {}).filter(([n, v]) => !(device.limits[n] >= v));
  if (short.length) {
    fail(`this model was exported for ${short.map(([n, v]) => `${n} ${v}`).join(', ')}; the ` +
      `device has ${short.map(([n]) => device.limits[n]).join(', ')}: create the device with ` +
      `requiredLimits: ${JSON.stringify(manifest.limits)}, or let load() create it`);
  }
  const most = Math.max(0, ...manifest.storage.map((s) => s.nbytes));
  const limit = device.limits.maxStorageBufferBindingSize;
  if (most > limit) {
    fail(`a buffer of ${most} bytes is more than this device binds ` +
      `(maxStorageBufferBindingSize ${limit}): request a device with a higher limit`);
  }
}

// name -> bytes of the tensors in a safetensors file
function safetensors(bytes) {
  const size = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + size)));
  return (name) => {
    if (!header[name]) fail(`weights.safetensors has no tensor ${name}: re-export the bundle`);
    const [begin, end] = header[name].data_offsets;
    return bytes.subarray(8 + size + begin, 8 + size + end);
  };
}

function write(device, buffer, data) {
  let bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.byteLength % 4) {
    const padded = new Uint8Array(roundUp4(bytes.byteLength));
    padded.set(bytes);
    bytes = padded;
  }
  if (bytes.byteLength) device.queue.writeBuffer(buffer, 0, bytes);
}

async function pipeline(device, kernel, source) {
  const code = (kernel.features.includes('subgroups') ? 'enable subgroups;\n' : '') + source;
  const module = device.createShaderModule({ code, label: kernel.name });
  const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
  if (errors.length) {
    fail(`kernel ${kernel.name}'s WGSL did not compile on this device: ` +
      `${errors.map((m) => `line ${m.lineNum}: ${m.message}`).join('; ')} ` +
      '(a kernelgen bug: report it with the bundle)');
  }
  const entries = kernel.bindings.map((b) => ({
    binding: b.slot, visibility: GPUShaderStage.COMPUTE,
    buffer: { type: b.access === 'read' ? 'read-only-storage' : 'storage' },
  }));
  if (kernel.uniforms?.length) {     // the symbolic sizes' values, one i32 each
    entries.push({ binding: uniformSlot(kernel), visibility: GPUShaderStage.COMPUTE,
      buffer: { type: 'uniform' } });
  }
  const layout = device.createBindGroupLayout({ entries });
  try {
    const made = await device.createComputePipelineAsync({
      layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: kernel.entry_point },
    });
    return { pipeline: made, layout };
  } catch (error) {
    return fail(`kernel ${kernel.name}'s pipeline failed on this device: ${error.message} ` +
      '(its workgroup or buffers may exceed the device limits: export with smaller ones)');
  }
}

// Timestamp queries around each kernel's compute pass, read back after a run.
class Timer {
  constructor(device, count) {
    this.querySet = device.createQuerySet({ type: 'timestamp', count: 2 * count });
    this.resolved = device.createBuffer({ size: 16 * count,
      usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
    this.readback = device.createBuffer({ size: 16 * count,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  }

  writes(index) {
    return { querySet: this.querySet, beginningOfPassWriteIndex: 2 * index,
      endOfPassWriteIndex: 2 * index + 1 };
  }

  resolve(encoder) {
    encoder.resolveQuerySet(this.querySet, 0, this.querySet.count, this.resolved, 0);
    encoder.copyBufferToBuffer(this.resolved, 0, this.readback, 0, this.readback.size);
  }

  async read(kernels) {
    await this.readback.mapAsync(GPUMapMode.READ);
    const stamps = new BigUint64Array(this.readback.getMappedRange().slice(0));
    this.readback.unmap();
    const ms = (i) => Number(stamps[2 * i + 1] - stamps[2 * i]) / 1e6;
    return kernels.map((k, i) => ({ name: k.name, ms: ms(i) }));
  }

  destroy() {
    [this.querySet, this.resolved, this.readback].forEach((x) => x.destroy());
  }
}

class Model {
  constructor(device, manifest, ownDevice, timings) {
    this.device = device;
    this.manifest = manifest;
    this.state = manifest.state || [];
    this.kept = new Set(this.state.map((s) => s.name));
    this.inputs = manifest.inputs.filter((s) => !this.kept.has(s.name))
      .map(({ name, shape, dtype }) => ({ name, shape, dtype }));
    this.reset();
    this.outputs = manifest.outputs.map(({ name, shape, dtype }) => ({ name, shape, dtype }));
    this.ownDevice = ownDevice;
    this.lost = null;
    this.destroyed = false;
    this.pending = Promise.resolve();
    this.timings = [];
    this.workgroups = 0;
    this.calls = null;
    this.uniforms = [];
    this.builds = new Map();     // pipelineKey -> {launch, source, made, building, lost}
    this.asking = new Map();     // keys of the variants not built that this run asked for ->
                                 // the work of the kernels run in their place (workOf)
    this.work = 0;               // the run's work so far (workOf)
    this.time = 0;               // its estimated time so far: each step's work x its rate (pick)
    this.ran = [];               // each step of the run: [pipelineKey taken, its work, its time]
    this.rates = new Map();      // a built variant's pipelineKey -> its time per work (rate)
    this.last = new Map();       // a run's shape (outputs, dims' values) -> its last clean run
    this.busy = { ms: 0, bytes: 0, open: 0, since: 0 };  // builds timed (msPerByte)
    this.clock = () => performance.now();  // the runs' clock, ms (a test may stand in a fake)
    this.queued = new Set();     // keys of variants to build in the background
    this.background = null;      // the background build under way
    this.backgroundKey = null;   // its pipelineKey
    this.clean = new Map();      // a run's like -> its ms per work, no build under way
    this.during = new Map();     // background builds measured -> {excess, known, done, bytes}
    this.overlapped = new Set(); // keys of the background builds under way during this run
    this.picked = [];            // what each step of this run took (pick)
    this.foreground = { ms: 0, bytes: 0 };   // measured background builds (buildRate)
    this.failed = null;          // a failed build's Error, thrown by the next run
    this.timer = timings && manifest.kernels.length && device.features.has('timestamp-query')
      ? new Timer(device, manifest.kernels.length) : null;
    device.lost.then((info) => { this.lost = info.message || info.reason || 'unknown reason'; });
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    this.storage = manifest.storage.map((s, i) => device.createBuffer({
      size: s.nbytes, usage, label: `storage ${i}`,
    }));
    // every output read back goes through one buffer, packed at 8-byte offsets (a mapped
    // range's alignment): a run maps it once, however many outputs it reads
    this.readback = device.createBuffer({
      size: Math.max(8, manifest.outputs.reduce((n, o) => n + roundUp8(this.buffer(o).nbytes), 0)),
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
  }

  buffer(spec) {
    return this.manifest.buffers[spec.buffer];
  }

  // Writes the weights and creates each kernel's own pipeline (createComputePipelineAsync, all in
  // flight together); onProgress({done, total}) after each is made. A symbolic kernel's
  // variants (lowering/variants.py) are not built here: the kernel itself serves every bound
  // value, and a variant is built in the background once its runs have lost its build's cost
  // (DEFAULT_MS_PER_BYTE) or by buildVariants(); until it is built, run() takes the kernel or a
  // built variant whose range holds the value (see pick).
  async prepare(sources, weights, onProgress = null) {
    for (const spec of this.manifest.weights) {
      write(this.device, this.storage[this.buffer(spec).storage], weights(spec.name));
    }
    // launches that share a file and entry point (export's share_sources: a model's layers)
    // and their bindings share one pipeline, made once
    const dims = Object.fromEntries((this.manifest.dims || []).map((d) => [d.name, d]));
    withVariants(this.manifest.kernels).forEach((launch, i) => {
      const key = pipelineKey(launch);
      if (!this.builds.has(key)) {
        // a variant up to its dim's top: a one-off kernel's capped tile whose kernel is the
        // cheapest to build (lowering/cheap_first.py), queued at the first read asking
        const top = launch.most !== undefined && launch.most >= (dims[launch.dim]?.hi ?? Infinity);
        this.builds.set(key, { launch, source: sources[i], made: null, building: null, lost: 0,
          top });
      }
    });
    const first = [...new Set(this.manifest.kernels.map(pipelineKey))];
    const total = first.length;
    let done = 0;
    onProgress?.({ done, total });
    await Promise.all(first.map(async (key) => {
      await this.build(key);
      done += 1;
      onProgress?.({ done, total });
    }));
    this.steps = this.manifest.kernels.map((kernel) => {
      // its variants for small bound values: the same bindings, so the same bind group
      // (each with its own launch, so workOf weighs a run of it by the work it launches)
      const variants = (kernel.variants || []).map((v) => ({ dim: v.dim, most: v.most, exact: !!v.exact,
        key: pipelineKey({ ...kernel, ...v }), dispatch: v.dispatch, grid: v.grid,
        work: kernel.work, threads: v.workgroup_size.reduce((a, b) => a * b, 1) }));
      const entries = kernel.bindings.map((b) => ({
        binding: b.slot, resource: { buffer: this.storage[this.buffer(b).storage] },
      }));
      const names = (kernel.uniforms || []).map(([name]) => name);
      const uniform = names.length ? this.device.createBuffer({
        size: Math.ceil(4 * names.length / 16) * 16,
        usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST, label: `${kernel.name} dims`,
      }) : null;
      if (uniform) entries.push({ binding: uniformSlot(kernel), resource: { buffer: uniform } });
      this.uniforms.push(uniform);
      const { layout } = this.builds.get(pipelineKey(kernel)).made;
      return { key: pipelineKey(kernel), dispatch: kernel.dispatch, grid: kernel.grid, names,
        uniform, group: this.device.createBindGroup({ layout, entries }), variants,
        work: kernel.work, threads: kernel.workgroup_size.reduce((a, b) => a * b, 1) };
    });
  }

  // The pipeline of launch `key` (its build started once; later calls share it), timed into
  // this.busy. A failed build rejects, and its error is kept for run() to throw.
  build(key) {
    const entry = this.builds.get(key);
    if (entry.building) return entry.building;
    const busy = this.busy;
    if (busy.open++ === 0) busy.since = performance.now();
    const done = () => {
      busy.bytes += entry.source.length;
      if (--busy.open === 0) busy.ms += performance.now() - busy.since;
    };
    entry.building = pipeline(this.device, entry.launch, entry.source).then((made) => {
      done();
      entry.made = made;
      return made;
    }, (error) => {
      done();
      this.failed ||= error;
      throw error;
    });
    return entry.building;
  }

  // The build rate: the wall time this model was busy building pipelines per source byte built
  // (DEFAULT_MS_PER_BYTE before any was timed).
  msPerByte() {
    return this.busy.ms > 0 && this.busy.bytes > 0 ? this.busy.ms / this.busy.bytes
      : DEFAULT_MS_PER_BYTE;
  }

  // The rate (ms per source byte) a variant's build cost is priced at: the time the background
  // builds measured so far added to the runs they overlapped, per byte (DEFAULT_MS_PER_BYTE's
  // comment; none or less: 0), or msPerByte before any was.
  buildRate() {
    const { ms, bytes } = this.foreground;
    return bytes > 0 ? Math.max(0, ms) / bytes : this.msPerByte();
  }

  // At a read: a run of `ms` and estimated work `work` (workOf) that no background build
  // overlapped is the base of its like `sig` (the pipelines it took and its outputs), else its
  // time over the base's ms per work is shared out among the builds that did (one of them is not
  // measured where its like has no base); a build done is added to this.foreground.
  measure(ms, sig, work) {
    const base = this.clean.get(sig);
    if (!this.overlapped.size) {
      if (this.clean.size > 4096) this.clean.clear();
      this.clean.set(sig, ms / Math.max(work, 1e-30));
    }
    for (const key of this.overlapped) {
      const build = this.during.get(key);
      if (base === undefined) build.known = false;
      else build.excess += (ms - base * work) / this.overlapped.size;
    }
    for (const [key, build] of this.during) {
      if (!build.done) continue;
      this.during.delete(key);
      if (!build.known) continue;
      this.foreground.ms += build.excess;  // signed: a run's noise either way evens out
      this.foreground.bytes += build.bytes;
    }
  }

  // What a step runs at the dims' `values`: the first variant that serves them (serves), where it
  // is built, else the first built one that serves them, else the kernel itself (built at
  // load; it serves every value). A variant not built is never dispatched: asked for, it is
  // charged its kernels' share of the run's wall time at the read (charge) and joins the
  // background builds (startBuilds) once that reaches its build cost.
  pick(step, values) {
    const fits = step.variants.filter((v) => serves(v, values));
    // (a variant up to the top, a capped tile, serves smaller values only where it is theirs:
    // below, until their own is built, the kernel, the cheaper tile, pads fewer rows)
    const built = fits.find((v, i) => this.builds.get(v.key).made &&
      (i === 0 || !this.builds.get(v.key).top));
    const { dispatch, grid, key } = built || step;
    const work = workOf(built || step, values);   // under the launch that runs (charge)
    const time = work * (this.rates.get(key) ?? 1);   // a variant's measured rate (rate)
    this.work += work;
    this.time += time;
    this.ran.push([key, work, time]);
    if (fits.length && fits[0] !== built && !this.builds.get(fits[0].key).building) {
      this.asking.set(fits[0].key, (this.asking.get(fits[0].key) || 0) + time);  // layers add
    }
    this.picked.push(step.variants.indexOf(built));   // the run's like (measure): -1 the kernel
    return { pipeline: this.builds.get(key).made.pipeline, dispatch, grid };
  }

  // At a read: charges each variant the run asked for its kernels' share of the run's wall time
  // `ms` (their work over the run's) and queues those whose charges reach their build cost (ski
  // rental: DEFAULT_MS_PER_BYTE's comment).
  charge(ms, sig = '', shape = '') {
    this.measure(ms, sig, this.work);
    if (!this.overlapped.size) this.rate(ms, shape);
    const rate = this.buildRate();
    for (const [key, time] of this.asking) {
      const wanted = this.builds.get(key);
      wanted.lost += ms * time / Math.max(this.time, time, 1e-30);
      if (!wanted.building && (wanted.top || wanted.lost >= rate * wanted.source.length)) {
        this.queued.add(key);
      }
    }
    this.asking.clear();
    this.work = 0;
    this.time = 0;
    this.ran = [];
  }

  // At a read of a run no build overlapped (ms long): where the last such run of its `shape`
  // (outputs, dims' values) that took other launches took them at some steps, each now a built
  // variant, those variants get the rate (time per work, the kernels' being 1) that makes their
  // steps' time what the same steps took then less what this run saved: the time a built variant
  // takes, measured (at least RATE_FLOOR of what its steps took, at most all of it), again at each
  // such run (the first after a build may pay the driver's first-use compile).
  rate(ms, shape) {
    const last = this.last.get(shape);
    const same = last?.ran.length === this.ran.length &&
      last.ran.every((r, i) => r[0] === this.ran[i][0]);
    const before = same ? last.before : last && { ms: last.ms, ran: last.ran };
    if (this.last.size > 4096) this.last.clear();
    this.last.set(shape, { ms, ran: this.ran, before });
    if (!before || before.ran.length !== this.ran.length) return;
    const moved = this.ran.map((_, i) => i).filter((i) => this.ran[i][0] !== before.ran[i][0]);
    const variant = (key) => this.builds.get(key).launch.most !== undefined;
    if (!moved.length || !moved.every((i) => variant(this.ran[i][0]))) return;
    const total = before.ran.reduce((sum, r) => sum + r[2], 0);
    const then = moved.reduce((sum, i) => sum + before.ran[i][2], 0);   // in time units
    const took = then * before.ms / Math.max(total, 1e-30);             // ms, then
    const now = Math.min(took, Math.max(RATE_FLOOR * took, took - (before.ms - ms)));
    for (const i of moved) {
      this.rates.set(this.ran[i][0], (now / Math.max(took, 1e-30)) * before.ran[i][2] /
        Math.max(this.ran[i][1], 1e-30));
    }
  }

  // Builds the queued variants one at a time, the shortest source first, after a run's outputs
  // are read (so they do not hold up that result, and one at a time they leave the CPU adapters'
  // cores to the runs).
  startBuilds() {
    if (this.background || !this.queued.size || this.destroyed) return;
    const size = (key) => this.builds.get(key).source.length;
    const key = [...this.queued].reduce((a, b) => (size(b) < size(a) ? b : a));
    this.queued.delete(key);
    const measured = { excess: 0, known: true, done: false, bytes: size(key) };
    this.during.set(key, measured);
    this.overlapped.add(key);
    this.backgroundKey = key;
    this.background = this.build(key).catch(() => {}).finally(() => {
      measured.done = true;
      this.background = null;
      this.backgroundKey = null;
      this.startBuilds();
    });
  }

  // Builds every variant not built yet (all in flight together); resolves when they are, so the
  // runs after it take each value's own variant. onProgress({done, total}) as in load().
  async buildVariants({ onProgress = null } = {}) {
    this.usable();
    const left = [...this.builds].filter(([, e]) => !e.made).map(([key]) => key);
    let done = 0;
    onProgress?.({ done, total: left.length });
    await Promise.all(left.map(async (key) => {
      this.queued.delete(key);
      await this.build(key);
      done += 1;
      onProgress?.({ done, total: left.length });
    }));
  }

  // {built, total}: the distinct pipelines made so far and the bundle's (kernels and variants)
  get pipelines() {
    const all = [...this.builds.values()];
    return { built: all.filter((e) => e.made).length, total: all.length };
  }

  // Writes every weight anew: weights(name) gives its bytes in the manifest's dtype and shape
  // (as in weights.safetensors), e.g. values trained in the page; later runs use them.
  setWeights(weights) {
    this.usable();
    for (const spec of this.manifest.weights) {
      const data = weights(spec.name);
      if (data?.byteLength !== this.buffer(spec).nbytes) {
        fail(`weight ${spec.name} needs ${this.buffer(spec).nbytes} bytes, got ` +
          `${data?.byteLength ?? 'none'}`);
      }
      write(this.device, this.storage[this.buffer(spec).storage], data);
    }
  }

  // Empties the state (the KV cache): the next run starts anew.
  // A fixed state (dim null: a recurrent model's hidden state) holds zeros again: it is cleared
  // on the GPU at the start of the next run.
  reset() {
    const dims = Object.fromEntries((this.manifest.dims || []).map((d) => [d.name, d]));
    this.rows = Object.fromEntries(this.state.map((s) => [s.name,
      s.dim === null ? 1 : dims[s.dim]?.lo ?? 0]));
    this.clear = this.state.filter((s) => s.dim === null);
  }

  // {dim: value} from the inputs' lengths (an input whose only symbolic size is a dim) and the
  // state's row counts
  dimValues(inputs) {
    const values = {};
    const dims = Object.fromEntries((this.manifest.dims || []).map((d) => [d.name, d]));
    for (const s of this.state.filter((k) => k.dim !== null)) {
      const rows = this.rows[s.name];
      if (!dims[s.dim] || rows > dims[s.dim].hi) {
        fail(`state ${s.name} holds ${rows} rows, past its dim ${s.dim}'s top ` +
          `${dims[s.dim]?.hi}: reset() the model`);
      }
      values[s.dim] = rows;
    }
    for (const spec of this.manifest.inputs) {
      if (this.kept.has(spec.name)) continue;
      const sym = spec.symbolic_shape;
      const at = sym ? sym.findIndex((s) => typeof s !== 'number') : -1;
      if (at < 0) continue;
      const { terms, const: c } = sym[at];
      if (terms.length !== 1 || terms[0][1] !== 1 || c || sym[at].div) continue;
      const name = terms[0][0];
      const rest = count(sym.filter((s, k) => k !== at));
      const value = inputs[spec.name]?.length / rest;
      const { lo, hi } = dims[name];
      if (!Number.isInteger(value) || value < lo || value > hi) {
        fail(`input "${spec.name}" has ${inputs[spec.name]?.length} elements: it takes ${name} ` +
          `x ${rest} with ${name} in ${lo}..${hi} (${spec.dtype} [${this.shapeText(sym)}])`);
      }
      if (name in values && values[name] !== value) {
        fail(`input "${spec.name}" gives ${name} = ${value}, another input gave ${values[name]}`);
      }
      values[name] = value;
    }
    return values;
  }

  shapeText(sym) {
    const affine = (s) => s.terms.map(([n, c]) => (c === 1 ? n : `${c}*${n}`)).join(' + ') +
      (s.const ? ` + ${s.const}` : '');
    return sym.map((s) => (typeof s === 'number' ? s
      : s.div ? `(${affine(s)}) // ${s.div}` : affine(s))).join(',');
  }

  // Outputs for `inputs` ({name: typed array}); runs one at a time, in call order.
  // outputs: the names to read back (default all).
  run(inputs, { outputs = null } = {}) {
    const result = this.pending.then(() => this.runNow(inputs, outputs));
    this.pending = result.catch(() => {});
    return result;
  }

  usable() {
    if (this.destroyed) fail('run() after destroy(): load() the model again');
    if (this.failed) throw this.failed;
    if (this.lost) fail(`the WebGPU device was lost (${this.lost}): load() the model again`);
  }

  checkInputs(inputs) {
    const specs = this.manifest.inputs;
    if (!inputs || typeof inputs !== 'object') {
      fail(`run() takes an object of inputs by name: ${describe(specs) || 'none'}`);
    }
    for (const name of Object.keys(inputs)) {
      if (!specs.some((s) => s.name === name)) {
        fail(`unknown input "${name}": this model's inputs are ${describe(specs) || 'none'}`);
      }
    }
    for (const spec of specs.filter((s) => !this.kept.has(s.name))) {
      const value = inputs[spec.name];
      const want = ARRAYS[spec.dtype];
      if (value === undefined) fail(`missing input "${spec.name}": pass ${describe([spec])}`);
      const half = spec.dtype === 'float16' && globalThis.Float16Array
        && value instanceof globalThis.Float16Array;
      if (!(value instanceof want) && !half) {
        fail(`input "${spec.name}" is ${value?.constructor?.name || typeof value}; ` +
          `this model takes ${spec.dtype}: pass a ${want.name}`);
      }
      if (!spec.symbolic_shape && value.length !== count(spec.shape)) {
        fail(`input "${spec.name}" has ${value.length} elements; this model takes ` +
          `${count(spec.shape)} (${spec.dtype} [${spec.shape}])`);
      }
    }
  }

  async runNow(inputs, names = null) {
    const start = this.clock();
    this.overlapped = new Set(this.backgroundKey ? [this.backgroundKey] : []);
    this.picked = [];
    this.usable();
    this.checkInputs(inputs);
    const values = this.dimValues(inputs);
    const device = this.device;
    const wanted = this.manifest.outputs.map((o, i) => [o, i])
      .filter(([o]) => !names || names.includes(o.name));
    const unknown = (names || []).filter((n) => !this.manifest.outputs.some((o) => o.name === n));
    if (unknown.length) fail(`unknown output(s) ${unknown}: this model's outputs are ${describe(this.outputs)}`);
    this.calls = { submits: 0, dispatches: 0, writes: 0, copies: 0, reads: 0, maps: 0 };
    for (const spec of this.manifest.inputs.filter((s) => !this.kept.has(s.name))) {
      const data = spec.symbolic_shape ? relayout(inputs[spec.name],
        spec.symbolic_shape.map((s) => sizeOf(s, values)), spec.shape, false) : inputs[spec.name];
      write(device, this.storage[this.buffer(spec).storage], data);
      this.calls.writes += 1;
    }
    for (const step of this.steps) {     // the dims' values, written when they change
      const now = step.names.map((n) => values[n]);
      if (!step.uniform || now.every((v, k) => v === step.written?.[k])) continue;
      write(device, step.uniform, new Int32Array(now));
      step.written = now;
      this.calls.writes += 1;
    }
    device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder();
    for (const s of this.clear) {        // fixed states after load() or reset(): zeros
      const spec = this.manifest.inputs.find((i) => i.name === s.name);
      encoder.clearBuffer(this.storage[this.buffer(spec).storage]);
    }
    this.clear = [];
    let pass = null;
    this.workgroups = 0;
    this.asking.clear();
    this.work = 0;
    this.time = 0;
    this.ran = [];
    this.steps.forEach((step, i) => {  // one pass for all, or one per kernel when timed
      if (this.timer) pass?.end();
      if (!pass || this.timer) {
        const timed = this.timer ? { timestampWrites: this.timer.writes(i) } : {};
        pass = encoder.beginComputePass(timed);
      }
      const pick = this.pick(step, values);
      pass.setPipeline(pick.pipeline);
      pass.setBindGroup(0, step.group);
      const dispatch = gridDispatch(pick.dispatch, pick.grid, values);
      this.workgroups += dispatch[0] * dispatch[1] * dispatch[2];
      this.calls.dispatches += 1;
      pass.dispatchWorkgroups(...dispatch);
    });
    pass?.end();
    this.timer?.resolve(encoder);
    let end = 0;                         // the outputs asked for, packed from offset 0
    const at = wanted.map(([o]) => {
      const size = roundUp4(this.buffer(o).nbytes);
      encoder.copyBufferToBuffer(this.storage[this.buffer(o).storage], 0, this.readback, end, size);
      end += roundUp8(size);
      return end - roundUp8(size);
    });
    const rows = this.keep(encoder, values);
    device.queue.submit([encoder.finish()]);
    this.calls.submits += 1;
    this.calls.reads = wanted.length;
    this.calls.maps = wanted.length ? 1 : 0;
    // the validation result and the outputs are awaited together (one round trip, not two)
    const mapped = wanted.length ? this.readback.mapAsync(GPUMapMode.READ, 0, end)
      : Promise.resolve();
    mapped.catch(() => {});
    const error = await device.popErrorScope();
    if (error) {
      await mapped.catch(() => {});
      if (this.readback.mapState === 'mapped') this.readback.unmap();
      fail(`WebGPU rejected the run: ${error.message}`);
    }
    this.rows = rows;
    try {
      await mapped;
      if (this.timer) this.timings = await this.timer.read(this.manifest.kernels);
    } catch (failure) {
      this.usable();
      fail(`reading the outputs failed: ${failure.message}`);
    }
    const read = wanted.map(([o]) => o.name);
    this.charge(this.clock() - start, JSON.stringify([read, this.picked]),
      JSON.stringify([read, values]));
    this.startBuilds();
    const out = {};
    const range = wanted.length ? this.readback.getMappedRange(0, end) : null;
    wanted.forEach(([o], k) => {
      const bytes = range.slice(at[k], at[k] + this.buffer(o).nbytes);
      const array = new ARRAYS[o.dtype](bytes);
      out[o.name] = o.symbolic_shape ? relayout(array, o.symbolic_shape.map((s) => sizeOf(s,
        values)), o.shape, true) : array;
    });
    if (range) this.readback.unmap();
    return out;
  }

  // Copies each state's output rows into its buffer (one copy per outer slice: a cache's
  // heads), but for a state whose output is its own buffer (written in place: nothing to
  // copy); returns the row counts after the run.
  keep(encoder, values) {
    const rows = {};
    for (const s of this.state) {
      const out = this.manifest.outputs.find((o) => o.name === s.output);
      const src = this.storage[this.buffer(out).storage];
      const spec = this.manifest.inputs.find((i) => i.name === s.name);
      const dst = this.storage[this.buffer(spec).storage];
      rows[s.name] = s.dim === null ? 1 : sizeOf(out.symbolic_shape[s.axis], values);
      if (src === dst) continue;         // written in place by the run (a KV cache): no copy
      const bytes = (ARRAYS[s.dtype].BYTES_PER_ELEMENT) * s.row;
      const n = Math.min(rows[s.name], s.in_rows) * bytes;
      this.calls.copies += s.outer;
      for (let o = 0; o < s.outer && n > 0; o++) {
        if (n % 4 || (o * s.in_rows * bytes) % 4 || (o * s.out_rows * bytes) % 4) {
          fail(`state ${s.name}'s rows are not whole 4-byte words: export it with a row of ` +
            'an even number of 16-bit items');
        }
        encoder.copyBufferToBuffer(src, o * s.out_rows * bytes, dst, o * s.in_rows * bytes, n);
      }
    }
    return rows;
  }

  // Tokens a causal LM bundle generates after promptIds (an array of ints), with options
  // { maxNewTokens, temperature, topK, topP, seed, stop, onToken, signal }: see generate.js,
  // which kg.export writes next to this file and this loads on the first call.
  async generate(promptIds, options = {}) {
    let module;
    try {
      module = await import(new URL('./generate.js', import.meta.url));
    } catch (error) {
      fail(`generate() needs generate.js next to model.js (kg.export writes both): ` +
        error.message);
    }
    return module.generate(this, promptIds, options);
  }

  // Frees the model's buffers (and its device, when load() created it).
  destroy() {
    if (this.destroyed) return;
    this.destroyed = true;
    [...this.storage, this.readback, ...this.uniforms.filter(Boolean)]
      .forEach((b) => b.destroy());
    this.timer?.destroy();
    if (this.ownDevice) this.device.destroy();
  }
}

// The model next to this file (or at `base`, a URL of the bundle folder), ready to run.
// onProgress({done, total}), when given, is called as the kernels' pipelines are created (all
// of them at once): first with done 0, then once per pipeline, last with done === total; the
// total is the pipelines load() waits for (each kernel's own, not its variants').
export async function load({ device = null, base = new URL('./', import.meta.url),
  timings = false, onProgress = null } = {}) {
  if (onProgress !== null && typeof onProgress !== 'function') {
    fail('load({onProgress}) takes a function called with {done, total}');
  }
  const root = new URL('./', new URL(base, globalThis.location?.href));
  let manifest;
  try {
    manifest = await (await fetchOk(new URL('manifest.json', root), 'manifest.json')).json();
  } catch (error) {
    if (error.message.startsWith('kernelgen model:')) throw error;
    fail(`${root}manifest.json is not valid JSON: re-export the bundle`);
  }
  if (manifest?.bundle !== 'webgpu') {
    fail(`${root} holds a ${manifest?.bundle} bundle: export with format="webgpu" for the web`);
  }
  checkManifest(manifest);
  const unsupported = [...manifest.inputs, ...manifest.outputs].filter((s) => !ARRAYS[s.dtype]);
  if (unsupported.length) fail(`WebGPU has no ${unsupported[0].dtype}: export another dtype`);
  const launches = withVariants(manifest.kernels);
  const urls = launches.map((k) => inFolder(root, k.file, 'the kernel file'));
  const weightsUrl = manifest.weights.length
    ? inFolder(root, manifest.weights_file, 'the weights file') : null;
  const fetched = new Map();      // each file once (launches may share one)
  const files = Promise.all(launches.map((k, i) => {
    if (!fetched.has(k.file)) fetched.set(k.file, fetchOk(urls[i], k.file).then((r) => r.text()));
    return fetched.get(k.file);
  }));
  const weights = weightsUrl ? fetchOk(weightsUrl, manifest.weights_file)
    .then((r) => r.arrayBuffer()) : null;
  const ownDevice = !device;
  device = device || await newDevice(manifest.features, timings, manifest.limits);
  checkDevice(device, manifest);
  const model = new Model(device, manifest, ownDevice, timings);
  try {
    await model.prepare(await files, weights && safetensors(new Uint8Array(await weights)),
      onProgress);
  } catch (error) {
    model.destroy();
    throw error;
  }
  return model;
}
