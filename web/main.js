// Starts Pyodide from this site's own pyodide/ folder (assembled by ./build.sh site), loads the
// kernelgen wheel by name through the rewritten pyodide-lock.json, and reports what it found.
// Nothing is fetched from any other host.
import { loadPyodide } from '../pyodide/pyodide.mjs';

const status = document.getElementById('status');

function show(line) {
  status.textContent += '\n' + line;
}

async function main() {
  const pyodide = await loadPyodide({ indexURL: new URL('../pyodide/', import.meta.url).href });
  show(`Python ${pyodide.runPython('import sys; sys.version.split()[0]')} ready`);
  await pyodide.loadPackage('kernelgen');
  if (!('kernelgen' in pyodide.loadedPackages)) throw new Error('the kernelgen wheel did not load');
  show(`kernelgen loaded from ${pyodide.runPython('import kernelgen; kernelgen.__file__')}`);
  const adapter = navigator.gpu ? await navigator.gpu.requestAdapter() : null;
  show(adapter ? 'WebGPU adapter available' : 'no WebGPU adapter: kernels cannot run on this page');
  document.body.dataset.ready = 'true';
}

main().catch((error) => {
  show(`error: ${error.message}`);
  document.body.dataset.ready = 'error';
});
