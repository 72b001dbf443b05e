// WGSL validation with Dawn/Tint (npm `webgpu`, null backend: no GPU needed, nothing executes).
// Protocol, used by tests/helpers/tools.py: one JSON line in, {"code", "entryPoint"|null};
// one JSON line out, {"errors": ["line:col message", ...]} (empty when the WGSL is valid).
import readline from 'node:readline';
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);

// The GPU and adapter objects must stay referenced while the device lives: once garbage
// collected, dawn.node crashes (seen: segfault when the first shader arrives after a pause).
const gpu = create(['backend=null']);
let adapter;

async function openDevice() {
  adapter = await gpu.requestAdapter();
  const wanted = ['shader-f16', 'subgroups'];
  const requiredFeatures = wanted.filter((name) => adapter.features.has(name));
  const requiredLimits = {};
  for (const name in adapter.limits) requiredLimits[name] = adapter.limits[name];
  return adapter.requestDevice({ requiredFeatures, requiredLimits });
}

async function validate(device, code, entryPoint) {
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code });
  const info = await module.getCompilationInfo();
  const errors = info.messages
    .filter((m) => m.type === 'error')
    .map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
  if (errors.length === 0 && entryPoint) {
    device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint } });
  }
  const scopeError = await device.popErrorScope();
  if (errors.length === 0 && scopeError) errors.push(scopeError.message);
  return errors;
}

const device = await openDevice();
for await (const line of readline.createInterface({ input: process.stdin })) {
  const { code, entryPoint } = JSON.parse(line);
  let errors;
  try {
    errors = await validate(device, code, entryPoint);
  } catch (error) {
    errors = [String(error)];
  }
  process.stdout.write(JSON.stringify({ errors }) + '\n');
}
process.exit(0);
