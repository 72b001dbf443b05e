// The page's downloads: the selected kernel as .wgsl or .ptx, or every kernel of both targets
// plus manifest.json (launch sizes, buffers, order) as one .zip, or the program's two bundles
// (kg.export: webgpu/ with model.js, ptx/) as one .zip; all made in the page.
import { makeZip } from './zip.js';

function save(blob, name) {
  const link = Object.assign(document.createElement('a'),
    { href: URL.createObjectURL(blob), download: name });
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function kernelFiles(compiled, target) {
  const result = compiled[target];
  if (!result.ok) return [];
  return result.kernels.map((k) => ({ name: `${k.name}.${target}`, text: k.source, kernel: k }));
}

export function manifest(compiled) {
  const entry = (file, target) => ({
    file: file.name, target, name: file.kernel.name, entry_point: file.kernel.launch.entry_point,
    global_size: file.kernel.global_size, local_size: file.kernel.local_size,
    buffers: file.kernel.buffers, ...(target === 'ptx' ? { arch: compiled.arch } : {}),
  });
  return {
    generator: 'kernelgen (web)', arch: compiled.arch,
    kernels: [...kernelFiles(compiled, 'wgsl').map((f) => entry(f, 'wgsl')),
      ...kernelFiles(compiled, 'ptx').map((f) => entry(f, 'ptx'))],
  };
}

// kind: 'wgsl' | 'ptx' (the kernel at index `selected`) | 'zip'; `compiled` is the page's last
// compile ({wgsl, ptx, arch}).
export function download(kind, compiled, selected) {
  if (kind === 'zip') {
    const files = [...kernelFiles(compiled, 'wgsl'), ...kernelFiles(compiled, 'ptx')];
    files.push({ name: 'manifest.json', text: JSON.stringify(manifest(compiled), null, 2) });
    save(makeZip(files), 'kernels.zip');
    return;
  }
  const files = kernelFiles(compiled, kind);
  const file = files[selected] || files[0];
  save(new Blob([file.text], { type: 'text/plain' }), file.name);
}

// Both bundles of the program (exported by kernelgen in the worker) as bundles.zip.
export async function downloadBundles(kg, code, arch) {
  const files = await kg.exportBundles(code, { arch });
  save(makeZip(files), 'bundles.zip');
  return files.map((f) => f.name);
}
