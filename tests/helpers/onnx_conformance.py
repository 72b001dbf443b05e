"""ONNX backend node test cases on kernelgen: pass rate per operator, and every case that does
not pass with its reason (not implemented, unsupported type, error, mismatch).

  PYTHONPATH=core:tests/helpers .venv/bin/python tests/helpers/onnx_conformance.py [--device PYTHON]
      [--subset N] [--ort] [--filter SUBSTR]

Each case folder holds model.onnx and test_data_set_*/input_*.pb, output_*.pb (tests/
onnx_corpus.py writes them from the onnx package). A case passes when every output matches
numpy.testing.assert_allclose with the case's tolerances (rtol 1e-3, atol 1e-7, the onnx
backend defaults). int64 outputs are compared as the int32 kernelgen computes them in.
`--ort` also runs onnxruntime on the same cases, for comparison.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time

import numpy as np

import kernelgen as kg
from kernelgen.onnx.data import read_tensor_file
from onnx_corpus import node_cases

RTOL, ATOL = 1e-3, 1e-7


def _array(path):
  name, dtype, shape, raw = read_tensor_file(str(path))
  if dtype.name == "bfloat16":     # as float32, the way Tensor.numpy() gives bfloat16
    bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
    return name, bits.view(np.float32).reshape(shape)
  return name, np.frombuffer(raw, dtype=np.dtype(dtype.name)).reshape(shape)


def _kinds(case) -> tuple:
  """The value kinds (tensor_type, sequence_type, optional_type) of the model's inputs and
  outputs, from the onnx package's parse (the harness reads sequences with it too)."""
  import onnx
  g = onnx.load(str(case / "model.onnx"), load_external_data=False).graph
  return ([v.type.WhichOneof("value") for v in g.input],
          [v.type.WhichOneof("value") for v in g.output])


def _value(path, kind):
  """A test value: an array, a list of arrays (a sequence), or an optional's content/None."""
  if kind not in ("sequence_type", "optional_type"):
    return _array(path)[1]
  import onnx
  from onnx import numpy_helper
  proto = onnx.SequenceProto() if kind == "sequence_type" else onnx.OptionalProto()
  proto.ParseFromString(path.read_bytes())
  return numpy_helper.to_list(proto) if kind == "sequence_type" else \
    numpy_helper.to_optional(proto)


def _sets(case):
  in_kinds, out_kinds = _kinds(case)
  for ds in sorted(case.glob("test_data_set_*")):
    ins = [_value(p, _kind(in_kinds, p)) for p in sorted(ds.glob("input_*.pb"), key=_index)]
    outs = [_value(p, _kind(out_kinds, p)) for p in sorted(ds.glob("output_*.pb"), key=_index)]
    yield ins, outs


def _kind(kinds: list, path) -> str:
  i = _index(path)
  return kinds[i] if i < len(kinds) else "tensor_type"


def _index(p):
  return int(p.stem.split("_")[1])


def _snake(name: str) -> str:
  out = ""
  for i, ch in enumerate(name):
    if ch.isupper() and i and (not name[i - 1].isupper() or
                               (i + 1 < len(name) and name[i + 1].islower())):
      out += "_"
    out += ch.lower()
  return out


def _op_names() -> dict:
  """{snake_case name: operator} of every ONNX operator (the case names start with these)."""
  import onnx.defs
  schemas = onnx.defs.get_all_schemas_with_history()
  names = {s.name.lower(): s.name for s in schemas}
  names.update({_snake(s.name): s.name for s in schemas})
  return names


def _op_of(case, names: dict) -> str:
  """The operator a case tests: the longest operator name its folder name starts with."""
  stem = case.name[len("test_"):]
  best = max((s for s in names if stem == s or stem.startswith(s + "_")), key=len, default=None)
  return names[best] if best else stem.split("_")[0]


def _compare_values(got, want) -> str | None:
  """Compare a result with the expected value: arrays, lists of them (sequences) or None."""
  if want is None or isinstance(want, list):
    if want is None:
      return None if got is None else "an empty optional was expected"
    if not isinstance(got, list) or len(got) != len(want):
      return f"a sequence of {len(want)} tensors was expected, got {type(got).__name__}"
    for g, w in zip(got, want):
      problem = _compare(g.numpy(), w)
      if problem:
        return problem
    return None
  if got is None or isinstance(got, list):
    return f"a tensor was expected, got {type(got).__name__}"
  return _compare(got.numpy(), want)


def _compare(got, want) -> str | None:
  if got.shape != want.shape:
    return f"shape {got.shape} != {want.shape}"
  if want.dtype.kind in "iub":
    ok = np.array_equal(got.astype(np.int64), want.astype(np.int64)) if want.dtype != bool \
      else np.array_equal(got.astype(bool), want)
    return None if ok else "integer values differ"
  try:
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=RTOL,
                               atol=ATOL, equal_nan=True)
  except AssertionError as e:
    lines = [ln for ln in str(e).splitlines() if "Max" in ln]
    return "tolerance: " + "; ".join(ln.strip() for ln in lines)
  return None


def run_case(case, device: str) -> tuple[bool, str]:
  """(passed, reason) of one case."""
  try:
    model = kg.onnx.load(str(case / "model.onnx"))
    for ins, outs in _sets(case):
      if len(ins) != len(model.input_names):
        return False, "unsupported type: inputs of a non-tensor type"
      feeds = dict(zip(model.input_names, ins))
      results = model.run(feeds, device=device)
      if len(outs) != len(model.output_names):
        return False, "unsupported type: outputs of a type the harness does not read"
      for name, want in zip(model.output_names, outs):
        problem = _compare_values(results[name], want)
        if problem and _random(model, case):
          return False, _random_reason(results, model.output_names, outs)
        if problem:
          return False, problem
    return True, ""
  except kg.UnsupportedError as e:
    text = " ".join(str(e).split())       # one line: messages may quote IR on further lines
    kind = "not implemented" if "not implemented" in text or "needs " in text else \
      "unsupported type" if "element type" in text or "dtype" in text or "type" in text else \
      "unsupported"
    return False, f"{kind}: {text[:160]}"
  except kg.KernelgenError as e:
    return False, f"error {type(e).__name__}: {' '.join(str(e).split())[:160]}"
  except Exception as e:   # a bug in kernelgen: listed, not hidden
    return False, f"crash {type(e).__name__}: {str(e)[:160]}"


RANDOM_OPS = {"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal",
              "RandomNormalLike", "Multinomial"}


def _random(model, case) -> bool:
  """Whether the case's outputs are random draws (values defined only by distribution)."""
  return bool(RANDOM_OPS & set(model.op_histogram())) or "training_dropout" in case.name


def _random_reason(results, names, outs) -> str:
  for name, want in zip(names, outs):
    got = results[name]
    if got.shape != want.shape:
      return f"shape {got.shape} != {want.shape}"
  return ("random output: shapes match, values are draws of another generator (the expected "
          "values come from numpy's), not comparable")


def run_ort(case) -> bool:
  import onnxruntime as ort
  try:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(str(case / "model.onnx"), options,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for ins, outs in _sets(case):
      got = sess.run(None, dict(zip(names, ins)))
      for g, w in zip(got, outs):
        if isinstance(w, list):
          if not isinstance(g, list) or len(g) != len(w) or \
             any(_compare(np.asarray(a), b) for a, b in zip(g, w)):
            return False
        elif w is None:
          if g is not None:
            return False
        elif _compare(np.asarray(g), w):
          return False
    return True
  except Exception:
    return False


def known_failures(path) -> dict:
  """{case name: reason} from a file --write-known wrote."""
  out = {}
  for line in open(path):
    if line.strip() and not line.startswith("#"):
      name, _, reason = line.rstrip("\n").split("\t", 2)
      out[name] = reason
  return out


def subset(cases, every: int):
  """A deterministic subset: every `every`-th case in name order, plus each operator's first."""
  seen, out = set(), []
  for i, case in enumerate(cases):
    op = case.name.split("_")[1] if "_" in case.name else case.name
    if i % every == 0 or op not in seen:
      out.append(case)
    seen.add(op)
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--device", default="PYTHON")
  ap.add_argument("--subset", type=int, default=1)
  ap.add_argument("--filter", default="")
  ap.add_argument("--ort", action="store_true")
  ap.add_argument("--write-known", default="", help="write the failing cases and reasons here")
  args = ap.parse_args(argv)
  cases = [c for c in node_cases() if args.filter in c.name]
  cases = subset(cases, args.subset) if args.subset > 1 else cases
  per_op = collections.defaultdict(lambda: [0, 0, 0])
  failures, start = [], time.time()
  names = _op_names()
  for case in cases:
    op = _op_of(case, names)
    ok, reason = run_case(case, args.device)
    per_op[op][0] += ok
    per_op[op][1] += 1
    if args.ort:
      per_op[op][2] += run_ort(case)
    if not ok:
      failures.append((case.name, op, reason))
  passed = sum(v[0] for v in per_op.values())
  ops_full = sum(1 for v in per_op.values() if v[0] == v[1])
  print(f"# ONNX node tests on {args.device}: {passed}/{len(cases)} cases pass "
        f"({100 * passed / max(1, len(cases)):.1f}%), {ops_full}/{len(per_op)} operators pass "
        f"every case, {time.time() - start:.0f} s")
  if args.ort:
    ort_pass = sum(v[2] for v in per_op.values())
    print(f"# onnxruntime on the same cases: {ort_pass}/{len(cases)}")
  print(f"\n{'operator':28} pass/cases" + ("  ort" if args.ort else ""))
  for op_name in sorted(per_op):
    p, n, o = per_op[op_name]
    print(f"{op_name:28} {p:4}/{n:<4}" + (f" {o:4}" if args.ort else ""))
  if args.write_known:
    with open(args.write_known, "w") as f:
      f.write("# ONNX node cases that do not pass on PYTHON, with the reason (written by\n"
              "# tests/helpers/onnx_conformance.py --write-known; test_onnx_conformance.py reads it)\n")
      for name, op_name, reason in failures:
        f.write(f"{name}\t{op_name}\t{reason}\n")
  print("\n# cases that do not pass")
  for name, op_name, reason in failures:
    print(f"{name:50} {op_name:20} {reason}")
  uncovered = sorted(RANDOM_OPS - set(per_op))
  if uncovered:
    print(f"\n# random operators the onnx package ships no node cases for: {', '.join(uncovered)}"
          f" (their draws cannot match another generator's anyway: tests/onnx_import/test_onnx_multinomial.py"
          f" checks Multinomial's distribution, shape, dtype and seeding)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
