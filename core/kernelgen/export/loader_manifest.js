// The bundle's files (export/loader.js's part, joined into model.js by export/scripts.py):
// the launches a manifest lists (kernels and variants), its checks, the URLs it may name,
// fetching, and the weights' safetensors.

import { ARRAYS, fail } from './loader_common.js';

// Every kernel of the manifest followed by its variants (lowering/variants.py: the same kernel
// for small bound values of a dim, run where the value is at most `most`), each variant with its
// kernel's bindings and uniforms: the pipelines to make, the source files to fetch.
export const withVariants = (kernels) => kernels.flatMap((k) => [k,
  ...(k.variants || []).map((v) => ({ ...k, grid: undefined, variants: undefined, ...v }))]);

// The URL of `name`, a file the manifest names, inside the bundle folder `folder`: a plain relative
// path (no scheme, no leading '/' or '\\', no '..', '.', '%', '?' or '#' that could lead out), so
// a manifest cannot make the loader fetch from another folder or origin; the folder (and so its
// origin) is the one the caller chose with `base`.
export function inFolder(folder, name, what) {
  const plain = typeof name === 'string' && name.length > 0 &&
    !/^[a-z][a-z0-9+.-]*:|^[\\/]|[\\?#%]/i.test(name) &&
    !name.split('/').some((part) => part === '..' || part === '.' || part === '');
  const url = plain ? new URL(name, folder) : null;
  if (!url || url.origin !== folder.origin || !url.pathname.startsWith(folder.pathname)) {
    fail(`the manifest names ${what} ${JSON.stringify(String(name).slice(0, 80))}, which is not a ` +
      'file inside the bundle folder: re-export the bundle');
  }
  return url;
}

const isCount = (v, least) => Number.isSafeInteger(v) && v >= least;

// Throws unless the manifest has the lists and indices run() relies on (kg.export writes them):
// a damaged or hostile manifest is refused before any buffer is made.
export function checkManifest(m) {
  const lists = ['inputs', 'outputs', 'weights', 'buffers', 'storage', 'kernels', 'features'];
  const bad = (what) => fail(`the manifest's ${what} is damaged: re-export the bundle`);
  lists.forEach((key) => Array.isArray(m[key]) || bad(key));
  m.storage.forEach((s, i) => isCount(s?.nbytes, 0) || bad(`storage[${i}].nbytes`));
  m.buffers.forEach((b, i) => (isCount(b?.storage, 0) && b.storage < m.storage.length) ||
    bad(`buffers[${i}].storage`));
  const buffer = (v) => isCount(v, 0) && v < m.buffers.length;
  ['inputs', 'outputs', 'weights'].forEach((key) => m[key].forEach((s, i) =>
    (buffer(s?.buffer) && Array.isArray(s.shape) && s.shape.every((d) => isCount(d, 0))) ||
    bad(`${key}[${i}]`)));
  if (m.state !== undefined && !Array.isArray(m.state)) bad('state');
  if (m.limits !== undefined && !(m.limits && typeof m.limits === 'object' &&
    Object.values(m.limits).every((v) => isCount(v, 1)))) bad('limits');
  (m.state || []).forEach((s, i) => (m.inputs.some((x) => x.name === s?.name) &&
    m.outputs.some((o) => o.name === s.output && (s.dim === null ? !o.symbolic_shape
      : o.symbolic_shape?.[s.axis])) &&
    ['row', 'outer', 'in_rows', 'out_rows'].every((key) => isCount(s[key], 0)) && ARRAYS[s.dtype]) ||
    bad(`state[${i}]`));
  m.kernels.forEach((k, i) => {
    const three = (v, least) => Array.isArray(v) && v.length === 3 && v.every((d) => isCount(d, least));
    if (!three(k?.workgroup_size, 1)) bad(`kernels[${i}].workgroup_size`);
    if (!three(k.dispatch, 0)) bad(`kernels[${i}].dispatch`);
    if (k.variants !== undefined && !(Array.isArray(k.variants) && k.variants.every((v) =>
      typeof v?.dim === 'string' && isCount(v.most, 0) && three(v.workgroup_size, 1) &&
      three(v.dispatch, 0) && [undefined, true].includes(v.exact)))) bad(`kernels[${i}].variants`);
    if (k.runs !== undefined && !(typeof k.runs?.dim === 'string' && isCount(k.runs.lo, 0) &&
      isCount(k.runs.hi, k.runs.lo))) bad(`kernels[${i}].runs`);
    if (k.work !== undefined && !(Array.isArray(k.work) && k.work.every((f) => Array.isArray(f) &&
      Array.isArray(f[0]) && Number.isInteger(f[1]) && f[0].every((t) => Array.isArray(t) &&
      typeof t[0] === 'string' && Number.isInteger(t[1]))))) bad(`kernels[${i}].work`);
    if (!Array.isArray(k.bindings) || !k.bindings.every((b) => buffer(b?.buffer) &&
      isCount(b.slot, 0))) bad(`kernels[${i}].bindings`);
  });
}

export async function fetchOk(url, what) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    fail(`could not fetch ${what} (${url}): ${error.message}; serve the bundle folder over http`);
  }
  if (!response.ok) {
    fail(`could not fetch ${what} (${url}): HTTP ${response.status}; serve the whole bundle ` +
      'folder (manifest.json, *.wgsl, weights.safetensors) next to model.js');
  }
  return response;
}

// name -> bytes of the tensors in a safetensors file
export function safetensors(bytes) {
  const size = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + size)));
  return (name) => {
    if (!header[name]) fail(`weights.safetensors has no tensor ${name}: re-export the bundle`);
    const [begin, end] = header[name].data_offsets;
    return bytes.subarray(8 + size + begin, 8 + size + end);
  };
}
