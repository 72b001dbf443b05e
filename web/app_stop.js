// Stop (app.js lists the page's modules): what an action that Stop ended returns, Python
// interrupted in place or the worker ended and a fresh one booted, and what the page says.

import { createKernelgen } from './kernelgen.js';
import { el } from './views.js';
import { setButtons, showSources } from './app_actions.js';
import { clearError } from './app_editor.js';
import { $, log, state } from './app_state.js';
import { showDevice, showNotice, showWork, stopWork } from './app_status.js';

// What an action that Stop ended returns (and what the page says about it).
const STOPPED = 'stopped by you: Python was restarted, so the variables and results of earlier ' +
  'runs are gone; your program is unchanged, run it again';
const INTERRUPTED = 'stopped by you: KeyboardInterrupt in Python, which keeps running (nothing ' +
  'was restarted); your program is unchanged, run it again';

function stoppedResult(message) {
  return { stopped: true, error: { type: 'Stopped', message, line: null } };
}

// How long a KeyboardInterrupt may take to end the running action before the worker is ended.
const INTERRUPT_MS = 2000;

// Stop. On a cross-origin isolated page Python is interrupted in place first (Pyodide's
// interrupt buffer needs a SharedArrayBuffer): KeyboardInterrupt ends the running command and
// Python keeps its state. Otherwise, or when that does not end the action soon (a GPU wait, a
// command queued behind), the worker is ended and a fresh one boots from this site (the browser
// and the service worker cache its files). The editor keeps its text either way; whatever the
// stopped action still gets back is dropped (state.token, state.generation).
export async function stop() {
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
