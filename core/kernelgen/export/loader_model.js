// The loaded bundle (export/loader.js's part, joined into model.js by export/scripts.py):
// class Model, what load() returns: its buffers and pipelines, run() (inputs, the dims'
// values, one compute pass, the outputs read back), the state kept between runs, weights,
// generate() (generate.js) and destroy(); its variants' builds are its base, VariantBuilds.

import {
  ARRAYS, count, describe, fail, gridDispatch, relayout, roundUp4, roundUp8, sizeOf,
} from './loader_common.js';
import { withVariants } from './loader_manifest.js';
import {
  boundRange, layoutOf, pipelineKey, Timer, uniformSlot, write,
} from './loader_device.js';
import { VariantBuilds } from './loader_builds.js';

export class Model extends VariantBuilds {
  constructor(device, manifest, ownDevice, timings) {
    super();
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
    this.later = new Set();      // keys of the kernels built after the first run (prepare)
    this.timer = timings && manifest.kernels.length && device.features.has('timestamp-query')
      ? new Timer(device, manifest.kernels.length) : null;
    device.lost.then((info) => { this.lost = info.message || info.reason || 'unknown reason'; });
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST |
      GPUBufferUsage.COPY_SRC;
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

  // Creates each kernel's own pipeline (createComputePipelineAsync, all in flight together) as
  // soon as `sources` (a Promise of each launch's WGSL, withVariants' order) are here, and writes
  // the weights (`weights`: a Promise of name -> bytes, or null) while they are made;
  // onProgress({done, total}) after each is made. A symbolic kernel's variants
  // (lowering/variants.py) are not built here: the kernel itself serves every bound value, and a
  // variant is built in the background once its runs have lost its build's cost
  // (DEFAULT_MS_PER_BYTE) or by buildVariants(); until it is built, run() takes the kernel or a
  // built variant whose range holds the value (see pick). Nor is a kernel launched at one value
  // of its dim only (`runs` lo === hi: graph/one_row.py's joined kernel of a decode step): it is
  // built after the first run that does not launch it (a prompt's), or when a run launches it
  // (issue 37: the first token waits only for the kernels a prompt runs). Measured
  // (bench/lm_page.py, SmolLM2-135M q4 2 layers, 128-token prompt, fresh browsers, main and
  // this in turn, load 15-21 on 2 CPUs): time to first token SwiftShader 31.2 / 53.2 s -> 7.9 /
  // 23.7, lavapipe 69.8 / 70.6 -> 33.8 / 46.6; the first decode step as soon or sooner (its 4
  // one-row kernels, 3,100-4,500 WGSL lines each, built with the variants' builds held back).
  async prepare(sources, weights, onProgress = null) {
    sources = await sources;
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
          top, layout: layoutOf(this.device, launch) });
      }
    });
    const one = (k) => k.runs && k.runs.lo === k.runs.hi;
    const first = [...new Set(this.manifest.kernels.filter((k) => !one(k)).map(pipelineKey))];
    this.later = new Set(this.manifest.kernels.map(pipelineKey).filter((k) => !first.includes(k)));
    const total = first.length;
    let done = 0;
    onProgress?.({ done, total });
    const built = Promise.all(first.map(async (key) => {
      await this.build(key);
      done += 1;
      onProgress?.({ done, total });
    }));
    built.catch(() => {});
    this.steps = this.manifest.kernels.map((kernel) => this.stepOf(kernel));
    const bytes = await weights;
    for (const spec of bytes ? this.manifest.weights : []) {
      write(this.device, this.storage[this.buffer(spec).storage], bytes(spec.name));
    }
    await built;
  }

  // A kernel's step of run(): its bind group (its layout's: the pipeline need not be made yet),
  // the uniform of its dims' values, its launch and its variants
  stepOf(kernel) {
    // its variants for small bound values: the same bindings, so the same bind group
    // (each with its own launch, so workOf weighs a run of it by the work it launches)
    const variants = (kernel.variants || []).map((v) => ({ dim: v.dim, most: v.most,
      exact: !!v.exact, key: pipelineKey({ ...kernel, ...v }), dispatch: v.dispatch, grid: v.grid,
      work: kernel.work, threads: v.workgroup_size.reduce((a, b) => a * b, 1) }));
    const entries = kernel.bindings.map((b) => ({
      binding: b.slot, resource: boundRange(b, this.storage[this.buffer(b).storage]),
    }));
    const names = (kernel.uniforms || []).map(([name]) => name);
    const uniform = names.length ? this.device.createBuffer({
      size: Math.ceil(4 * names.length / 16) * 16,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST, label: `${kernel.name} dims`,
    }) : null;
    if (uniform) entries.push({ binding: uniformSlot(kernel), resource: { buffer: uniform } });
    this.uniforms.push(uniform);
    const { layout } = this.builds.get(pipelineKey(kernel));
    return { key: pipelineKey(kernel), dispatch: kernel.dispatch, grid: kernel.grid, names,
      uniform, group: this.device.createBindGroup({ layout, entries }), variants,
      work: kernel.work, threads: kernel.workgroup_size.reduce((a, b) => a * b, 1) };
  }

  // Waits for the pipelines of the kernels a run at the dims' `values` launches (a kernel left
  // for later by prepare, its build started now where it was not); a failed build throws.
  async launched(values) {
    const keys = this.manifest.kernels.filter((k) => !k.runs ||
      (values[k.runs.dim] >= k.runs.lo && values[k.runs.dim] <= k.runs.hi)).map(pipelineKey);
    const waiting = [...new Set(keys)].filter((key) => !this.builds.get(key).made);
    if (!waiting.length) return;
    waiting.forEach((key) => this.later.delete(key));
    await Promise.all(waiting.map((key) => this.build(key)));
    this.usable();
  }

  // After a run's read: the builds of the kernels load() left for later (prepare), all at once;
  // the variants' background builds (startBuilds) wait for them (the next run may need them)
  buildLater() {
    if (!this.later.size || this.destroyed) return;
    const keys = [...this.later];
    this.later.clear();
    this.background = Promise.all(keys.map((key) => this.build(key))).catch(() => {})
      .finally(() => {
        this.background = null;
        this.startBuilds();
      });
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
    this.usable();
    this.checkInputs(inputs);
    const values = this.dimValues(inputs);
    await this.launched(values);
    const start = this.clock();
    this.overlapped = new Set(this.backgroundKey ? [this.backgroundKey] : []);
    this.picked = [];
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
    const skipped = new Set();           // the kernels whose `runs` leave this run out
    this.steps.forEach((step, i) => {  // one pass for all, or one per kernel when timed
      // launched only while its dim is bound within lo..hi: a one-row step's joined kernel, or
      // the pair it stands for (graph/one_row.py; uop/program.py runs_at)
      const runs = this.manifest.kernels[i].runs;
      if (runs && !(values[runs.dim] >= runs.lo && values[runs.dim] <= runs.hi)) {
        skipped.add(i);
        return;
      }
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
      if (this.timer) {
        this.timings = (await this.timer.read(this.manifest.kernels)).filter((_, i) =>
          !skipped.has(i));
      }
    } catch (failure) {
      this.usable();
      fail(`reading the outputs failed: ${failure.message}`);
    }
    const read = wanted.map(([o]) => o.name);
    this.charge(this.clock() - start, JSON.stringify([read, this.picked]),
      JSON.stringify([read, values]));
    this.buildLater();
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
