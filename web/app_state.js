// The page's state (app.js lists the page's modules): one object that every app_*.js module
// reads and changes, declared here with a comment per field, and the few helpers they share.

export const $ = (id) => document.getElementById(id);

// token: the id of the current action (run, compile, verify); Stop bumps it, and whatever an
// older action gets back later is dropped. pending: background work of earlier runs (PTX, the
// reference check). restarting: Stop at work (an interrupt, or a fresh worker's boot); stopping:
// what it returns.
export const state = {
  kg: null, compiled: null, selected: 0, busy: false, marker: null, device: null,
  generation: 0, background: null, token: 0, pending: new Set(), restarting: null, options: null,
  startedAt: 0, action: null, work: null, stopping: null,
  // set as the page starts: the editors (app_editor.js setupEditors), the Models view and the
  // selected PTX architecture (app.js start)
  editor: null, wgsl: null, ptx: null, models: null, arch: null,
  compiledBy: null,   // the token of the action that compiled state.compiled (app_actions.js)
  workInfo: null,     // the running action's progress and its redraw timer (app_status.js)
  workTimer: null,
  lastStop: null,     // how the last Stop went: {how, what, seconds} (app_stop.js)
};

export function log(line) {
  const status = $('status');
  status.textContent += '\n' + line;
  status.scrollTop = status.scrollHeight;
}
