// Which form of each kernel runs (export/loader.js's part, joined into model.js by
// export/scripts.py; export/alternates.py writes the forms): a kernel entry may carry a second
// form compiled with subgroups (its `subgroups` field: launch fields over the kernel's own).
// Those forms run only on a device with the `subgroups` feature whose quads pass a one-time probe
// (lowering/quad_share.py shares loads across the four lanes of a quad, lanes (id & ~3) + j of
// consecutive local ids); anywhere else the plain forms run, with the same numbers.

import { fail } from './loader_common.js';

const FORM = 'subgroups';         // the field of a kernel entry that holds its subgroups form
const FIELDS = ['file', 'entry_point', 'workgroup_size', 'dispatch', 'global_size', 'local_size',
  'features', 'grid', 'work', 'variants'];
const LANES = 64;                 // the probe's workgroup: 16 quads, two workgroups
const probes = new WeakMap();     // device -> the probe's Promise (once per device)

// The probe: each lane writes what quadBroadcast gives it from each lane j of its quad.
export const PROBE = `enable subgroups;
@group(0) @binding(0) var<storage, read_write> seen: array<u32>;
@compute @workgroup_size(${LANES})
fn main(@builtin(local_invocation_index) i: u32, @builtin(workgroup_id) g: vec3<u32>) {
  let at = (g.x * ${LANES}u + i) * 4u;
  seen[at] = quadBroadcast(i, 0u);
  seen[at + 1u] = quadBroadcast(i, 1u);
  seen[at + 2u] = quadBroadcast(i, 2u);
  seen[at + 3u] = quadBroadcast(i, 3u);
}`;

// Throws unless `m.optional_features` and every kernel's subgroups form are what kg.export writes.
export function checkForms(m) {
  const bad = (what) => fail(`the manifest's ${what} is damaged: re-export the bundle`);
  const three = (v, least) => Array.isArray(v) && v.length === 3 &&
    v.every((d) => Number.isSafeInteger(d) && d >= least);
  const launch = (f) => typeof f?.file === 'string' && f.file.length > 0 &&
    typeof f.entry_point === 'string' && /^[A-Za-z_]\w*$/.test(f.entry_point) &&
    three(f.workgroup_size, 1) && three(f.dispatch, 0) &&
    Array.isArray(f.features) && f.features.every((name) => typeof name === 'string');
  const any = m.kernels.some((k) => k?.[FORM] !== undefined);
  if (m.optional_features !== undefined && !(any && Array.isArray(m.optional_features) &&
    m.optional_features.length === 1 && m.optional_features[0] === FORM)) {
    bad('optional_features');
  }
  m.kernels.forEach((k, i) => {
    const form = k[FORM];
    if (form === undefined) return;
    if (!(form && typeof form === 'object' && !Array.isArray(form) && launch(form) &&
      Object.keys(form).every((key) => FIELDS.includes(key)) &&
      (form.variants === undefined || (Array.isArray(form.variants) && form.variants.every((v) =>
        typeof v?.dim === 'string' && Number.isSafeInteger(v.most) && v.most >= 0 &&
        launch(v) && [undefined, true].includes(v.exact)))))) {
      bad(`kernels[${i}].${FORM}`);
    }
  });
}

// Every launch the forms name (forms and their variants), for their files' URLs to be checked.
export const formLaunches = (kernels) => kernels.flatMap((k) => (k[FORM]
  ? [k[FORM], ...(k[FORM].variants || [])] : []));

// Whether quadBroadcast on `device` gives lane i of a workgroup lane (i & ~3) + j's value, for
// every lane and j: runs PROBE once per device. `source` stands in for PROBE (a test's hook).
async function probe(device, source) {
  const count = 2 * LANES * 4;
  const seen = device.createBuffer({ size: 4 * count,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const back = device.createBuffer({ size: 4 * count,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  let good = false;
  try {
    if (await dispatchProbe(device, source, seen, back)) {
      await back.mapAsync(GPUMapMode.READ);
      const got = new Uint32Array(back.getMappedRange().slice(0));
      back.unmap();
      good = got.every((value, at) => value === ((Math.floor(at / 4) % LANES) & ~3) + (at % 4));
    }
  } catch {
    good = false;               // the device was lost meanwhile: load() reports that later
  }
  seen.destroy();
  back.destroy();
  return good;
}

// Runs `source` over two workgroups into `seen`, copied to `back`: false where it does not
// compile or validate (no quad operations on this device).
async function dispatchProbe(device, source, seen, back) {
  device.pushErrorScope('validation');
  try {
    const module = device.createShaderModule({ code: source, label: 'kernelgen quad probe' });
    const made = await device.createComputePipelineAsync({ layout: 'auto',
      compute: { module, entryPoint: 'main' } });
    const group = device.createBindGroup({ layout: made.getBindGroupLayout(0),
      entries: [{ binding: 0, resource: { buffer: seen } }] });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(made);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(2);
    pass.end();
    encoder.copyBufferToBuffer(seen, 0, back, 0, seen.size);
    device.queue.submit([encoder.finish()]);
  } catch {
    await device.popErrorScope();
    return false;
  }
  return !(await device.popErrorScope());
}

// {kernels, form, probe}: the manifest's kernels as they run on `device` (each its subgroups
// form, or each without it), 'subgroups' or 'plain', and the probe's result ('passed',
// 'failed', or 'not run' where no kernel has the form or the device lacks the feature).
export async function chooseForms(device, kernels) {
  const plain = kernels.map((k) => { const { [FORM]: _, ...rest } = k; return rest; });
  if (!kernels.some((k) => k[FORM]) || !device.features.has('subgroups')) {
    return { kernels: plain, form: 'plain', probe: 'not run' };
  }
  const source = globalThis.kernelgenTestHooks?.quadProbe ?? PROBE;
  if (!probes.has(device)) probes.set(device, probe(device, source));
  if (!await probes.get(device)) return { kernels: plain, form: 'plain', probe: 'failed' };
  const chosen = kernels.map((k, i) => {
    if (!k[FORM]) return plain[i];
    const kept = Object.fromEntries(Object.entries(plain[i])
      .filter(([key]) => !FIELDS.includes(key)));
    return { ...kept, ...k[FORM] };
  });
  return { kernels: chosen, form: FORM, probe: 'passed' };
}
