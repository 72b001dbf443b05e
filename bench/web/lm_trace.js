// Where a bundle's time to first token goes, for bench/lm_page.py (issues 35 and 37): while a
// trace is open (start() .. stop()), the page's fetches (until their bodies are read), queue
// writes (writeBuffer: the weights' upload) and pipeline builds (createShaderModule's label and
// WGSL lines, createComputePipelineAsync's start and end) are logged against the trace's clock,
// by wrapping the browser's prototypes (installed once, before anything runs).

let trace = null;                 // the open trace: {t0, fetches, writes, pipelines, marks}
const modules = new WeakMap();    // shader module -> {label, lines, at}

const now = () => performance.now() - trace.t0;

function wrapFetch() {
  const original = globalThis.fetch;
  globalThis.fetch = function traced(input, init) {
    const open = trace;
    if (!open) return original.call(this, input, init);
    const entry = { url: String(input?.url ?? input), start: now(), headers: null, end: null,
      bytes: null };
    open.fetches.push(entry);
    return original.call(this, input, init).then((response) => {
      entry.headers = now();
      for (const read of ['arrayBuffer', 'text', 'json']) {
        const body = response[read].bind(response);
        response[read] = () => body().then((value) => {
          if (trace === open) {
            entry.end = now();
            entry.bytes = value?.byteLength ?? value?.length ?? null;
          }
          return value;
        });
      }
      return response;
    });
  };
}

function wrapGpu() {
  if (!('gpu' in navigator)) return;
  const write = GPUQueue.prototype.writeBuffer;
  GPUQueue.prototype.writeBuffer = function traced(buffer, offset, data, ...rest) {
    if (!trace) return write.call(this, buffer, offset, data, ...rest);
    const start = now();
    const result = write.call(this, buffer, offset, data, ...rest);
    trace.writes.push({ start, end: now(), bytes: data?.byteLength ?? 0 });
    return result;
  };
  const shader = GPUDevice.prototype.createShaderModule;
  GPUDevice.prototype.createShaderModule = function traced(descriptor) {
    const module = shader.call(this, descriptor);
    if (trace) {
      modules.set(module, { label: descriptor.label || '', at: now(),
        lines: String(descriptor.code).split('\n').length });
    }
    return module;
  };
  const make = GPUDevice.prototype.createComputePipelineAsync;
  GPUDevice.prototype.createComputePipelineAsync = function traced(descriptor) {
    const open = trace;
    const made = make.call(this, descriptor);
    if (!open) return made;
    const entry = { ...(modules.get(descriptor.compute?.module) || {}), start: now(), end: null };
    open.pipelines.push(entry);
    return made.then((pipeline) => {
      if (trace === open) entry.end = now();
      return pipeline;
    });
  };
}

wrapFetch();
wrapGpu();

// Opens a trace: the clock starts now.
export function start() {
  trace = { t0: performance.now(), fetches: [], writes: [], pipelines: [], marks: {} };
}

// Marks `name` at the trace's clock now (ms since start()).
export function mark(name) {
  if (trace) trace.marks[name] = now();
}

// Closes the trace: its events, plain data.
export function stop() {
  const out = trace;
  trace = null;
  return out && { fetches: out.fetches, writes: out.writes, pipelines: out.pipelines,
    marks: out.marks };
}
