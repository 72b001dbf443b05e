// WebGPU plumbing (export/loader.js's part, joined into model.js by export/scripts.py): the
// device (its features and requiredLimits, made or checked), writes, each launch's pipeline
// (pipelineKey: launches that share one) and the timestamp queries of load({ timings }).

import { fail, roundUp4 } from './loader_common.js';

// what a launch's pipeline depends on: its source file, entry point, bindings and uniforms
export const pipelineKey = (k) => JSON.stringify([k.file, k.entry_point, k.features,
  k.bindings.map((b) => [b.slot, b.access, b.kind || 'storage']), (k.uniforms || []).length]);
export const uniformSlot = (kernel) => Math.max(-1, ...kernel.bindings.map((b) => b.slot)) + 1;
// a binding of kind 'uniform' (a small read-only input bound as a uniform buffer so that its
// kernel stays within the storage buffers) binds its nbytes from offset 0, else the whole buffer
const bindingType = (b) => b.kind === 'uniform' ? 'uniform'
  : b.access === 'read' ? 'read-only-storage' : 'storage';
export const boundRange = (b, buffer) => (b.kind === 'uniform'
  ? { buffer, offset: 0, size: b.nbytes } : { buffer });

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

// A device of the page's adapter with `features`, and those of `optional` the adapter has.
export async function newDevice(features, timings, limits, optional = []) {
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
  const extra = optional.filter((name) => adapter.features.has(name) && !features.includes(name));
  return adapter.requestDevice({ requiredFeatures: [...features, ...extra, ...timer],
    requiredLimits: requiredLimits(adapter, limits) });
}

export function checkDevice(device, manifest) {
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

export function write(device, buffer, data) {
  let bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.byteLength % 4) {
    const padded = new Uint8Array(roundUp4(bytes.byteLength));
    padded.set(bytes);
    bytes = padded;
  }
  if (bytes.byteLength) device.queue.writeBuffer(buffer, 0, bytes);
}

// The bind group layout of a launch: its bindings, then the symbolic sizes' uniform
export function layoutOf(device, kernel) {
  const entries = kernel.bindings.map((b) => ({
    binding: b.slot, visibility: GPUShaderStage.COMPUTE, buffer: { type: bindingType(b) },
  }));
  if (kernel.uniforms?.length) {     // the symbolic sizes' values, one i32 each
    entries.push({ binding: uniformSlot(kernel), visibility: GPUShaderStage.COMPUTE,
      buffer: { type: 'uniform' } });
  }
  return device.createBindGroupLayout({ entries });
}

// {pipeline, layout} of a launch, its bind group layout `layout` (layoutOf)
export async function pipeline(device, kernel, source, layout = layoutOf(device, kernel)) {
  const code = (kernel.features.includes('subgroups') ? 'enable subgroups;\n' : '') + source;
  const module = device.createShaderModule({ code, label: kernel.name });
  const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
  if (errors.length) {
    fail(`kernel ${kernel.name}'s WGSL did not compile on this device: ` +
      `${errors.map((m) => `line ${m.lineNum}: ${m.message}`).join('; ')} ` +
      '(a kernelgen bug: report it with the bundle)');
  }
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
export class Timer {
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
