// What the page says while it works (app.js lists the page's modules): the progress of an
// action (the #work bar: kernels done, time, an estimate), the load progress and the device
// status.

import { $, log, state } from './app_state.js';

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
export function startWork(action) {
  state.workInfo = { action, start: performance.now(), kernels: null, pipelines: null };
  $('work-fill').style.width = '0%';
  clearInterval(state.workTimer);
  state.workTimer = setInterval(drawWork, 250);
}

export function showWork(kernels) {
  if (!state.workInfo) return;
  if (kernels.pipelines) {   // the GPU pipelines being created (the driver's shader compile)
    state.workInfo.pipelines = kernels.pipelines;
    return;
  }
  state.workInfo.kernels = kernels;
  if (kernels.total) $('work-fill').style.width = `${(100 * kernels.done) / kernels.total}%`;
}

export function stopWork() {
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

// The load log: each step's time, and when it ended since navigation (the start-up timeline).
function logStep(step, ms, at) {
  const since = at ? ` (at ${((at - performance.timeOrigin) / 1000).toFixed(2)} s)` : '';
  log(`${step}: ${(ms / 1000).toFixed(2)} s${since}`);
}

export function onProgress({ step, state: phase, ms, at, loaded, total, ...rest }) {
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

export function showNotice(text, kind = '') {
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

export function showDevice(info) {
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
