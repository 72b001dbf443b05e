// The WebGPU executor's pipelines (gpu.js lists its layers): a launch's WGSL as the browser takes
// it, its shader module and compute pipeline, built once per source (prepare starts a build
// without waiting for it; pipeline awaits it).
//
// On Mesa's lavapipe (Chromium's compatibility mode runs on it through ANGLE), a pipeline whose
// shader reads uniforms (a symbolic kernel's dims) is settled once it is built (settleInlining):
// lavapipe inlines the uniforms that loop bounds read and compiles the shader again at every
// dispatch until one inlined shader keeps most of the plain one's size; a dispatch of no
// workgroups with every uniform at SETTLE_VALUE does that first (runtime/uniform_inlining.py,
// the native runtime's same step). `stats.inliningSettles` counts them.

import { boundRange, layoutEntries, packUniforms, uniformSlot } from './gpu_bindings.js';
import { GpuBuffers } from './gpu_buffers.js';
import { KernelError } from './gpu_device.js';

// The dims' value in a lavapipe pipeline's settling dispatch, and the bytes of each stand-in
// buffer it binds (runtime/uniform_inlining.py: SETTLE_VALUE, STAND_IN_BYTES).
const SETTLE_VALUE = 1 << 16;
const STAND_IN_BYTES = 256;

// What a launch's pipeline depends on: its source but for the entry point's name, so that
// kernels of one structure under other names (a model's layers, `_n2`, `_n3`...) share one
// pipeline (uop/program.py unnamed_source; only the dispatch names the entry point).
export const pipelineKey = (launch) => launch.source
  .split(new RegExp(`\\b${launch.entry_point}\\b`)).join('\0');

// A short name of a pipeline key (two 32-bit FNV-1a hashes, hex) for the stored launch order
// (worker.js saveLaunchOrder): a collision only misorders a prebuild, never picks a pipeline.
export function sourceHash(text) {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

export class GpuPipelines extends GpuBuffers {
  // Forget every compiled pipeline (a run compiles its kernels again); returns how many.
  clearPipelines() {
    const count = this.pipelines.size;
    this.pipelines.clear();
    this.making.clear();
    this.launchPipelines = new WeakMap();
    return count;
  }

  // Start creating a launch's pipeline (createComputePipelineAsync) without waiting for it:
  // Python calls this for each kernel as soon as it is compiled (and for all of a kept plan's
  // kernels at once), so the driver compiles them together while Python goes on. A failure is
  // thrown where the pipeline is needed (pipeline()).
  prepare(launch) {
    const key = pipelineKey(launch);
    if (!this.device || this.pipelines.has(key) || this.making.has(key)) return undefined;
    const device = this.device;
    const made = this.compile(launch).then((entry) => {
      if (this.making.get(key) === made && this.device === device) {
        this.pipelines.set(key, entry);
        this.stats.pipelinesMade += 1;
      }
      return entry;
    }).finally(() => {
      if (this.making.get(key) === made) this.making.delete(key);
      this.onPipelines?.({ made: this.stats.pipelinesMade, making: this.making.size });
    });
    made.catch(() => {});   // reported by pipeline(), where the kernel runs
    this.making.set(key, made);
    this.stats.mostMaking = Math.max(this.stats.mostMaking, this.making.size);
    this.onPipelines?.({ made: this.stats.pipelinesMade, making: this.making.size });
    return undefined;   // None in Python
  }

  // Where a launch's pipeline is: 'ready' (built), 'making' (prepare's build under way) or
  // 'none' (never prepared, dropped, or its build failed: pipeline() builds it or says why).
  // A kept plan swaps a larger kernel in once it is no longer 'making' (realize.py _swap).
  pipelineState(launch) {
    const key = pipelineKey(launch);
    if (this.pipelines.has(key)) return 'ready';
    return this.making.has(key) ? 'making' : 'none';
  }

  // The compute pipeline for a launch, compiled once per (source, entry point).
  async pipeline(launch) {
    const key = pipelineKey(launch);
    let entry = this.pipelines.get(key);
    if (!entry) {
      if (!this.making.has(key)) this.prepare(launch);
      entry = await (this.making.get(key) || this.compile(launch));
      this.pipelines.set(key, entry);
    }
    this.launchPipelines.set(launch, { entry, device: this.device });
    return entry;
  }

  // The compiled pipeline of a launch object seen before on this device, or null.
  cachedPipeline(launch) {
    const known = this.launchPipelines.get(launch);
    if (known && known.device === this.device) return known.entry;
    const entry = this.pipelines.get(pipelineKey(launch));
    if (entry) this.launchPipelines.set(launch, { entry, device: this.device });
    return entry || null;
  }

  // The launch's WGSL as Tint takes it: the source names no `enable subgroups;` (naga rejects
  // the directive, Tint requires it), so it is prepended for a launch that lists the feature.
  shaderSource(launch) {
    const features = launch.features || [];
    const missing = features.filter((name) => !this.requireDevice().features.has(name));
    if (missing.length) {
      throw new KernelError('DeviceError', `kernel ${launch.entry_point} needs the WebGPU ` +
        `feature(s) ${missing.join(', ')}, which this device does not have: compile it with ` +
        `subgroups=False`);
    }
    return { prefix: features.includes('subgroups') ? 1 : 0,
      code: (features.includes('subgroups') ? 'enable subgroups;\n' : '') + launch.source };
  }

  // compile(launch), timed into stats.pipelineMs and stats.pipelineBusyMs (its bytes counted).
  async compile(launch) {
    const start = performance.now();
    this.stats.pipelineBuilds += 1;
    if (this.building++ === 0) this.busySince = start;
    try {
      return await this.build(launch);
    } finally {
      const end = performance.now();
      this.stats.pipelineMs += end - start;
      this.stats.pipelineBytes += launch.source.length;
      if (--this.building === 0) this.stats.pipelineBusyMs += end - this.busySince;
    }
  }

  // The shader module and compute pipeline of a launch (a typed error where it fails).
  async build(launch) {
    const device = this.requireDevice();
    const { code, prefix } = this.shaderSource(launch);
    const module = device.createShaderModule({ code, label: launch.entry_point });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((message) => message.type === 'error');
    if (errors.length) {
      const first = errors[0];
      const text = errors.map((m) => `line ${m.lineNum - prefix}:${m.linePos}: ${m.message}`)
        .join('\n');
      throw new KernelError('CompileError',
        `the WGSL of kernel ${launch.entry_point} did not compile:\n${text}`,
        first.lineNum - prefix);
    }
    const layout = device.createBindGroupLayout({ entries: layoutEntries(launch) });
    const pipelineLayout = device.createPipelineLayout({ bindGroupLayouts: [layout] });
    try {
      const pipeline = await device.createComputePipelineAsync({
        layout: pipelineLayout, compute: { module, entryPoint: launch.entry_point },
      });
      if (this.settlesInlining && launch.uniforms?.length) {
        this.settleInlining(device, pipeline, layout, launch);
      }
      return { pipeline, layout };
    } catch (error) {
      const type = /workgroup|limit|exceed/i.test(error.message) ? 'LimitError' : 'CompileError';
      throw new KernelError(type,
        `the WebGPU pipeline for kernel ${launch.entry_point} failed: ${error.message}`);
    }
  }

  // Submit one dispatch of no workgroups of `pipeline` with every uniform at SETTLE_VALUE, on
  // stand-in buffers (see the header: lavapipe stops inlining the uniforms for good). A failure
  // here is only reported: the kernel's own runs check themselves.
  settleInlining(device, pipeline, layout, launch) {
    launch.bindings.forEach((binding, index) => {    // a uniform binding reads its nbytes
      const size = Math.max(STAND_IN_BYTES, binding.nbytes);
      if (index < this.standIns.length && this.standIns[index].size >= size) return;
      this.standIns[index] = device.createBuffer({
        size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.UNIFORM });
    });
    const values = launch.uniforms.map(() => SETTLE_VALUE);
    const data = packUniforms(launch.uniforms, values);
    const uniform = device.createBuffer({ size: data.byteLength,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(uniform, 0, data);
    const entries = launch.bindings.map((binding, index) => ({
      binding: binding.slot, resource: boundRange(binding, this.standIns[index]),
    }));
    entries.push({ binding: uniformSlot(launch), resource: { buffer: uniform } });
    device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, device.createBindGroup({ layout, entries }));
    pass.dispatchWorkgroups(0, 0, 0);
    pass.end();
    device.queue.submit([encoder.finish()]);
    device.popErrorScope().then((error) => {
      if (error) console.warn(`kernelgen gpu: settling ${launch.entry_point}: ${error.message}`);
    }, () => {});
    uniform.destroy();
    this.stats.inliningSettles += 1;
  }
}
