// kernelgen in any page: an ES module that starts kernelgen's worker (Pyodide + WebGPU) and
// compiles or runs Python programs that assign their result to `out`.
//
//   import { createKernelgen } from 'http://127.0.0.1:8000/web/kernelgen.js';
//   const kg = await createKernelgen({ base: 'http://127.0.0.1:8000/' });
//   const kernels = await kg.compile(code, { target: 'ptx', arch: 'sm_80' });
//   const { shape, dtype, data } = await kg.run(code, { device: 'WEBGPU' });
//
// Failures reject with a KernelgenError {type, message, line} (line: of the program, or null).

// dtype name -> typed array constructor for a result's data
const TYPED_ARRAYS = {
  bool: Uint8Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array,
  int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  float16: globalThis.Float16Array || Uint16Array, bfloat16: Uint16Array,
  float32: Float32Array, float64: Float64Array,
};

export class KernelgenError extends Error {
  constructor({ type = 'Error', message = '', line = null, ...details } = {}) {
    super(message);
    this.name = 'KernelgenError';
    this.type = type;
    this.line = line;
    Object.assign(this, details);
  }
}

// The result bytes of a run as a typed array of the tensor's dtype.
export function typedData(dtype, bytes) {
  const Type = TYPED_ARRAYS[dtype] || Uint8Array;
  const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
  const buffer = whole ? bytes.buffer : bytes.slice().buffer;  // the worker's own copy: no other
  return new Type(buffer, 0, buffer.byteLength / Type.BYTES_PER_ELEMENT);
}

function startWorker(base) {
  const url = new URL('web/worker.js', base);
  if (url.origin === globalThis.location?.origin) return new Worker(url, { type: 'module' });
  // Cross-origin: a same-origin trampoline that imports the worker (the server must allow CORS).
  const source = `import ${JSON.stringify(url.href)};`;
  const blob = new Blob([source], { type: 'text/javascript' });
  return new Worker(URL.createObjectURL(blob), { type: 'module' });
}

class Kernelgen {
  // `early`: messages the worker sent before this object listened (see startEarly).
  constructor(worker, onProgress, early = []) {
    this.worker = worker;
    this.onProgress = onProgress;
    this.pending = new Map();
    this.nextId = 1;
    this.info = null;
    worker.onmessage = ({ data }) => this.receive(data);
    worker.onerror = (event) => this.failAll(event.message || 'the kernelgen worker crashed');
    for (const data of early.splice(0)) this.receive(data);
  }

  receive(data) {
    if (data.type === 'progress') {
      this.onProgress?.(data);
      return;
    }
    if (data.type === 'token') {  // a generate call's token (one command runs at a time)
      this.onToken?.(data.token);
      return;
    }
    const call = this.pending.get(data.id);
    if (!call) return;
    this.pending.delete(data.id);
    if (data.ok) call.resolve(data.result);
    else call.reject(new KernelgenError(data.error));
  }

  failAll(message) {
    for (const call of this.pending.values()) {
      call.reject(new KernelgenError({ type: 'WorkerError', message }));
    }
    this.pending.clear();
  }

  call(cmd, args = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, cmd, args });
    });
  }

  // Python results carry {ok, error}; a failed one rejects.
  async callChecked(cmd, args) {
    const result = await this.call(cmd, args);
    if (result && result.ok === false) throw new KernelgenError(result.error);
    return result;
  }

  // The default device: WEBGPU when the page has an adapter, else PYTHON.
  get device() {
    return this.info?.device || 'PYTHON';
  }

  // The program's kernels for one target: [{name, source, global_size, local_size, buffers,
  // launch}].
  async compile(code, { target = 'wgsl', arch = 'sm_80' } = {}) {
    const result = await this.callChecked('compile', { code, arch, targets: target });
    const compiled = result[target];
    if (!compiled.ok) throw new KernelgenError(compiled.error);
    return compiled.kernels;
  }

  // Both targets at once (or those in `targets`), each {ok, kernels} or {ok: false, error}
  // (what the page shows).
  compileAll(code, { arch = 'sm_80', targets = 'wgsl,ptx' } = {}) {
    return this.callChecked('compile', { code, arch, targets });
  }

  // Both bundles (kg.export: webgpu and ptx) of the program's `out`: [{name, bytes}], names
  // "webgpu/model.js", "ptx/manifest.json", ...
  async exportBundles(code, { arch = 'sm_80' } = {}) {
    const result = await this.callChecked('exportBundles', { code, arch });
    return result.files.map((f) => ({
      name: f.name, bytes: Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0)),
    }));
  }

  // Run the program; resolves to its `out` as {shape, dtype, data (a typed array)} plus
  // device, timings, seconds, compiled (kernels) and compile_s (their Python compile),
  // pipelineMs / pipelineBusyMs (its pipeline builds summed / the time any was under way: they
  // overlap Python's compile), and `reference` (the comparison with PYTHON) when asked for.
  // search: time candidate launch options of each kernel on the device and keep the fastest
  // (cached per kernel for the worker's life); the result's `search` lists the choices.
  // timings: false skips the GPU timestamps of each batch (a training loop's chunk of steps
  // needs no per-kernel times, and reading them back is a second readback per step).
  async run(code, {
    device = this.device, reference = false, search = false, timings = true,
  } = {}) {
    const result = await this.callChecked('run', { code, device, reference, search, timings });
    const out = result.out;
    return {
      ...out, data: typedData(out.dtype, out.data), bytes: out.data,
      timings: result.timings || [], recreated: result.recreated, lostReason: result.lost_reason,
      pipelineMs: result.pipeline_ms, pipelineBusyMs: result.pipeline_busy_ms,
    };
  }

  // The last run of `code` (made with `reference: false`) compared with the PYTHON interpreter:
  // {ok, match, max_abs_error, mismatches, seconds} or {ok: false, error}. The page shows a
  // run's result first and this afterwards.
  async reference(code) {
    return (await this.callChecked('reference', { code })).reference;
  }

  // Load an ONNX model (its file's bytes): {inputs, outputs, histogram, nodes, opset, wgsl,
  // ptx} (each target {ok, kernels} or {ok: false, error}); a bad model rejects with its typed
  // error (ModelError, UnsupportedError, LimitError).
  loadModel(bytes, { arch = 'sm_80', seed = 0 } = {}) {
    return this.callChecked('loadModel', { data: bytes, arch, seed });
  }

  // Run the loaded model on its reproducible random inputs for `seed`, or on `inputs` ({name:
  // Uint8Array of the raw little-endian values, in the declared shape and dtype}): {outputs,
  // inputs (each {name, shape, dtype, data: a typed array}), seconds, device, timings, compiled
  // (kernels compiled in Python), compile_s, stored (kernels from the browser's store),
  // pipeline_ms, pipeline_busy_ms (its pipeline builds: see run)}.
  async runModel({ seed = 0, device = this.device, inputs = null } = {}) {
    const result = await this.callChecked('runModel', { seed, device, inputs });
    const typed = (t) => ({ ...t, data: typedData(t.dtype, t.data) });
    return { ...result, outputs: result.outputs.map(typed), inputs: result.inputs.map(typed),
      timings: result.timings || [] };
  }

  // Generate tokens from a causal LM in the transformers.js / Optimum ONNX layout (`bytes`: its
  // file; null reuses the one given last) after `prompt` (token ids): greedy, or sampled with
  // temperature / topK / topP / seed; stops after a token in `stop`; onToken(token) is called
  // as each one is read back. Resolves to {tokens, seconds, device}.
  async generate(bytes, prompt, {
    maxNewTokens = 32, temperature = 0, topK = 0, topP = 1, seed = 0, stop = [],
    device = this.device, onToken = null,
  } = {}) {
    const options = JSON.stringify({ prompt: Array.from(prompt, Number),
      max_new_tokens: maxNewTokens, temperature, top_k: topK, top_p: topP, seed, stop, device });
    this.onToken = onToken;
    try {
      return await this.callChecked('generate', { data: bytes, options });
    } finally {
      this.onToken = null;
    }
  }

  // Forget the loaded model: its buffers freed and every compiled pipeline dropped (before
  // loading another, so the GPU holds one model at a time): {freed, buffers, pipelines}.
  unloadModel() {
    return this.callChecked('unloadModel', {});
  }

  // The last runModel compared with the PYTHON interpreter: {comparisons: [{name, match,
  // max_abs_error, mismatches}], seconds}.
  compareModel() {
    return this.callChecked('compareModel');
  }

  // Run the program's PTX on the simulator and compare it with the WebGPU (or PYTHON) result.
  verify(code, { arch = 'sm_80' } = {}) {
    return this.callChecked('verify', { code, arch });
  }

  // Run test modules (name -> source) inside Pyodide with kernelgen's small test runner.
  selfTest(files) {
    return this.callChecked('selftest', { files });
  }

  // Destroy the GPU device as a crash would (the next run makes a new one). For tests.
  loseDevice() {
    return this.call('loseDevice');
  }

  terminate() {
    this.worker.terminate();
    this.failAll('kernelgen was terminated');
  }
}

// Start kernelgen. `base`: the URL of the site root holding web/ and pyodide/ (default: the
// folder above this module). `webgpu: false` runs everything on the PYTHON device;
// `compatibility: true` asks for a compatibility-mode adapter; `onProgress` gets load steps.
// `early`: a worker a page started before this module loaded ({worker, early}, made by
// startEarly), so Pyodide boots while the rest of the page loads. `prebuild` (on by default)
// builds the pipelines the last page load's first run launched, in that order, while Python
// boots (worker.js prebuildStored): warm first result, main -> this, a browser restarted on its
// profile, load 11-24, one sample each: ResNet-50 SwiftShader 50.2 -> 26.8 s, lavapipe 19.1 ->
// 17.9 s; SqueezeNet SwiftShader 20.0 -> 16.6 s, lavapipe 20.0 -> 20.3 s (bench/warm_reload.py).
export async function createKernelgen({ base, webgpu = true, compatibility = false,
                                        onProgress, early, prebuild = true } = {}) {
  const root = new URL(base || '../', base ? globalThis.location?.href : import.meta.url);
  const kg = early ? new Kernelgen(early.worker, onProgress, early.messages)
    : new Kernelgen(startWorker(root), onProgress);
  kg.info = await kg.call('boot', { webgpu, compatibility, prebuild });
  return kg;
}
