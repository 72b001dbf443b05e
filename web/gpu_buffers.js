// The WebGPU executor's buffers (gpu.js lists its layers): allocation under the device's limits,
// uploads (write), read backs (read, readMany: one staging buffer, one map) and growth
// (ensureSize). Each submits the open batch first, so the kernels queued before it see the
// buffer as it was.

import { roundUp } from './gpu_bindings.js';
import { GpuBatches } from './gpu_batches.js';
import { KernelError } from './gpu_device.js';

// Buffer sizes are rounded up to this (WebGPU copies need multiples of 4; 16 suits vec4 access).
const ALIGN = 16;

export class GpuBuffers extends GpuBatches {
  checkBufferSize(nbytes) {
    const limits = this.requireDevice().limits;
    const allowed = Math.min(limits.maxBufferSize, limits.maxStorageBufferBindingSize);
    if (nbytes > allowed) {
      throw new KernelError('LimitError', `a buffer of ${nbytes} bytes is larger than this ` +
        `device allows (${allowed} bytes: maxStorageBufferBindingSize/maxBufferSize); ` +
        'use smaller tensors or split the computation');
    }
  }

  alloc(nbytes) {
    this.checkBufferSize(nbytes);
    // UNIFORM too: a kernel may bind a small read-only input as a uniform buffer (bindingKind)
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_SRC |
      GPUBufferUsage.COPY_DST;
    const buffer = this.requireDevice().createBuffer({ size: roundUp(nbytes, ALIGN), usage });
    const id = this.nextId++;
    this.buffers.set(id, { buffer, nbytes });
    return id;
  }

  handle(id) {
    this.requireDevice();
    const entry = this.buffers.get(id);
    if (!entry) {
      throw new KernelError('DeviceError', `buffer ${id} does not exist on this device ` +
        '(was the device lost since it was made?); run again');
    }
    return entry;
  }

  write(id, bytes) {
    this.flush();   // the kernels queued before this write run before it
    const { buffer } = this.handle(id);
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const padded = new Uint8Array(roundUp(data.byteLength, 4));
    padded.set(data);
    this.device.queue.writeBuffer(buffer, 0, padded);
  }

  // The copies to a mappable buffer join the open batch, so a step's kernels and the read back of
  // their results are one submit (a decode step replayed under kg.jit: one per token).
  async read(id) {
    return (await this.readMany([id]))[0];
  }

  // The bytes of each buffer in `ids` (a Uint8Array each), copied into one staging buffer and read
  // through one map (a model call's outputs: kg.numpy_of); `stats.maps` counts the maps.
  async readMany(ids) {
    const device = this.device;
    const parts = [];
    let size = 0;
    for (const id of ids) {
      const { buffer, nbytes } = this.handle(id);
      parts.push({ buffer, nbytes, offset: size });
      size += roundUp(nbytes, 4);
    }
    const staging = device.createBuffer({
      size: Math.max(size, 4), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const batch = this.batch && this.batch.device === device ? this.batch : null;
    const encoder = batch ? batch.encoder : device.createCommandEncoder();
    for (const { buffer, nbytes, offset } of parts) {
      if (nbytes) encoder.copyBufferToBuffer(buffer, 0, staging, offset, roundUp(nbytes, 4));
    }
    this.flush();
    if (!batch) {
      device.queue.submit([encoder.finish()]);
      this.stats.submits += 1;
    }
    try {
      await this.settle();
    } catch (error) {
      staging.destroy();
      throw error;
    }
    try {
      await staging.mapAsync(GPUMapMode.READ);
      this.stats.maps += 1;
    } catch (error) {
      throw new KernelError('DeviceError', `reading a buffer failed: ${error.message}`);
    }
    const mapped = staging.getMappedRange(0, Math.max(size, 4));
    const out = parts.map(({ nbytes, offset }) =>
      new Uint8Array(mapped.slice(offset, offset + nbytes)));
    staging.destroy();
    return out;
  }

  free(id) {
    if (this.buffers.has(id)) this.flush();   // queued kernels may still use it
    this.buffers.get(id)?.buffer.destroy();
    this.buffers.delete(id);
  }

  // Grow a buffer (keeping its bytes) to what a binding needs, e.g. after packing.
  ensureSize(id, nbytes) {
    const entry = this.handle(id);
    if (entry.buffer.size >= nbytes) return;
    this.flush();   // the queued kernels use the buffer as it is
    const bigger = this.device.createBuffer({ size: roundUp(nbytes, ALIGN), usage: entry.buffer.usage });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(entry.buffer, 0, bigger, 0, entry.buffer.size);
    this.device.queue.submit([encoder.finish()]);
    this.stats.submits += 1;
    entry.buffer.destroy();
    entry.buffer = bigger;
  }
}
