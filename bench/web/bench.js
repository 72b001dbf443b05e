// Browser measurements for bench/browser.py (B2 compile latency in Pyodide, B4 throughput vs
// TF.js). Playwright calls the functions on window.bench; each returns plain data.
import { createKernelgen } from '/web/kernelgen.js';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// B2: a fresh worker (Pyodide + kernelgen), then each of `codes` in turn (each times its
// compile in Python and assigns [ms] to out) on the PYTHON device. `values`: all of out
// (bench/compile_per_kernel.py's times of every kernel).
async function compileLatency(codes) {
  const kg = await createKernelgen({ base: '/', webgpu: false });
  const rows = [];
  try {
    for (const code of codes) {
      try {
        const result = await kg.run(code, { device: 'PYTHON', reference: false });
        rows.push({ ms: result.data[0], values: Array.from(result.data) });
      } catch (error) {
        rows.push({ error: `${error.type}: ${error.message}`.slice(0, 200) });
      }
    }
  } finally {
    kg.terminate();
  }
  return rows;
}

let shared = null;  // one kernelgen worker for the throughput runs
async function kernelgen() {
  shared ||= await createKernelgen({ base: '/', webgpu: true });
  return shared;
}

// B4 (ours): GPU time of the kernels of `op` (inputs made and realized by `setup`): the run of
// setup + op minus the kernels of setup alone. Each run's figure is the sum of its timestamps.
async function ourThroughput(setup, op, reps) {
  const kg = await kernelgen();
  const base = await kg.run(setup + '\nout = x\n', { device: 'WEBGPU', reference: false });
  const skip = base.timings.length;
  const times = [];
  let kernels = 0;
  for (let i = 0; i < reps + 1; i += 1) {
    const result = await kg.run(`${setup}\nout = ${op}\n`, { device: 'WEBGPU', reference: false });
    const mine = result.timings.slice(skip);
    kernels = mine.length;
    if (i > 0) times.push(mine.reduce((sum, t) => sum + t.ms, 0));
  }
  return { ms: median(times), samples_ms: times, kernels, adapter: kg.info.gpu?.adapter || null };
}

// B4 (TF.js): the same op on TF.js's WebGPU backend; kernelMs from tf.time (GPU timestamps)
// when the backend reports it, else wall clock up to the downloaded result.
async function tfjsThroughput(name, reps) {
  await tf.setBackend('webgpu');
  await tf.ready();
  const ops = {
    matmul: () => { const a = tf.randomNormal([1024, 1024]); const b = tf.randomNormal([1024, 1024]);
      return [[a, b], () => tf.matMul(a, b)]; },
    softmax: () => { const x = tf.randomNormal([4096, 1024]); return [[x], () => tf.softmax(x)]; },
    conv2d: () => { const x = tf.randomNormal([1, 56, 56, 64]); const w = tf.randomNormal([3, 3, 64, 64]);
      return [[x, w], () => tf.conv2d(x, w, 1, 'same')]; },
  };
  const [inputs, f] = ops[name]();
  await Promise.all(inputs.map((t) => t.data()));
  const kernel = [];
  const wall = [];
  for (let i = 0; i < reps + 1; i += 1) {
    const start = performance.now();
    const info = await tf.time(() => f());
    wall.push(performance.now() - start);
    kernel.push(typeof info.kernelMs === 'number' ? info.kernelMs : NaN);
  }
  kernel.shift();
  wall.shift();
  const timestamps = kernel.every((ms) => Number.isFinite(ms));
  return { ms: median(timestamps ? kernel : wall), samples_ms: timestamps ? kernel : wall,
    timing: timestamps ? 'GPU timestamps (tf.time kernelMs)' : 'wall clock', tfjs: tf.version.tfjs };
}

window.bench = { compileLatency, ourThroughput, tfjsThroughput };
document.body.dataset.ready = 'true';
