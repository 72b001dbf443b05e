// Boots Pyodide from this origin's /pyodide/ and reports its Python version.
import { loadPyodide } from '/pyodide/pyodide.mjs';

try {
  const pyodide = await loadPyodide({ indexURL: new URL('/pyodide/', self.location.href).href });
  postMessage({ ok: true, python: pyodide.runPython('import sys; sys.version.split()[0]') });
} catch (error) {
  postMessage({ ok: false, error: String(error) });
}
