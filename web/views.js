// Rendering of results, kernel lists and errors into the page (no state; app.js owns it).

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function formatValue(value, dtype) {
  if (typeof value === 'bigint') return value.toString();
  if (dtype === 'bool') return value ? 'True' : 'False';
  if (!dtype.startsWith('float')) return String(value);
  if (Number.isNaN(value)) return 'nan';
  if (!Number.isFinite(value)) return value > 0 ? 'inf' : '-inf';
  return Math.abs(value) >= 1e5 || (value !== 0 && Math.abs(value) < 1e-3)
    ? value.toExponential(3) : value.toFixed(4);
}

// A numpy-like preview: the first rows and columns of the last two axes.
export function previewText(shape, dtype, data, rows = 6, cols = 8) {
  const values = Array.from(data, (v) => formatValue(v, dtype));
  if (shape.length === 0) return values[0] ?? '';
  const width = shape[shape.length - 1];
  const height = values.length / width;
  const lines = [];
  for (let r = 0; r < Math.min(rows, height); r++) {
    const row = values.slice(r * width, r * width + Math.min(cols, width));
    lines.push(row.map((v) => v.padStart(10)).join(' ') + (width > cols ? '  …' : ''));
  }
  if (height > rows) lines.push(`   … ${height - rows} more rows`);
  return lines.join('\n');
}

function comparisonBadge(reference) {
  if (!reference) return null;
  if (reference.pending) {
    return el('span', { class: 'badge note', id: 'reference-pending' },
      'checking against the PYTHON reference…');
  }
  if (reference.skipped) {
    return el('span', { class: 'badge note', id: 'reference-skipped' },
      `not checked against the PYTHON reference: ${reference.elements} elements is more than ` +
      `the interpreter handles quickly in the page (${reference.limit}); use smaller inputs to ` +
      'compare');
  }
  if (!reference.ok) {
    return el('span', { class: 'badge bad' }, `reference failed: ${reference.error.message}`);
  }
  const error = reference.max_abs_error === null ? '' :
    ` · max |Δ| ${Number(reference.max_abs_error).toExponential(2)}`;
  return reference.match
    ? el('span', { class: 'badge good' }, `✓ matches the PYTHON reference${error}`)
    : el('span', { class: 'badge bad' },
      `✗ differs from the PYTHON reference: ${reference.mismatches} values${error}`);
}

export function timingsTable(timings, seconds) {
  const rows = timings.map((t) => el('tr', {}, el('td', {}, t.name),
    el('td', {}, `${t.ms.toFixed(3)} ms`)));
  return el('table', { class: 'timings' },
    el('tr', {}, el('th', {}, 'kernel'), el('th', {}, 'GPU time')), rows,
    el('tr', {}, el('th', {}, 'program (wall)'), el('td', {}, `${(seconds * 1000).toFixed(1)} ms`)));
}

function fact(name, value) {
  return el('span', {}, el('b', {}, name), value);
}

export function showResult(container, result, { title = 'out' } = {}) {
  container.replaceChildren(
    el('div', { class: 'facts' }, fact(title, ''), fact('shape', `(${result.shape.join(', ')})`),
      fact('dtype', result.dtype), fact('device', result.device),
      fact('elements', String(result.data.length))),
    comparisonBadge(result.reference),
    el('div', { class: 'preview', id: 'preview' }, previewText(result.shape, result.dtype, result.data)),
    timingsTable(result.timings || [], result.seconds || 0),
    ...(result.search ? [searchTable(result.search)] : []),
  );
}

// What the search mode chose for each kernel of the run (web_api.run_program(search=True)).
function searchTable(search) {
  const ms = (value) => `${value.toFixed(3)} ms`;
  const rows = search.map((s) => el('tr', {}, el('td', {}, s.kernel), el('td', {}, s.chosen),
    el('td', {}, s.cached ? 'cached' : `fastest of ${s.candidates}: ${ms(s.best_ms)} ` +
      `(heuristic ${ms(s.heuristic_ms)})`)));
  return el('table', { class: 'timings', id: 'search-table' },
    el('tr', {}, el('th', {}, 'kernel'), el('th', {}, 'search chose'), el('th', {}, 'timed')),
    rows.length ? rows : [el('tr', {}, el('td', { colspan: 3 }, 'no kernel ran'))]);
}

export function showVerify(container, verify) {
  const c = verify.comparison;
  const badge = c.match
    ? el('span', { class: 'badge good' }, `✓ PTX on the simulator matches ${verify.other.device}`)
    : el('span', { class: 'badge bad' }, `✗ PTX on the simulator differs from ` +
      `${verify.other.device}: ${c.mismatches ?? ''} values ${c.reason || ''}`);
  container.prepend(el('div', { class: 'facts', id: 'verify' }, badge,
    fact('max |Δ|', c.max_abs_error === null ? '-' : Number(c.max_abs_error).toExponential(2)),
    fact('simulated in', `${(verify.ptxsim.seconds * 1000).toFixed(0)} ms`)));
}

const symbolicTitle = 'symbolic sizes (kg.Dim): one compiled kernel serves every value in the ' +
  'range; "uniform": read at run time, "grid": launches only the workgroups the value needs';

// "n ∈ 1..4096 (uniform, grid)" per symbolic size of a kernel (web_api.kernel_dims)
function symbolicText(dims) {
  return 'symbolic ' + dims.map((d) => {
    const range = d.lo === null || d.lo === undefined ? '' : ` ∈ ${d.lo}..${d.hi}`;
    const how = [d.uniform && 'uniform', d.grid && 'grid'].filter(Boolean).join(', ');
    return `${d.name}${range} (${how})`;
  }).join(', ');
}

export function showKernels(list, kernels, selected, onSelect) {
  if (!kernels.length) {
    list.replaceChildren(el('li', { class: 'muted' }, 'no kernels (nothing to compute?)'));
    return;
  }
  list.replaceChildren(...kernels.map((k, index) => el('li', {
    class: index === selected ? 'selected' : '', onclick: () => onSelect(index),
  }, el('span', { class: 'name' }, k.name),
  el('span', { class: 'dims' }, `grid ${k.global_size.join('×')} · block ${k.local_size.join('×')}`),
  k.dims?.length ? el('span', { class: 'symdims', title: symbolicTitle }, symbolicText(k.dims))
    : '',
  el('span', { class: 'bufs' }, k.buffers.map((b) => `${b.name}:${b.dtype}[${b.size}] ${b.access}`)
    .join(', ')))));
}

export function showError(box, error, onLine) {
  const where = error.line ? el('a', { onclick: () => onLine(error.line) }, `line ${error.line}`)
    : null;
  const kernelLine = error.source_line ? ` (generated source line ${error.source_line})` : '';
  // replaceChildren writes a null as the text "null": only the parts there are
  const parts = [el('span', { class: 'kind' }, error.type), where && ' at ', where, kernelLine,
    ': ', error.message, error.traceback && `\n\n${error.traceback}`];
  box.replaceChildren(...parts.filter((part) => part !== null && part !== undefined && part !== ''));
  box.hidden = false;
}
