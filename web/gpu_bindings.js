// A launch's bindings as WebGPU takes them (used by gpu_pipelines.js and gpu.js): the bind group
// layout, the buffer range each binding sees, and the scalar arguments packed into the uniform
// buffer. Plain functions of the launch description: no WebGPU state.

export function roundUp(n, to) {
  return Math.max(to, Math.ceil(n / to) * to);
}

// The uniform buffer of scalar arguments sits after the last storage buffer (render/wgsl.py).
export function uniformSlot(launch) {
  return Math.max(-1, ...launch.bindings.map((binding) => binding.slot)) + 1;
}

// A binding's kind: 'uniform' for a small read-only input bound as a uniform buffer (its
// nbytes, from offset 0: the buffer may be bigger), else 'storage' (render/wgsl/__init__.py).
function bindingKind(binding) {
  return binding.kind === 'uniform' ? 'uniform' : 'storage';
}

export function boundRange(binding, buffer) {
  return bindingKind(binding) === 'uniform'
    ? { buffer, offset: 0, size: binding.nbytes } : { buffer };
}

// The bind group layout: storage buffers by access (small read-only inputs may be uniform
// buffers), then the uniform buffer (scalar arguments).
export function layoutEntries(launch) {
  const compute = GPUShaderStage.COMPUTE;
  const type = (binding) => bindingKind(binding) === 'uniform' ? 'uniform'
    : binding.access === 'read' ? 'read-only-storage' : 'storage';
  const entries = launch.bindings.map((binding) => ({
    binding: binding.slot, visibility: compute, buffer: { type: type(binding) },
  }));
  if (launch.uniforms?.length) {
    entries.push({ binding: uniformSlot(launch), visibility: compute, buffer: { type: 'uniform' } });
  }
  return entries;
}

// Scalar arguments, 4 bytes each in order, padded to 16 bytes (a uniform struct's alignment).
export function packUniforms(uniforms, values) {
  const data = new DataView(new ArrayBuffer(roundUp(uniforms.length * 4, 16)));
  uniforms.forEach(([, dtype], index) => {
    const value = values[index];
    if (dtype === 'float32') data.setFloat32(index * 4, value, true);
    else if (dtype.startsWith('uint')) data.setUint32(index * 4, value, true);
    else data.setInt32(index * 4, value, true);
  });
  return data.buffer;
}
