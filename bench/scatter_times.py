"""GPU time on device WEBGPU (wgpu-py; Mesa lavapipe where there is no GPU) of an Embedding's
backward pass (a scatter_add of the output gradient into the table's shape) next to its forward
gather, checked against numpy (np.add.at). Kernel count, first realize (compile included) and the
GPU time of the kernel sequence (sum of Runtime.time_run), the fastest of REPEATS, rounds
interleaved. Run it from another checkout's root with KG_CORE=that/core to time that version.

    nice python bench/scatter_times.py [REPEATS] [ONLY]      (default 2; ONLY: forward,backward,
                                                             crossover)

`crossover` times scatter_add(0, idx, src) of m indices into n outputs (1-d) both ways (the
compare-based reduction and the sort-based segments) to place the threshold
tensor/ops/sorted_scatter.py's COMPARE_MAX.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.environ.get("KG_CORE", str(Path(__file__).resolve().parent.parent / "core")))

import kernelgen as kg  # noqa: E402
from kernelgen.device import Device  # noqa: E402
from ops_times import prepare, time_interleaved  # noqa: E402  (after kernelgen: KG_CORE's stays)


def embedding_jobs(rows: int, dim: int, tokens: int) -> list:
  rng = np.random.default_rng(0)
  idx = rng.integers(0, rows, tokens).astype(np.int32)
  emb = kg.nn.Embedding(rows, dim)
  table = emb.weight.numpy()
  gout = np.ones((tokens, dim), np.float32)
  want = np.zeros((rows, dim), np.float32)
  np.add.at(want, idx, gout)

  def backward():
    emb.weight.grad = None
    emb(kg.Tensor(idx)).sum().backward()
    return emb.weight.grad

  return [
    ("forward", lambda: prepare(f"Embedding {rows}x{dim}, {tokens} tokens: forward",
                                lambda: emb(kg.Tensor(idx)).detach(),
                                lambda got: np.testing.assert_array_equal(got, table[idx]))),
    ("backward", lambda: prepare("  backward (weight.grad)", backward,
                                 lambda got: np.testing.assert_array_equal(got, want))),
  ]


def crossover_jobs() -> list:
  from kernelgen.tensor.ops import sorted_scatter as sc
  rng = np.random.default_rng(1)
  jobs = []
  for n, m in ((64, 64), (256, 64), (256, 256), (1024, 256), (1024, 1024), (4096, 1024)):
    idx = rng.integers(0, n, m).astype(np.int32)
    src = rng.standard_normal(m).astype(np.float32)
    want = np.zeros(n, np.float64)
    np.add.at(want, idx, src)
    close = lambda got, want=want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for kind, limit in (("compare", 1 << 62), ("sorted", 0)):
      def make(n=n, idx=idx, src=src, limit=limit):
        saved, sc.COMPARE_MAX = sc.COMPARE_MAX, limit
        try:
          return kg.Tensor.zeros(n).scatter_add(0, kg.Tensor(idx), kg.Tensor(src))
        finally:
          sc.COMPARE_MAX = saved
      jobs.append((f"xover n={n} m={m} {kind}",
                   lambda make=make, close=close, n=n, m=m, kind=kind: prepare(
                     f"scatter_add n={n:5d} m={m:4d} (n*m=2^{(n * m).bit_length() - 1}) "
                     f"{kind}", make, close)))
  return jobs


def main(argv: list[str]) -> None:
  repeats = int(argv[1]) if len(argv) > 1 else 2
  only = set(argv[2].split(",")) if len(argv) > 2 else {"forward", "backward"}
  kg.Device.DEFAULT = "WEBGPU"
  runtime = Device["WEBGPU"]
  print(f"kernelgen from {kg.__file__}\ndevice WEBGPU: {runtime.adapter.info['device']}; timing: "
        f"{'GPU timestamps' if runtime.timestamps else 'wall clock per kernel'}; the machine "
        f"is shared with other jobs (best of {repeats})", flush=True)
  jobs = [make for key, make in embedding_jobs(50000, 64, 4096) if key in only]
  if "crossover" in only:
    jobs += [make for _, make in crossover_jobs()]
  jobs = [make() for make in jobs]
  time_interleaved(runtime, jobs, repeats, 44)


if __name__ == "__main__":
  main(sys.argv)
