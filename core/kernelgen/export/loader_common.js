// model.js's shared helpers (export/loader.js's part, joined into model.js by
// export/scripts.py): the loader's Error, each dtype's typed array, and sizes at the dims'
// values: a symbolic size, a run-time grid's workgroups, a symbolic input's or output's layout.

// dtype -> the typed array run() takes and returns (float16: raw bits, or a Float16Array)
export const ARRAYS = {
  float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int16: Int16Array,
  uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array,
};

export function fail(message) {
  throw new Error(`kernelgen model: ${message}`);
}

export const roundUp4 = (n) => Math.max(4, Math.ceil(n / 4) * 4);
export const roundUp8 = (n) => Math.max(8, Math.ceil(n / 8) * 8);
// The workgroups a kernel needs under the dims' values: its dispatch, the first dimension cut
// to ceil(need / per) where it has a run-time grid ([[terms, const, per, unit?]]), need being
// const + sum(c * dim) rounded up to a multiple of unit (1 where absent).
export function gridDispatch(dispatch, grid, values) {
  if (!grid?.length) return dispatch;
  const [terms, c, per, unit = 1] = grid[0];
  if (terms.some(([name]) => !(name in values))) return dispatch;
  const sum = terms.reduce((total, [name, k]) => total + k * values[name], c);
  const need = Math.ceil(sum / unit) * unit;
  return [Math.min(dispatch[0], Math.max(1, Math.ceil(need / per))), ...dispatch.slice(1)];
}
// a symbolic_shape entry (an int, or {terms: [[dim, coefficient]], const, div?}) at the dims'
// values: floor((const + sum(c * dim)) / div) (div only on a floored size, as x[::2] has)
export const sizeOf = (s, values) => (typeof s === 'number' ? s
  : Math.floor(s.terms.reduce((acc, [name, c]) => acc + c * values[name], s.const) / (s.div ?? 1)));

// `data` (row-major, logical `shape`) at the front of each axis of `phys`, or back (`back`)
export function relayout(data, shape, phys, back) {
  const out = new data.constructor(count(back ? shape : phys));
  const copy = (src, dst, axis, si, di) => {
    const inner = count(shape.slice(axis + 1));
    const pinner = count(phys.slice(axis + 1));
    if (axis === shape.length - 1 || shape.slice(axis + 1).every((n, k) => n === phys[axis + 1 + k])) {
      const n = shape[axis] * inner;
      if (back) out.set(src.subarray(di, di + n), si);
      else out.set(src.subarray(si, si + n), di);
      return;
    }
    for (let i = 0; i < shape[axis]; i++) copy(src, dst, axis + 1, si + i * inner, di + i * pinner);
  };
  if (shape.length) copy(data, out, 0, 0, 0);
  return out;
}
export const count = (shape) => shape.reduce((a, b) => a * b, 1);
export const describe = (specs) => specs.map((s) => `${s.name} (${s.dtype} [${s.shape}])`).join(', ');
