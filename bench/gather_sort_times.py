"""GPU time on device WEBGPU (wgpu-py; Mesa lavapipe where there is no GPU) of an embedding
lookup (a gather) and of a sort of 2^20 float32, next to matmuls over the same amount of data,
each checked against numpy. The lookup is also timed spelled as a one-hot matmul (how gathers
were computed before they were indirect loads). Kernel count, first realize (compile included)
and the GPU time of the kernel sequence (sum of Runtime.time_run: GPU timestamps where the
adapter has them), the fastest of REPEATS, rounds interleaved. Run it from another checkout's
root (with its core/ first on the path) to time that version.

    nice python bench/gather_sort_times.py [LOG2_SORT] [REPEATS] [ONLY]     (default 20 2)

ONLY: a comma-separated subset of embedding,onehot,matmul_e,sort,matmul_s (KG_CORE=path/core
times another version).
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


def main(argv: list[str]) -> None:
  log2n = int(argv[1]) if len(argv) > 1 else 20
  repeats = int(argv[2]) if len(argv) > 2 else 2
  kg.Device.DEFAULT = "WEBGPU"
  runtime = Device["WEBGPU"]
  print(f"kernelgen from {kg.__file__}\ndevice WEBGPU: {runtime.adapter.info['device']}; timing: "
        f"{'GPU timestamps' if runtime.timestamps else 'wall clock per kernel'}; the machine "
        f"is shared with other jobs (best of {repeats})", flush=True)
  rng = np.random.default_rng(0)
  rows, dim, tokens = 50000, 64, 4096
  table = rng.standard_normal((rows, dim)).astype(np.float32)
  idx = rng.integers(0, rows, tokens).astype(np.int32)
  side = 1792                                  # 1792^2 ~ 50000 x 64 elements
  a, b = (rng.standard_normal((side, side)).astype(np.float32) for _ in range(2))
  n = 1 << log2n
  x = rng.standard_normal(n).astype(np.float32)
  sq = 1 << (log2n // 2)
  c, d = (rng.standard_normal((sq, n // sq)).astype(np.float32) for _ in range(2))
  d = d.reshape(n // sq, sq)

  def one_hot():
    hot = (kg.Tensor(idx).unsqueeze(-1) == kg.Tensor.arange(rows)).cast("float32")
    return hot @ kg.Tensor(table)

  close = lambda want: lambda got: np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
  only = set(argv[3].split(",")) if len(argv) > 3 else None
  jobs = [
    ("embedding", lambda: prepare(f"embedding {rows}x{dim}, {tokens} tokens",
                                  lambda: kg.Tensor(table)[kg.Tensor(idx)],
                                  lambda got: np.testing.assert_array_equal(got, table[idx]))),
    ("onehot", lambda: prepare("  same, as a one-hot matmul", one_hot, close(table[idx]))),
    ("matmul_e", lambda: prepare(f"matmul {side}x{side} @ {side}x{side}",
                                 lambda: kg.Tensor(a) @ kg.Tensor(b), close(a @ b))),
    ("sort", lambda: prepare(f"sort of 2^{log2n} float32", lambda: kg.Tensor(x).sort(),
                             lambda got: np.testing.assert_array_equal(got, np.sort(x)))),
    ("matmul_s", lambda: prepare(f"matmul {sq}x{n // sq} @ {n // sq}x{sq}",
                                 lambda: kg.Tensor(c) @ kg.Tensor(d), close(c @ d))),
  ]
  jobs = [make() for key, make in jobs if only is None or key in only]
  time_interleaved(runtime, jobs, repeats)


if __name__ == "__main__":
  main(sys.argv)
