"""GPU time on device WEBGPU (wgpu-py; Mesa lavapipe where there is no GPU) of
scaled_dot_product_attention (B=1, H=8, d=64): the fused kernel (lazy ATTENTION,
lowering/attention.py) against the split form it replaces (matmul -> softmax -> matmul, still the
fallback), next to the batched matmul q @ k^T over the same data (8 x L x 64 @ 8 x 64 x L), each
checked against numpy (float64). Kernel count, first realize (compile included) and the GPU time
of the kernel sequence (sum of Runtime.time_run: GPU timestamps where the adapter has them, else
wall clock per kernel), the fastest of REPEATS rounds, interleaved (the machine is shared with
other jobs: compare within one run).

    nice python bench/attention_times.py [REPEATS] [L,...] [KINDS]   (default 3 512,1024 all)

KINDS: a comma-separated subset of fused,split,causal,plain,matmul (what to time).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

import kernelgen as kg  # noqa: E402
from kernelgen.device import Device  # noqa: E402
from kernelgen.tensor.ops import attention as attention_ops  # noqa: E402
from ops_times import prepare, time_interleaved  # noqa: E402

B, H, D = 1, 8, 64


def reference(q, k, v, causal: bool):
  q, k, v = (x.astype(np.float64) for x in (q, k, v))
  s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  if causal:
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def jobs_for(n: int, rng, kinds: set) -> list:
  q, k, v = (rng.standard_normal((B, H, n, D)).astype(np.float32) for _ in range(3))
  close = lambda want: lambda got: np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
  t = lambda: (kg.Tensor(q), kg.Tensor(k), kg.Tensor(v))
  split = lambda causal: lambda: attention_ops._split_attention(*t(), None, causal, 1 / D ** 0.5)
  out = []
  for causal in [c for c, name in ((False, "plain"), (True, "causal")) if name in kinds]:
    tag = f"sdpa L={n}{' causal' if causal else ''}"
    want = close(reference(q, k, v, causal))
    if "fused" in kinds:
      out.append(prepare(f"{tag} fused", lambda c=causal: kg.Tensor(q).scaled_dot_product_attention(
        kg.Tensor(k), kg.Tensor(v), is_causal=c), want))
    if "split" in kinds:
      out.append(prepare(f"{tag} split (before)", split(causal), want))
  a, b = q.reshape(B * H, n, D), k.reshape(B * H, n, D).swapaxes(-1, -2).copy()
  if "matmul" in kinds:
    out.append(prepare(f"matmul {B * H}x{n}x{D} @ {B * H}x{D}x{n}", lambda: kg.Tensor(a) @
                       kg.Tensor(b), close(a.astype(np.float64) @ b)))
  for name, _, first in out:
    print(f"  prepared {name} (first realize incl. compile {first:5.1f} s)", flush=True)
  return out


def main(argv: list[str]) -> None:
  repeats = int(argv[1]) if len(argv) > 1 else 3
  sizes = [int(s) for s in argv[2].split(",")] if len(argv) > 2 else [512, 1024]
  kg.Device.DEFAULT = "WEBGPU"
  runtime = Device["WEBGPU"]
  print(f"device WEBGPU: {runtime.adapter.info['device']}; timing: "
        f"{'GPU timestamps' if runtime.timestamps else 'wall clock per kernel'}; the machine "
        f"is shared with other jobs (best of {repeats} interleaved rounds)", flush=True)
  rng = np.random.default_rng(0)
  kinds = set(argv[3].split(",")) if len(argv) > 3 else {"fused", "split", "causal", "plain",
                                                          "matmul"}
  jobs = [job for n in sizes for job in jobs_for(n, rng, kinds)]
  time_interleaved(runtime, jobs, repeats)


if __name__ == "__main__":
  main(sys.argv)
