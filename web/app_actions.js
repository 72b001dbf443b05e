// The page's actions (app.js lists the page's modules): Run, Compile and Verify, one at a time
// (busy), with the kernels' WGSL and PTX shown as they compile and a run's background work
// (PTX, the PYTHON reference check) tracked so that Stop can end it.

import { setSource } from './editors.js';
import { el, showKernels, showResult, showVerify } from './views.js';
import { clearError, reportError } from './app_editor.js';
import { $, state } from './app_state.js';
import { showNotice, startWork, stopWork } from './app_status.js';

// Run, Compile and Verify while no action runs and Python is up; Stop while something runs.
export function setButtons() {
  const ready = Boolean(state.kg) && !state.busy && !state.restarting;
  for (const id of ['run', 'compile', 'verify']) $(id).disabled = !ready;
  $('stop').disabled = Boolean(state.restarting) || !(state.busy || state.pending.size);
  document.body.dataset.busy = ready ? '0' : '1';
  state.models?.ready();
}

const current = (token) => token === state.token;

// One action at a time (a second Run while one runs is ignored); `task(token)` gets the action's
// id. An action that Stop ended returns what stop() does ({stopped, error}) whatever its calls
// answer later.
export async function busy(task, action) {
  if (state.busy || state.restarting || !state.kg) return undefined;
  const token = ++state.token;
  Object.assign(state, { busy: true, action, startedAt: performance.now() });
  startWork(action);
  setButtons();
  try {
    state.work = task(token);
    const result = await state.work;
    return current(token) ? result : state.stopping;
  } catch (error) {
    if (!current(token)) return state.stopping;
    reportError(error);
    clearStale(error, token);
    return { error: { type: error.type, message: error.message, line: error.line } };
  } finally {
    if (current(token)) {
      state.busy = false;
      stopWork();
    }
    setButtons();
  }
}

// After a failed action: the result of an earlier program is gone, and so are its kernels
// unless this action compiled the program in the editor (a run that failed after compiling).
function clearStale(error, token) {
  const where = error.line ? ` at line ${error.line}` : '';
  $('results').replaceChildren(el('p', { class: 'muted', id: 'no-result' },
    `No result: the program stopped with ${error.type}${where} (see the error above the ` +
    'result). Results of earlier runs were cleared.'));
  $('result-meta').textContent = '';
  if (state.compiledBy === token) return;
  state.compiled = null;
  state.selected = 0;
  $('kernels').replaceChildren(el('li', { class: 'muted', id: 'no-kernels' },
    `No kernels: the program did not compile (${error.type}${where}).`));
  $('kernel-count').textContent = '';
  for (const id of ['wgsl-note', 'ptx-note']) $(id).textContent = '';
  setSource(state.wgsl, '');
  setSource(state.ptx, '');
  for (const kind of ['wgsl', 'ptx', 'zip', 'bundles']) $(`download-${kind}`).disabled = true;
}

// Background work of a run (PTX, the reference check): Stop can end it too.
function track(promise) {
  state.pending.add(promise);
  setButtons();
  promise.finally(() => {
    state.pending.delete(promise);
    setButtons();
  });
  return promise;
}

// A target whose compile is still on its way (PTX compiles after WGSL, in the background of a run).
const PENDING = { ok: false, pending: true };
// The PYTHON reference check is skipped above this many elements in the kernels' buffers: the
// interpreter in the page would take minutes (the WebGPU result is shown either way).
const REFERENCE_LIMIT = 1 << 16;

function sourceText(target, label) {
  if (target.pending) return `// compiling ${label}…`;
  if (!target.ok) return `// ${label} unavailable:\n// ${target.error.message}`;
  return target.kernels[state.selected]?.source ?? '';
}

export function showSources() {
  const { wgsl, ptx } = state.compiled;
  setSource(state.wgsl, sourceText(wgsl, 'WGSL'));
  setSource(state.ptx, sourceText(ptx, `PTX for ${state.compiled.arch}`));
  const kernels = (wgsl.ok ? wgsl : ptx).kernels || [];
  showKernels($('kernels'), kernels, state.selected, (index) => {
    state.selected = index;
    showSources();
  });
  $('kernel-count').textContent = `${kernels.length} kernel${kernels.length === 1 ? '' : 's'}`;
  const note = (target, ok) => (target.pending ? 'compiling…' : target.ok ? ok : target.error.type);
  $('wgsl-note').textContent = note(wgsl, '');
  $('ptx-note').textContent = note(ptx, state.compiled.arch);
  $('download-wgsl').disabled = !wgsl.ok;
  $('download-ptx').disabled = !ptx.ok;
  $('download-zip').disabled = !(wgsl.ok || ptx.ok) || Boolean(wgsl.pending || ptx.pending);
  $('download-bundles').disabled = $('download-zip').disabled;
}

// One target's {ok, kernels | error}; a program that fails to run throws (busy() shows it).
async function compileTarget(code, arch, target) {
  return (await state.kg.compileAll(code, { arch, targets: target }))[target];
}

// WGSL first and shown at once, then PTX. Returns the compiled state and a promise of the
// PTX step; a newer compile or run makes the older one's late results be dropped.
async function compileWgslThenPtx() {
  const generation = ++state.generation;
  const code = state.editor.getValue();
  const arch = state.arch();
  const wgsl = await compileTarget(code, arch, 'wgsl');
  if (generation !== state.generation) throw new Error('stopped');  // busy() drops it
  state.compiled = { wgsl, ptx: PENDING, arch };
  state.compiledBy = state.token;
  state.selected = 0;
  showSources();
  const ptxDone = compileTarget(code, arch, 'ptx').catch((error) => ({ ok: false, error }))
    .then((ptx) => {
      if (generation !== state.generation) return null;
      state.compiled.ptx = ptx;
      showSources();
      return ptx;
    });
  return { compiled: state.compiled, generation, ptxDone };
}

export async function compile() {
  return busy(async (token) => {
    clearError();
    const { compiled, ptxDone } = await compileWgslThenPtx();
    await ptxDone;
    if (!current(token)) return null;
    const failed = [compiled.wgsl, compiled.ptx].find((target) => !target.ok);
    if (failed) reportError(failed.error);
    else document.body.dataset.last = 'compile';
    return compiled;
  }, 'compile');
}

function kernelElements(target) {
  if (!target.ok) return Infinity;
  return target.kernels.reduce((n, k) => n + k.buffers.reduce((m, b) => m + b.size, 0), 0);
}

// After a run's result is shown: its comparison with the PYTHON reference, in the background.
async function checkLater(code, result, generation) {
  const reference = await state.kg.reference(code).catch((error) => ({ ok: false, error }));
  if (generation === state.generation) {
    result.reference = reference;
    showResult($('results'), result);
  }
  return reference;
}

// Run = compile WGSL (shown at once), run it, show the result; then, in the background, the
// PTX and the comparison with the PYTHON reference (result.checked resolves to it).
export async function run() {
  let background = null;
  const outcome = await busy(async (token) => {
    clearError();
    const { compiled, generation, ptxDone } = await compileWgslThenPtx();
    const elements = kernelElements(compiled.wgsl);
    const check = state.device !== 'PYTHON' && elements <= REFERENCE_LIMIT;
    const code = state.editor.getValue();
    const result = await state.kg.run(code, { device: state.device,
      reference: check ? 'later' : false, search: $('search').checked }).catch((error) => ({ failed: error }));
    if (!current(token)) return result;  // a late answer for a run that Stop ended: dropped
    if (result.failed) {
      await ptxDone;
      throw result.failed;
    }
    if (state.device !== 'PYTHON') {
      result.reference = check ? { pending: true } : { skipped: true, elements,
        limit: REFERENCE_LIMIT };
    }
    showRun(result);
    const checked = check ? checkLater(code, result, generation) : Promise.resolve(null);
    background = result.checked = track(Promise.all([ptxDone, checked])
      .then(([, reference]) => reference));
    return result;
  }, 'run');
  state.background = background || state.background;
  return outcome;
}

function showRun(result) {
  showResult($('results'), result);
  $('result-meta').textContent = `${result.device} · ${(result.seconds * 1000).toFixed(0)} ms` +
    (result.stored ? ` · ${result.stored} kernel${result.stored === 1 ? '' : 's'} from the ` +
      'browser\'s store (compiled on an earlier visit; kg.clear_cache() empties it)' : '');
  if (result.recreated) {
    showNotice(`The WebGPU device was lost (${result.lostReason}); a new device was created ` +
      'for this run.', 'info');
  }
  document.body.dataset.last = 'run';
}

// Everything a run left in the background (PTX, the reference check) is done.
export async function idle() {
  await state.background;
}

export async function verify() {
  return busy(async (token) => {
    const result = await state.kg.verify(state.editor.getValue(), { arch: state.arch() });
    if (!current(token)) return null;
    showVerify($('results'), result);
    document.body.dataset.last = 'verify';
    return result;
  }, 'verify');
}
