// A WebGPU bundle's pipelines in the page, for bench/bundle_load.py (issue 37): `load` times
// model.js's load() (every pipeline created at once, as a page does) to the model ready;
// `perKernel` creates each distinct pipeline of the manifest alone, one after another, and times
// each (shader module + createComputePipelineAsync: Tint and the driver's compile). Playwright
// calls window.bundleLoad.*; each returns plain data.
import { describe, largestLimits } from './bench_device.js';

let devicePromise = null;

function device() {
  devicePromise ??= (async () => {
    const adapter = await navigator.gpu.requestAdapter();
    const dev = await adapter.requestDevice({ requiredLimits: largestLimits(adapter) });
    return { dev, adapter: describe(adapter.info) };
  })();
  return devicePromise;
}

// The manifest's launches: each kernel, then its variants (their fields over the kernel's).
const launches = (manifest) => manifest.kernels.flatMap((k) => [k,
  ...(k.variants || []).map((v) => ({ ...k, variants: undefined, ...v }))]);

// The bind group layout of a launch: its storage bindings, then a uniform for symbolic sizes.
function layoutOf(dev, k) {
  const entries = k.bindings.map((b) => ({ binding: b.slot, visibility: GPUShaderStage.COMPUTE,
    buffer: { type: b.access === 'read' ? 'read-only-storage' : 'storage' } }));
  if (k.uniforms?.length) {
    entries.push({ binding: Math.max(-1, ...k.bindings.map((b) => b.slot)) + 1,
      visibility: GPUShaderStage.COMPUTE, buffer: { type: 'uniform' } });
  }
  return dev.createPipelineLayout({ bindGroupLayouts: [dev.createBindGroupLayout({ entries })] });
}

const pipelineKey = (k, code) => JSON.stringify([code.split(k.entry_point).join('main'),
  k.bindings.map((b) => [b.slot, b.access]), (k.uniforms || []).length, k.features]);

window.bundleLoad = {
  async info() {
    return { adapter: (await device()).adapter };
  },

  // model.js's load() of the bundle at `base` on the page's device: {ms, total} (total: the
  // pipelines it reported creating through onProgress)
  async load(base) {
    const { dev } = await device();
    const { load } = await import(`${base}model.js`);
    let total = 0;
    const start = performance.now();
    const model = await load({ device: dev, base, onProgress: (p) => { total = p.total; } });
    const ms = performance.now() - start;
    model.destroy();
    return { ms, total };
  },

  // Each distinct pipeline of the bundle at `base` created alone, in launch order:
  // [{name, lines, copies, ms}]
  async perKernel(base) {
    const { dev } = await device();
    const manifest = await (await fetch(`${base}manifest.json`)).json();
    const rows = new Map();
    for (const k of launches(manifest)) {
      const source = await (await fetch(`${base}${k.file}`)).text();
      const key = pipelineKey(k, source);
      if (rows.has(key)) {
        rows.get(key).copies += 1;
        continue;
      }
      const code = (k.features.includes('subgroups') ? 'enable subgroups;\n' : '') + source;
      const start = performance.now();
      const module = dev.createShaderModule({ code });
      await dev.createComputePipelineAsync({ layout: layoutOf(dev, k),
        compute: { module, entryPoint: k.entry_point } });
      rows.set(key, { name: k.name, lines: source.split('\n').length, copies: 1,
        ms: performance.now() - start });
    }
    return [...rows.values()];
  },
};
document.body.dataset.ready = '1';
