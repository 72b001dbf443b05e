"""Bundle state: device buffers a bundle keeps between runs, such as a language model's KV cache.

`kg.export(outputs, DIR, state={"past_k0": "present_k0", ...})` pairs an input with an output of
the program. The input is then no longer the caller's: its buffer is the state, allocated once at
its dim's top (the input's physical shape), read by each run, and after each run the output's
values (its rows at the run's sizes) are copied into it on the device, for the next run to read.
Nothing goes through the host; the caller never passes nor reads it (though the output may also
be read). The input's one symbolic size, a plain dim (`kg.Dim("past", 0, N - 1)`), is the state's
row count: the bundle tracks it (0, the dim's `lo`, after load and `reset()`, then the output's
size along that axis after each run), and it gives the dim's value to the kernels. The axes before
it must be 1, so the rows sit at the front of the buffer in every program shape; the output has
the same axes with that one grown (`past + s`). Where the output is the input's own buffer (a
step that writes its new rows into the state in place, as export/onnx_lm.py's caches: the input
then has the output's physical rows, read as a prefix), nothing is copied: the run only counts.

Manifest: `state`: `[{name, output, dim, axis, row, dtype}]` (`row`: elements per row, the
product of the axes after `axis`). A run whose state would pass the dim's top is refused
(ShapeError in Python, Error in model.js) until `reset()`.

A fixed state: an input with no symbolic size paired with an output of the same dtype and shape
(a recurrent model's hidden state, Silero VAD's `state` -> `stateN`). Its entry has `dim` null
and one row of all its elements (`row` = its size, `axis` 0, `outer`, `in_rows`, `out_rows` 1):
after each run the whole output is copied into it on the device; it holds zeros after load and
after `reset()`.
"""
from __future__ import annotations

from ..errors import KernelgenError, ShapeError


def declare(manifest: dict, state) -> None:
  """Add the manifest's `state` list for `state` ({input name: output name} or pairs); a
  KernelgenError names a pair that cannot be a state and says why."""
  if not state:
    return
  pairs = list(state.items()) if isinstance(state, dict) else list(state)
  inputs = {s["name"]: s for s in manifest["inputs"]}
  outputs = {s["name"]: s for s in manifest["outputs"]}
  entries = []
  for pair in pairs:
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
      raise KernelgenError(f"state= takes {{input name: output name}}, got the item {pair!r}")
    name, out = pair
    if name not in inputs or out not in outputs:
      raise KernelgenError(f"state {name!r} -> {out!r}: the program has inputs "
                           f"{sorted(inputs)} and outputs {sorted(outputs)}")
    entries.append(_entry(inputs[name], outputs[out]))
  manifest["state"] = entries


def _entry(spec: dict, out: dict) -> dict:
  sym, osym = spec.get("symbolic_shape"), out.get("symbolic_shape")
  if sym is None:
    return _fixed(spec, out)
  at = [a for a, s in enumerate(sym or ()) if isinstance(s, dict)]
  why = None
  if len(at) != 1 or len(sym[at[0]]["terms"]) != 1 or sym[at[0]]["terms"][0][1] != 1 \
     or sym[at[0]]["const"] or "div" in sym[at[0]]:
    why = "its input needs exactly one symbolic size, a plain kg.Dim (the rows kept)"
  elif osym is None or len(osym) != len(sym) or out["dtype"] != spec["dtype"] or \
      any(o != s for a, (o, s) in enumerate(zip(osym, sym)) if a != at[0]):
    why = (f"its output must have the input's dtype and shape but on the symbolic axis: input "
           f"{spec['dtype']} {sym}, output {out['dtype']} {osym}")
  if why:
    raise KernelgenError(f"state {spec['name']!r} -> {out['name']!r}: {why}")
  axis = at[0]
  row = outer = 1
  for n in spec["shape"][axis + 1:]:
    row *= n
  for n in spec["shape"][:axis]:
    outer *= n
  return {"name": spec["name"], "output": out["name"], "dim": sym[axis]["terms"][0][0],
          "axis": axis, "row": row, "outer": outer, "in_rows": spec["shape"][axis],
          "out_rows": out["shape"][axis], "dtype": spec["dtype"]}


def _fixed(spec: dict, out: dict) -> dict:
  """The entry of a fixed state: the input's whole buffer, replaced by the output's after a run."""
  if out.get("symbolic_shape") is not None or out["dtype"] != spec["dtype"] or \
     list(out["shape"]) != list(spec["shape"]):
    raise KernelgenError(
      f"state {spec['name']!r} -> {out['name']!r}: its input needs exactly one symbolic size, a "
      f"plain kg.Dim (the rows kept), or none and an output of its dtype and shape (a fixed "
      f"state): input {spec['dtype']} {spec['shape']}, output {out['dtype']} "
      f"{out.get('symbolic_shape') or out['shape']}")
  size = 1
  for n in spec["shape"]:
    size *= n
  return {"name": spec["name"], "output": out["name"], "dim": None, "axis": 0, "row": size,
          "outer": 1, "in_rows": 1, "out_rows": 1, "dtype": spec["dtype"]}


def check(m: dict, fail) -> None:
  """`fail(field, value, wants)` unless `m`'s state list (if any) names its inputs, outputs and
  dims (manifest.check calls it)."""
  state = m.get("state", [])
  if not isinstance(state, list):
    fail("state", state, "a list")
  inputs = {s.get("name") for s in m["inputs"] if isinstance(s, dict)}
  outputs = {s.get("name"): s for s in m["outputs"] if isinstance(s, dict)}
  dims = {d.get("name") for d in m.get("dims", []) if isinstance(d, dict)}
  for i, s in enumerate(state):
    if not isinstance(s, dict) or s.get("name") not in inputs or s.get("output") not in \
       outputs or (s.get("dim") not in dims and s.get("dim") is not None):
      fail(f"state[{i}]", s, "{name: an input, output: an output, dim: a dim or null, ...}")
    for key in ("axis", "row", "outer", "in_rows", "out_rows"):
      if not isinstance(s.get(key), int) or isinstance(s.get(key), bool) or s[key] < 0:
        fail(f"state[{i}].{key}", s.get(key), "an int >= 0")
    if s["dim"] is None:
      _check_fixed(i, s, outputs[s["output"]], fail)
      continue
    sym = outputs[s["output"]].get("symbolic_shape")
    if not isinstance(sym, list) or s["axis"] >= len(sym) or not isinstance(sym[s["axis"]], dict):
      fail(f"state[{i}].axis", s["axis"], "a symbolic axis of its output")


def _check_fixed(i: int, s: dict, out: dict, fail) -> None:
  """A fixed state's entry: one row of its output's elements, no symbolic size."""
  size = 1
  for n in out.get("shape", ()):
    size *= n if isinstance(n, int) else 0
  if out.get("symbolic_shape") is not None or s["row"] != size or \
     (s["outer"], s["in_rows"], s["out_rows"]) != (1, 1, 1):
    fail(f"state[{i}]", s, "a fixed state (dim null): one row of its output's elements")


class Rows:
  """The row count of each state of a bundle on one device, and the copy after a run."""

  def __init__(self, manifest: dict):
    self.state = manifest.get("state", [])
    self.ranges = {d["name"]: (d["lo"], d["hi"]) for d in manifest.get("dims", [])}
    self.rows: dict[str, int] = {}
    self.reset()

  def reset(self) -> None:
    """Every state empty again (its dim at its lo; a fixed state zeros before the next run)."""
    self.rows = {s["name"]: 1 if s["dim"] is None else self.ranges[s["dim"]][0]
                 for s in self.state}
    self.clear = [s["name"] for s in self.state if s["dim"] is None]

  def zero(self, runtime, handles: list, storage_of) -> None:
    """Write zeros into each fixed state reset() left to clear (before a run)."""
    for name in self.clear:
      dst = handles[storage_of(name)]
      runtime.copyin(dst, bytes(len(runtime.copyout(dst))))
    self.clear = []

  def names(self) -> set:
    return {s["name"] for s in self.state}

  def values(self, given: dict) -> dict:
    """`given` (the dims the inputs gave) with each state's dim at its row count."""
    values = dict(given)
    for s in self.state:
      if s["dim"] is None:
        continue
      rows, (lo, hi) = self.rows[s["name"]], self.ranges[s["dim"]]
      if rows > hi:
        raise ShapeError(f"state {s['name']!r} holds {rows} rows, past its dim {s['dim']}'s "
                         f"top {hi}: reset() the bundle (a longer run needs a larger dim)")
      if values.setdefault(s["dim"], rows) != rows:
        raise ShapeError(f"an input gives {s['dim']} = {values[s['dim']]}, the state "
                         f"{s['name']!r} holds {rows} rows")
    return values

  def advance(self, runtime, handles: list, storage_of, outputs: dict, values: dict) -> None:
    """Copy each state's output rows into its buffer and count them (after a run); a state
    whose output is its own buffer (a KV cache the run wrote in place) is only counted."""
    for s in self.state:
      out = outputs[s["output"]]
      size = out["symbolic_shape"][s["axis"]] if s["dim"] is not None else {"terms": [],
                                                                              "const": 1}
      rows = (size["const"] + sum(c * values[n] for n, c in size["terms"])) // size.get("div", 1)
      row = s["row"] * out_itemsize(s["dtype"])
      dst = handles[storage_of(s["name"])]
      if storage_of(s["name"]) == storage_of(s["output"]):
        self.rows[s["name"]] = rows    # written in place by the run (kv_write.py): no copy
        continue
      src = bytes(runtime.copyout(handles[storage_of(s["output"])]))
      kept = bytearray(runtime.copyout(dst))
      n = min(rows, s["in_rows"]) * row
      for o in range(s["outer"]):
        kept[o * s["in_rows"] * row:o * s["in_rows"] * row + n] = \
          src[o * s["out_rows"] * row:o * s["out_rows"] * row + n]
      runtime.copyin(dst, bytes(kept))
      self.rows[s["name"]] = rows


def out_itemsize(dtype: str) -> int:
  """Bytes per element of the dtype named `dtype`."""
  from ..dtype import dtypes
  return dtypes.from_name(dtype).itemsize
