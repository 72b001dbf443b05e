// The page: editor, buttons, kernel views and results, wired to kernelgen's worker through
// kernelgen.js (the same API other pages embed). `window.kgApp` exposes the actions for tests.
// The page's wiring is a module per part, all sharing one state object (app_state.js):
//   app_state.js    the state (a comment per field), $ and the status log
//   app_editor.js   the editors, the examples menu and errors next to the code
//   app_status.js   the #work bar of a running action, load progress and the device status
//   app_actions.js  Run, Compile and Verify (one action at a time) and the kernels' sources
//   app_stop.js     Stop: interrupt Python in place, or end the worker and boot a fresh one
//   app.js          keys and buttons, the page's start, window.kgApp
// (the views, editors, models and downloads are modules of their own).

import { createKernelgen } from './kernelgen.js';
import { download, downloadBundles, manifest } from './downloads.js';
import { setupModels } from './models.js';
import { busy, compile, idle, run, setButtons, verify } from './app_actions.js';
import { loadExample, reportError, setupEditors, setupExamples } from './app_editor.js';
import { $, log, state } from './app_state.js';
import { onProgress, showDevice, showNotice } from './app_status.js';
import { stop } from './app_stop.js';

const PARAMS = new URLSearchParams(location.search);

function bindKeys() {
  // Esc or Ctrl/Cmd+. stops (caught before the editor sees the key)
  document.addEventListener('keydown', (event) => {
    const mod = event.ctrlKey || event.metaKey;
    const stopKey = event.key === 'Escape' || (mod && event.key === '.');
    if (stopKey && !$('stop').disabled) {
      event.preventDefault();
      event.stopPropagation();
      stop();
    }
  }, true);
  document.addEventListener('keydown', (event) => {
    if (!(event.ctrlKey || event.metaKey)) return;
    if (event.key === 'Enter') {
      event.preventDefault();
      run();
    } else if (event.key === 's') {
      event.preventDefault();
      compile();
    }
  });
  $('run').onclick = run;
  $('stop').onclick = stop;
  $('work-stop').onclick = stop;
  $('compile').onclick = compile;
  $('verify').onclick = verify;
  for (const kind of ['wgsl', 'ptx', 'zip']) $(`download-${kind}`).onclick = () =>
    download(kind, state.compiled, state.selected);
  $('download-bundles').onclick = () => bundles().catch(() => {});
  $('arch').onchange = () => state.compiled && compile();
}

async function start() {
  state.options = { webgpu: PARAMS.get('webgpu') !== '0', compatibility: PARAMS.has('compat') };
  if (PARAMS.has('prebuild')) state.options.prebuild = PARAMS.get('prebuild') !== '0';
  // first: Python boots while the editors load
  const booting = createKernelgen({ ...state.options, onProgress, early: window.kgEarly });
  setupEditors();
  setupExamples();
  bindKeys();
  state.arch = () => $('arch').value;
  state.models = setupModels({ kg: () => state.kg, arch: state.arch,
    device: () => state.device || 'PYTHON', busy,
    busyNow: () => state.busy || Boolean(state.restarting), lastStop: () => state.lastStop });
  window.kgApp.models = state.models;
  state.kg = await booting;
  const info = state.kg.info;
  state.device = info.device;
  log(`Python ${info.python} ready; kernelgen loaded from ${info.file} (${info.kernelgen})`);
  showDevice(info);
  $('loader').classList.add('done');
  setButtons();
  document.body.dataset.ready = 'true';
}

// The program's webgpu and ptx bundles as one zip; an error shows next to the code.
async function bundles() {
  try {
    return await downloadBundles(state.kg, state.editor.getValue(), state.arch());
  } catch (error) {
    reportError(error);
    throw error;
  }
}

window.kgApp = { state, run, compile, verify, stop, loadExample, idle, bundles,
  download: (kind) => download(kind, state.compiled, state.selected),
  manifest: () => manifest(state.compiled),
  setCode: (code) => state.editor.setValue(code, 1), getCode: () => state.editor.getValue() };

if ('serviceWorker' in navigator && !PARAMS.has('nosw')) {
  navigator.serviceWorker.register('sw.js').catch((error) => log(`offline cache: ${error}`));
}

start().catch((error) => {
  log(`error: ${error.message}`);
  showNotice(`kernelgen could not start: ${error.message}`);
  document.body.dataset.ready = 'error';
});
