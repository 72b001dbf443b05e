// The page: editor, buttons, kernel views and results, wired to kernelgen's worker through
// kernelgen.js (the same API other pages embed). `window.kgApp` exposes the actions for tests.
// One concept, the page's wiring of its controls to the worker (the views, editors, models and
// downloads are modules of their own), so it runs past 500 lines.
import { createKernelgen } from './kernelgen.js';
import { EXAMPLES, DEFAULT_EXAMPLE } from './examples.js';
import { download, downloadBundles, manifest } from './downloads.js';
import { makeEditor, setSource, setupAce } from './editors.js';
import { el, showError, showKernels, showResult, showVerify } from './views.js';
import { setupModels } from './models.js';

const $ = (id) => document.getElementById(id);
const STORAGE_KEY = 'kernelgen.program';
const PARAMS = new URLSearchParams(location.search);
// token: the id of the current action (run, compile, verify); Stop bumps it, and whatever an
// older action gets back later is dropped. pending: background work of earlier runs (PTX, the
// reference check). restarting: Stop at work (an interrupt, or a fresh worker's boot); stopping:
// what it returns.
const state = { kg: null, compiled: null, selected: 0, busy: false, marker: null, device: null,
  generation: 0, background: null, token: 0, pending: new Set(), restarting: null, options: null,
  startedAt: 0, action: null, work: null, stopping: null };

function log(line) {
  const status = $('status');
  status.textContent += '\n' + line;
  status.scrollTop = status.scrollHeight;
}

// ---- editors ----

function setupEditors() {
  setupAce();
  state.editor = makeEditor('editor', 'python', false);
  state.wgsl = makeEditor('wgsl', 'wgsl', true);
  state.ptx = makeEditor('ptx', 'ptx', true);
  state.editor.setValue(localStorage.getItem(STORAGE_KEY) ?? EXAMPLES[DEFAULT_EXAMPLE], 1);
  state.editor.session.on('change', () => {
    localStorage.setItem(STORAGE_KEY, state.editor.getValue());
    clearError();
  });
}

function setupExamples() {
  const select = $('example');
  select.append(new Option('examples…', ''));
  for (const name of Object.keys(EXAMPLES)) select.append(new Option(name, name));
  select.onchange = () => {
    if (select.value) loadExample(select.value);
    select.value = '';
  };
}

function loadExample(name) {
  state.editor.setValue(EXAMPLES[name], 1);
  state.editor.focus();
}

// ---- errors next to the code ----

function clearError() {
  $('error').hidden = true;
  state.editor.session.clearAnnotations();
  if (state.marker !== null) state.editor.session.removeMarker(state.marker);
  state.marker = null;
}

function goToLine(line) {
  state.editor.gotoLine(line, 0, true);
  state.editor.focus();
}

function reportError(error) {
  clearError();
  showError($('error'), error, goToLine);
  if (error.line) {
    const row = error.line - 1;
    state.editor.session.setAnnotations([{ row, column: 0, text: error.message, type: 'error' }]);
    const range = new (ace.require('ace/range').Range)(row, 0, row, 1);
    state.marker = state.editor.session.addMarker(range, 'ace-error-line', 'fullLine');
    state.editor.scrollToLine(row, true, true);
  }
  if (error.source_line && error.type === 'CompileError') {
    state.wgsl.gotoLine(error.source_line, 0, false);
  }
  document.body.dataset.last = 'error';
}

// ---- the progress of an action: kernels done, time, an estimate (the #work bar) ----

// What the running action is called in the bar.
const ACTION_NAMES = { run: 'Run', compile: 'Compile', verify: 'Verify PTX (the PTX on the ' +
  'PTXSIM simulator, then on the page\'s device)' };
// The bar shows once an action has run this long (a quick run shows none).
const WORK_SHOW_MS = 400;

function actionName(action) {
  return ACTION_NAMES[action] || action.replace(/^model: /, 'model: ');
}

// The bar while an action runs: elapsed time always, kernels done / total and the time left
// (from the kernels done so far) once the worker reports kernels (realize.progress).
function startWork(action) {
  state.workInfo = { action, start: performance.now(), kernels: null, pipelines: null };
  $('work-fill').style.width = '0%';
  clearInterval(state.workTimer);
  state.workTimer = setInterval(drawWork, 250);
}

function showWork(kernels) {
  if (!state.workInfo) return;
  if (kernels.pipelines) {   // the GPU pipelines being created (the driver's shader compile)
    state.workInfo.pipelines = kernels.pipelines;
    return;
  }
  state.workInfo.kernels = kernels;
  if (kernels.total) $('work-fill').style.width = `${(100 * kernels.done) / kernels.total}%`;
}

function stopWork() {
  clearInterval(state.workTimer);
  state.workInfo = null;
  $('work').hidden = true;
}

function drawWork() {
  const info = state.workInfo;
  if (!info) return;
  const ms = performance.now() - info.start;
  if (ms < WORK_SHOW_MS) return;
  const k = info.kernels;
  const seconds = `${(ms / 1000).toFixed(1)} s`;
  let text = `${actionName(info.action)}: ${seconds}`;
  if (k && k.total) {
    const left = k.done ? (ms / k.done) * (k.total - k.done) / 1000 : null;
    text += ` · ${k.done} of ${k.total} kernels done on ${k.device}` +
      (k.running ? ` · running ${k.name}` : '') +
      (left !== null && k.done < k.total ? ` · about ${left.toFixed(0)} s left (estimated ` +
        'from the kernels done so far)' : '');
  }
  const making = info.pipelines?.making;
  if (making) text += ` · compiling ${making} GPU pipeline${making === 1 ? '' : 's'}`;
  $('work').classList.toggle('indeterminate', !(k && k.total));
  $('work-text').textContent = text;
  $('work').hidden = false;
  document.body.dataset.work = text;
}

// ---- load progress and device status ----

// The load log: each step's time, and when it ended since navigation (the start-up timeline).
function logStep(step, ms, at) {
  const since = at ? ` (at ${((at - performance.timeOrigin) / 1000).toFixed(2)} s)` : '';
  log(`${step}: ${(ms / 1000).toFixed(2)} s${since}`);
}

function onProgress({ step, state: phase, ms, at, loaded, total, ...rest }) {
  if (step === 'work') {
    showWork({ total, ...rest });
    return;
  }
  const span = document.querySelector(`[data-step="${step}"]`);
  const weights = { download: [0, 70], boot: [70, 20], install: [90, 10] };
  const [start, width] = weights[step] || [];
  if (phase === 'done') logStep(step, ms, at);
  if (start === undefined) return;  // a step without a share of the bar (gpu): only logged
  if (phase === 'bytes' && total) {
    $('progress').style.width = `${start + (width * loaded) / total}%`;
  } else if (phase === 'start') {
    span?.classList.add('active');
  } else if (phase === 'done') {
    span?.classList.replace('active', 'done');
    if (span) span.textContent += ` ${(ms / 1000).toFixed(2)} s`;
    $('progress').style.width = `${start + width}%`;
  }
}

function showNotice(text, kind = '') {
  const notice = $('notice');
  notice.textContent = text;
  notice.className = `notice ${kind}`;
  notice.hidden = false;
}

function describeAdapter(gpu) {
  const a = gpu.adapter;
  const name = [a.vendor, a.architecture, a.description].filter(Boolean).join(' ') ||
    'unnamed adapter';
  const has = (f) => (gpu.features.includes(f) ? 'yes' : 'no');
  return `WebGPU adapter: ${name}${a.isFallbackAdapter ? ' (software fallback)' : ''} · ` +
    `${a.featureLevel} · f16 ${has('shader-f16')} · subgroups ${has('subgroups')} · ` +
    `timestamps ${has('timestamp-query')} · max workgroup ` +
    `${gpu.limits.maxComputeInvocationsPerWorkgroup} · max buffer ` +
    `${Math.round(gpu.limits.maxStorageBufferBindingSize / 2 ** 20)} MiB`;
}

function showDevice(info) {
  const pill = $('device');
  if (info.device === 'WEBGPU') {
    pill.textContent = 'WEBGPU';
    pill.className = 'pill webgpu';
    $('adapter').textContent = describeAdapter(info.gpu);
    log('WebGPU adapter available');
  } else {
    pill.textContent = 'PYTHON (no WebGPU)';
    pill.className = 'pill python';
    $('adapter').textContent = 'no WebGPU adapter';
    showNotice(`No WebGPU here (${info.gpu.reason}): programs run on the PYTHON reference ` +
      'interpreter instead — correct, but slow. WGSL and PTX are still generated.');
    log(`no WebGPU adapter: kernels run on the PYTHON device (${info.gpu.reason})`);
  }
}

// ---- actions ----

// What an action that Stop ended returns (and what the page says about it).
const STOPPED = 'stopped by you: Python was restarted, so the variables and results of earlier ' +
  'runs are gone; your program is unchanged, run it again';
const INTERRUPTED = 'stopped by you: KeyboardInterrupt in Python, which keeps running (nothing ' +
  'was restarted); your program is unchanged, run it again';

// Run, Compile and Verify while no action runs and Python is up; Stop while something runs.
function setButtons() {
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
async function busy(task, action) {
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

function stoppedResult(message) {
  return { stopped: true, error: { type: 'Stopped', message, line: null } };
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

function showSources() {
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

async function compile() {
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
async function run() {
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
async function idle() {
  await state.background;
}

async function verify() {
  return busy(async (token) => {
    const result = await state.kg.verify(state.editor.getValue(), { arch: state.arch() });
    if (!current(token)) return null;
    showVerify($('results'), result);
    document.body.dataset.last = 'verify';
    return result;
  }, 'verify');
}

// ---- stop ----

// How long a KeyboardInterrupt may take to end the running action before the worker is ended.
const INTERRUPT_MS = 2000;

// Stop. On a cross-origin isolated page Python is interrupted in place first (Pyodide's
// interrupt buffer needs a SharedArrayBuffer): KeyboardInterrupt ends the running command and
// Python keeps its state. Otherwise, or when that does not end the action soon (a GPU wait, a
// command queued behind), the worker is ended and a fresh one boots from this site (the browser
// and the service worker cache its files). The editor keeps its text either way; whatever the
// stopped action still gets back is dropped (state.token, state.generation).
async function stop() {
  if (state.restarting || !(state.busy || state.pending.size)) return null;
  const seconds = (performance.now() - state.startedAt) / 1000;
  const what = state.busy ? state.action : 'background check';
  const gpu = state.device === 'WEBGPU' && what === 'run';
  const work = state.busy ? state.work : null;
  let finish;
  state.stopping = new Promise((resolve) => { finish = resolve; });
  state.token++;
  state.generation++;
  Object.assign(state, { busy: false, background: null });
  stopWork();
  clearError();
  if (state.compiled) {
    for (const target of ['wgsl', 'ptx']) {
      if (state.compiled[target].pending) {
        state.compiled[target] = { ok: false, error: { type: 'Stopped', message: STOPPED } };
      }
    }
    showSources();
  }
  document.body.dataset.last = 'stopped';
  document.body.dataset.ready = 'stopping';
  state.restarting = (async () => {
    if (work && state.kg.info.interrupt && await interruptPython(work)) {
      showStopped(what, seconds, 'interrupted');
      log(`${what} stopped by you after ${seconds.toFixed(1)} s: KeyboardInterrupt in Python, ` +
        'which keeps running (no restart)');
      return 'interrupted';
    }
    endWorker(what, seconds, gpu);
    return (await restartPython(what)) ? 'restarted' : 'failed';
  })();
  setButtons();
  const how = await state.restarting;
  state.restarting = null;
  setButtons();
  document.body.dataset.ready = how === 'failed' ? 'error' : 'true';
  state.lastStop = { how, what, seconds };   // what the Models view says of it
  const result = stoppedResult(how === 'interrupted' ? INTERRUPTED : STOPPED);
  finish(result);
  return result;
}

// KeyboardInterrupt in the worker's Python; true when it ended the action within INTERRUPT_MS
// (the action's own command raised it, so Python took it there and nowhere else).
async function interruptPython(work) {
  const interrupt = state.kg.info.interrupt;
  Atomics.store(interrupt, 0, 2);  // SIGINT
  const outcome = work.then((value) => value?.failed, (error) => error);
  const late = new Promise((resolve) => { setTimeout(() => resolve(null), INTERRUPT_MS); });
  if ((await Promise.race([outcome, late]))?.type === 'KeyboardInterrupt') return true;
  Atomics.store(interrupt, 0, 0);  // not taken by the action: the worker is ended instead
  return false;
}

function endWorker(what, seconds, gpu) {
  const old = state.kg;
  Object.assign(state, { kg: null, device: null });
  state.pending.clear();
  old.terminate();  // its calls reject now; their actions are stale, so nothing is shown
  showStopped(what, seconds, gpu ? 'restart-gpu' : 'restart');
  log(`${what} stopped by you after ${seconds.toFixed(1)} s: restarting Python (a fresh ` +
    'interpreter: variables and results of earlier runs are gone)…');
  $('device').textContent = 'restarting…';
  document.body.dataset.ready = 'restarting';
}

// The note in the results panel; a stopped background check leaves its run's result shown.
function showStopped(what, seconds, how) {
  const kept = how === 'interrupted';
  const note = el('p', { class: 'stopped', id: 'stopped' },
    el('b', {}, 'Stopped by you'), ` (${what}, after ${seconds.toFixed(1)} s). ` + (kept
      ? 'KeyboardInterrupt in Python, which keeps running (this page can interrupt it in ' +
        'place: nothing was restarted). Your program is unchanged.'
      : 'Python is restarted (a fresh interpreter: variables and results of earlier runs are ' +
        'gone). Your program is unchanged. '),
    kept ? null : el('span', { id: 'restart-state' }, 'Restarting Python…' +
      (how === 'restart-gpu' ? ' (GPU work the run already sent finishes first: on a ' +
        'software adapter this can take a while)' : '')));
  if (what.startsWith('model:')) return;   // the Models view says it (models.js)
  if (what !== 'background check') {
    $('results').replaceChildren(note);
    $('result-meta').textContent = '';
    return;
  }
  $('reference-pending')?.replaceWith(el('span', { class: 'badge note' },
    'not checked against the PYTHON reference: stopped'));
  $('results').prepend(note);
}

// A fresh worker (Pyodide, kernelgen, the GPU device); false when it does not boot.
async function restartPython(what) {
  const start = performance.now();
  const onProgress = ({ step, state: phase, ms, ...rest }) => {
    if (step === 'work') showWork(rest);
    else if (phase === 'done') log(`  restart ${step}: ${(ms / 1000).toFixed(2)} s`);
  };
  try {
    const kg = await createKernelgen({ ...state.options, onProgress });
    Object.assign(state, { kg, device: kg.info.device });
    showDevice(kg.info);
    const seconds = ((performance.now() - start) / 1000).toFixed(2);
    log(`${what} stopped by you; Python restarted in ${seconds} s (a fresh interpreter): ready`);
    const note = $('restart-state');
    if (note) note.textContent = `Python is ready again (restarted in ${seconds} s): Run.`;
    return true;
  } catch (error) {
    log(`error: Python did not restart: ${error.message}`);
    showNotice(`Python did not restart after Stop (${error.message}): reload the page.`);
    return false;
  }
}

// ---- start ----

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
