"""Deep graphs under a lowered recursion limit (issue 41): each case builds a graph far deeper
than the limit and runs it through a part of the pipeline; a walk that recursed once per graph
level would raise RecursionError (wrapped or not), so passing at a limit of LIMIT proves that no
walk on the way recurses on depth. Run as a script (tests/unit/test_deep_graphs.py does), it
prints one JSON line per case: {"case", "outcome": "ok" | error type, "detail", "seconds"}.

    python tests/helpers/deep_graphs.py [CASE ...]
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

import kernelgen as kg

LIMIT = 400          # Python's default is 1000; every case is at least 5x deeper than this


def _chain_of(x, n: int):
  """y = y * 0.5 + x, n times over: a graph 2n deep."""
  y = x
  for _ in range(n):
    y = y * 0.5 + x
  return y


def _chain(n: int, device: str = "PYTHON"):
  return _chain_of(kg.Tensor(np.arange(2, dtype=np.float32), device=device), n)


def _matrix_chain(n: int, shape=(8, 64)):
  return _chain_of(kg.Tensor(np.ones(shape, np.float32), device="PYTHON"), n)


def _backward(n: int):
  import hostile_cases
  return hostile_cases._grad_chain(n)()


def _jitted(n: int):
  """kg.jit of a deep chain: recorded on the first calls, replayed on the third."""
  step = kg.jit(lambda x: _chain_of(x, n))
  x = kg.Tensor(np.arange(2, dtype=np.float32), device="PYTHON").realize()
  outs = [step(x).numpy() for _ in range(3)]
  return outs[-1] if step.replaying else None


def _onnx(builder, n: int, feeds: dict):
  import hostile_cases
  model = kg.onnx.load(getattr(hostile_cases, builder)(n))
  return {k: v.numpy() for k, v in model.run(feeds, device="PYTHON").items()}


def _matmul_of_chain(n: int):
  a = kg.Tensor(np.ones((64, 64), np.float32), device="PYTHON")
  b = kg.Tensor(np.ones((64, 64), np.float32), device="PYTHON")
  return _chain_of(a[:, :, None] * b[None, :, :], n).sum(1)


CASES = {
  # name: (what it runs, the value it must give or None)
  "chain to python": (lambda: kg.compile(_chain(2000), target="python"), None),
  "chain to wgsl": (lambda: kg.compile(_chain(2000), target="wgsl"), None),
  "chain to ptx": (lambda: kg.compile(_chain(2000), target="ptx"), None),
  "chain runs on PYTHON": (lambda: _chain(2000).numpy(), "chain"),
  "chain runs on PTXSIM": (lambda: _chain(2000, "PTXSIM").numpy(), "chain"),
  "chain then sum to wgsl": (lambda: kg.compile(_matrix_chain(2000).sum(1), target="wgsl"), None),
  "chain then softmax to wgsl": (lambda: kg.compile(_matrix_chain(2000, (8, 256)).softmax(-1),
                                                    target="wgsl"), None),
  "chain inside a matmul to wgsl": (lambda: kg.compile(_matmul_of_chain(600), target="wgsl"),
                                    None),
  "kg.jit of the chain, replayed": (lambda: _jitted(2000), "chain"),
  "backward through 4,000 ops": (lambda: _backward(2000), "backward"),
  "ONNX 2,000-node chain": (lambda: _onnx("_chain_model", 2000, {
    "x": np.ones(2, np.float32)}), None),
  "ONNX Loop of 4,000 iterations": (lambda: _onnx("_loop_model", 4000, {
    "x": np.zeros(2, np.float32)}), "loop"),
}


def _check(kind, got) -> None:
  """The values the runs must give (numpy's arithmetic on the same chain)."""
  if kind == "chain":
    want = np.arange(2, dtype=np.float32)
    x = want.copy()
    for _ in range(2000):
      want = want * np.float32(0.5) + x
    np.testing.assert_allclose(got, want, rtol=1e-6)
  elif kind == "backward":       # d/dx of y_n = 0.5 y_{n-1} + x: sum of 0.5^k, k = 0..n
    np.testing.assert_allclose(got, np.full(2, 2 - 0.5 ** 2000, np.float32), rtol=1e-6)
  elif kind == "loop":
    np.testing.assert_array_equal(got["y"], np.full(2, 4000, np.float32))


def run(name: str) -> dict:
  fn, kind = CASES[name]
  start, old = time.perf_counter(), sys.getrecursionlimit()
  sys.setrecursionlimit(LIMIT)
  try:
    got = fn()
    sys.setrecursionlimit(old)
    _check(kind, got)
    outcome, detail = "ok", ""
  except BaseException as error:   # (the test asserts on these)
    outcome, detail = type(error).__name__, str(error)[:400]
    while error.__cause__ or error.__context__:
      error = error.__cause__ or error.__context__
      if isinstance(error, RecursionError):
        outcome = "RecursionError"
  finally:
    sys.setrecursionlimit(old)
  return {"case": name, "outcome": outcome, "detail": detail,
          "seconds": round(time.perf_counter() - start, 2)}


if __name__ == "__main__":
  for name in sys.argv[1:] or CASES:
    print(json.dumps(run(name)), flush=True)
