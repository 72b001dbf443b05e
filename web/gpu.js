// The WebGPU executor: runs kernelgen's plain launch descriptions (program.Launch.to_json()) on
// navigator.gpu. Works in a page and in a Web Worker. Python never touches WebGPU objects: it
// passes sources, sizes and bytes here (runtime/webgpu_browser.py) and gets bytes back.
// One concept, the page's WebGPU runtime, in one class built up a layer per file, each
// extending the one before:
//   gpu_device.js     GpuDevice: adapter, device, features and limits, device loss, the state
//   gpu_batches.js    GpuBatches: command batches, their error scopes and timestamps
//   gpu_buffers.js    GpuBuffers: buffers, uploads and read backs
//   gpu_pipelines.js  GpuPipelines: shader source, pipelines shared by source, lavapipe's settle
//   gpu.js            GpuExecutor: a kernel's launch (limits, bind group, dispatch)
//   gpu_bindings.js   the bind group layout and the packing of scalar arguments (functions)
//
//   const gpu = new GpuExecutor({ compatibility: false });
//   const info = await gpu.init();          // {available, reason?, adapter, features, limits}
//   const a = gpu.alloc(16); gpu.write(a, bytes);
//   await gpu.run(launch, [a, b], []);      // throws a KernelError {type, message, line}
//   const out = await gpu.read(b);          // Uint8Array
//
// Kernels are batched: enqueue() (what Python calls per kernel) encodes a dispatch into the open
// batch and returns at once when the pipeline is compiled. A batch is one command encoder, one
// pair of error scopes and one timestamp query set for up to BATCH_KERNELS kernels; flush()
// submits it (before any write, read, free or buffer growth, when full, and in a microtask once
// the caller yields) and pops its scopes; settle() (read() calls it) awaits those pops and
// throws the first error as a KernelError naming the batch's kernels. `stats` counts the
// submits, batches, kernels, workgroups dispatched and awaited scope pops (tests check that a
// steady training step awaits nothing per kernel, and that a symbolic size dispatches fewer).

import { boundRange, packUniforms, uniformSlot } from './gpu_bindings.js';
import { BATCH_KERNELS } from './gpu_batches.js';
import { KernelError } from './gpu_device.js';
import { GpuPipelines, pipelineKey } from './gpu_pipelines.js';

export { KernelError };

export class GpuExecutor extends GpuPipelines {
  checkLaunchLimits(launch) {
    const limits = this.requireDevice().limits;
    const [x, y, z] = launch.workgroup_size;
    const fail = (what) => {
      throw new KernelError('LimitError', `kernel ${launch.entry_point}: ${what}`);
    };
    if (x * y * z > limits.maxComputeInvocationsPerWorkgroup) {
      fail(`a workgroup of ${x}x${y}x${z} = ${x * y * z} threads is more than this device ` +
        `allows (${limits.maxComputeInvocationsPerWorkgroup}); use smaller local sizes`);
    }
    const storage = launch.bindings.filter((binding) => binding.kind !== 'uniform').length;
    if (storage > limits.maxStorageBuffersPerShaderStage) {
      fail(`${storage} storage buffers in one kernel is more than this device allows ` +
        `(${limits.maxStorageBuffersPerShaderStage} storage buffers per stage); ` +
        'use fewer inputs per kernel (realize() intermediate results)');
    }
    const most = Math.max(...launch.dispatch);
    if (most > limits.maxComputeWorkgroupsPerDimension) {
      fail(`a grid of ${most} workgroups in one dimension is more than this device allows ` +
        `(${limits.maxComputeWorkgroupsPerDimension})`);
    }
  }

  // Queue one kernel: `ids` are buffer ids in binding order, `values` the scalar arguments in
  // launch.uniforms order; `dispatch` the workgroups to launch (a symbolic size's run-time grid
  // needs fewer than launch.dispatch: Python's launch_dispatch). Returns undefined once encoded
  // into the open batch, or (when its pipeline must be compiled first, or an earlier kernel's is
  // being compiled) a promise that resolves once it is; errors of the dispatch itself come from
  // settle() (read() calls it).
  enqueue(launch, ids, values = [], name = launch.entry_point, dispatch = launch.dispatch) {
    this.checkLaunchLimits(launch);
    const entry = this.waiting ? null : this.cachedPipeline(launch);
    if (entry) {
      this.encode(entry, launch, ids, values, name, dispatch);
      return undefined;   // None in Python (null would be a JsNull)
    }
    this.waiting += 1;
    const done = this.tail.then(() => this.pipeline(launch))
      .then((compiled) => this.encode(compiled, launch, ids, values, name, dispatch))
      .finally(() => { this.waiting -= 1; });
    this.tail = done.catch(() => {});
    return done;
  }

  // Run one kernel: resolves once submitted and validated; errors reject as KernelError.
  async run(launch, ids, values = [], name = launch.entry_point, dispatch = launch.dispatch) {
    await this.enqueue(launch, ids, values, name, dispatch);
    await this.settle();
  }

  encode({ pipeline, layout }, launch, ids, values, name, dispatch = launch.dispatch) {
    const device = this.requireDevice();
    launch.bindings.forEach((binding, index) => this.ensureSize(ids[index], binding.nbytes));
    const batch = this.openBatch(device);
    const uniform = this.uniformBuffer(launch, values);
    if (uniform) batch.uniforms.push(uniform);
    const at = 2 * batch.names.length;
    const pass = batch.encoder.beginComputePass(batch.querySet ? { timestampWrites: {
      querySet: batch.querySet, beginningOfPassWriteIndex: at, endOfPassWriteIndex: at + 1,
    } } : {});
    pass.setPipeline(pipeline);
    this.launchOrder?.add(pipelineKey(launch));
    pass.setBindGroup(0, this.bindGroup(launch, layout, ids, uniform));
    pass.dispatchWorkgroups(...dispatch);
    pass.end();
    batch.names.push(name);
    this.stats.kernels += 1;
    this.stats.workgroups += dispatch[0] * dispatch[1] * dispatch[2];
    if (batch.names.length >= BATCH_KERNELS) this.flush();
  }

  uniformBuffer(launch, values) {
    if (!launch.uniforms?.length) return null;
    const data = packUniforms(launch.uniforms, values);
    const buffer = this.device.createBuffer({
      size: data.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    this.device.queue.writeBuffer(buffer, 0, data);
    return buffer;
  }

  bindGroup(launch, layout, ids, uniform) {
    launch.bindings.forEach((binding, index) => this.ensureSize(ids[index], binding.nbytes));
    const entries = launch.bindings.map((binding, index) => ({
      binding: binding.slot, resource: boundRange(binding, this.handle(ids[index]).buffer),
    }));
    if (uniform) entries.push({ binding: uniformSlot(launch), resource: { buffer: uniform } });
    return this.device.createBindGroup({ layout, entries });
  }

  // Run one kernel and wait for it; resolves to its milliseconds: the GPU timestamps where the
  // device has 'timestamp-query', else the wall time until the queue has drained (the search
  // mode compares these).
  async runTimed(launch, ids, values = [], name = launch.entry_point, dispatch = launch.dispatch) {
    await this.settle();
    const queued = this.pendingTimings.length;
    const start = performance.now();
    this.timing = true;
    try {
      await this.run(launch, ids, values, name, dispatch);
    } finally {
      this.timing = false;
    }
    await this.requireDevice().queue.onSubmittedWorkDone();
    const wall = performance.now() - start;
    const timing = this.pendingTimings.length > queued ? await this.pendingTimings.pop() : [];
    const ms = timing.length ? timing.at(-1).ms : 0;
    return ms > 0 ? ms : wall;
  }
}
