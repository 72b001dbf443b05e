// The WebGPU executor's command batches (gpu.js's header says how kernels are batched): one
// command encoder, one pair of error scopes and one timestamp query set for up to BATCH_KERNELS
// kernels; flush() submits the open batch, settle() awaits the verdicts of those submitted, and
// the timestamps come back through takeTimings().

import { GpuDevice, KernelError } from './gpu_device.js';

// Kernels encoded into one command buffer at most before it is submitted (and timed together).
export const BATCH_KERNELS = 64;

export class GpuBatches extends GpuDevice {
  openBatch(device) {
    if (this.batch) return this.batch;
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    // GPU timestamps only when asked for (runTimed, timeBatches): resolving and reading them back
    // is a second readback per batch that a training step would pay for nothing
    const timed = (this.timing || this.timeBatches) && device.features.has('timestamp-query');
    this.batch = {
      device, encoder: device.createCommandEncoder(), names: [], uniforms: [],
      querySet: timed ? device.createQuerySet({ type: 'timestamp', count: 2 * BATCH_KERNELS })
        : null,
    };
    this.stats.batches += 1;
    queueMicrotask(() => this.flush());   // once the caller yields (Python waits or returns)
    return this.batch;
  }

  // Submit the open batch and pop its error scopes (their verdict goes to `checks`).
  flush() {
    const batch = this.batch;
    if (!batch) return;
    this.batch = null;
    const { device, encoder, names } = batch;
    if (device !== this.device) return;   // lost: its scopes and work went with it
    const times = batch.querySet ? this.resolveTimes(batch, encoder) : null;
    device.queue.submit([encoder.finish()]);
    this.stats.submits += 1;
    const validation = device.popErrorScope();
    const memory = device.popErrorScope();
    this.checks.push(Promise.all([validation, memory]).then(([invalid, oom]) => {
      const which = names.length === 1 ? `kernel ${names[0]}` : `one of the kernels ` +
        `${names.join(', ')}`;
      if (oom) return new KernelError('LimitError', `out of GPU memory running ${which}: ` +
        oom.message);
      return invalid ? new KernelError('DeviceError', `WebGPU rejected the dispatch of ` +
        `${which}: ${invalid.message}`) : null;
    }, (error) => new KernelError('DeviceError', `checking kernels ${names.join(', ')} ` +
      `failed: ${error.message}`)));
    batch.uniforms.forEach((uniform) => uniform.destroy());
    if (times) this.pendingTimings.push(times());
  }

  // Wait for the verdicts of the batches submitted so far; throws the first error.
  async settle() {
    this.flush();
    if (!this.checks.length) return;
    const checks = this.checks;
    this.checks = [];
    this.stats.scopeWaits += 1;
    const error = (await Promise.all(checks)).find((found) => found);
    if (error) throw error;
  }

  // The batch's timestamps resolved into a buffer to read: a function returning the promise of
  // its kernels' [{name, ms}].
  resolveTimes(batch, encoder) {
    const { device, querySet, names } = batch;
    const count = 2 * names.length;
    const resolved = device.createBuffer({
      size: 8 * count, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
    });
    const readback = device.createBuffer({
      size: 8 * count, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    encoder.resolveQuerySet(querySet, 0, count, resolved, 0);
    encoder.copyBufferToBuffer(resolved, 0, readback, 0, 8 * count);
    return async () => {
      try {
        await readback.mapAsync(GPUMapMode.READ);
        const stamps = new BigUint64Array(readback.getMappedRange());
        return names.map((name, i) => ({ name, ms: Number(stamps[2 * i + 1] - stamps[2 * i]) / 1e6 }));
      } finally {
        readback.destroy();
        resolved.destroy();
        querySet.destroy();
      }
    };
  }

  // The GPU times of the kernels run since the last call: [{name, ms}] (empty without
  // timestamp queries, and unless timeBatches is set).
  async takeTimings() {
    const pending = this.pendingTimings;
    this.pendingTimings = [];
    this.flush();
    const settled = await Promise.allSettled([...pending, ...this.pendingTimings.splice(0)]);
    return settled.filter((s) => s.status === 'fulfilled').flatMap((s) => s.value);
  }
}
