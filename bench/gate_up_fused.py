"""The ceiling of issue 35's decode fusion of a q4 LM's gate into its up*silu(gate) kernel, in
the page's symbolic-step bundle (export/onnx_lm.py causal_program: one bundle prefills and
decodes, `seq` new tokens a run). Its MLP runs two kernels at every seq (the gate projection
`r_seq_1536_1_1__...`, then up with silu(gate) * up as its epilogue), each a register-tiled
matmul (quant_nbits.tiled_rows: a symbolic row count counts at its top) with variants for small
seq (lowering/variants.py); at seq = 1 (decoding) both run their 1-row variants.

This builds, from the export's own schedule items, the kernel a one-row step could take
instead: the up kernel with the gate item's boundary dropped (both reductions in its kernel)
cut to seq = 1 (graph/at_value.py item_at), compiled as a static kernel for the bundle's
target and options; runs it natively on WEBGPU beside the two kernels (at seq = 1, their
variants), on the same buffers (the weights as exported, the activations random), checks that
its output equals the pair's, and times both (GPU timestamps, medians of interleaved rounds).
Not a test; nothing is asserted but the values. Prints the load.

    python bench/gate_up_fused.py [--layers 1] [--rounds 15]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_models  # noqa: E402


def _captured_plan(cfg, step: int):
  """[(item, kernel)] of the bundle's compile_plan, its target and options."""
  import kernelgen as kg
  import kernelgen.compiler as compiler
  from kernelgen.device import Device
  from kernelgen.export.onnx_lm import causal_program
  got, real = {}, compiler._compile_plan

  def keep(roots, target, options, print_after):
    plan = real(roots, target, options, print_after)
    got.update(plan=plan, target=target, options=options)
    return plan
  compiler._compile_plan = keep
  try:
    adapter = Device["WEBGPU"].render_options().get("adapter")
    model = lm_models.build(cfg, "q4", last_logits=True)
    outputs, state = causal_program(kg.onnx.load(model.SerializeToString()), step, 64,
                                    adapter=adapter)
    with tempfile.TemporaryDirectory() as folder:
      kg.export(outputs, folder, format="webgpu", state=state, adapter=adapter)
  finally:
    compiler._compile_plan = keep.__wrapped__ if hasattr(keep, "__wrapped__") else real
  return got["plan"], got["target"], got["options"]


def _pair(plan):
  """(gate item, up item) of the first MLP: an item whose output one other item alone reads."""
  readers = {}
  for item, _ in plan:
    for i in item.inputs:
      readers.setdefault(id(i), []).append(item)
  for item, kernel in plan:
    users = readers.get(id(item.out), [])
    if item.name.startswith("r_seq_") and len(users) == 1 and users[0].name.startswith("r_1_seq"):
      up = users[0]
      return (item, kernel), next(p for p in plan if p[0] is up)
  raise SystemExit("no gate/up pair found")


def _data(node, rng) -> bytes:
  """A node's bytes: a realized weight's own, else random values (positive floats: a norm's
  sum of squares stays valid)."""
  if node.realized and node.buffer is not None:
    return node.buffer.copyout()
  n = node.buffer.size if node.realized else node.size
  if node.dtype.is_float():
    return (np.abs(rng.standard_normal(n)) + 0.1).astype(np.dtype(node.dtype.name)).tobytes()
  return rng.integers(0, 255, n * node.dtype.itemsize, dtype=np.uint8).tobytes()


def main() -> None:
  """Run the command line."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--layers", type=int, default=1)
  parser.add_argument("--step", type=int, default=16)
  parser.add_argument("--rounds", type=int, default=15)
  parser.add_argument("--one-token", action="store_true",
                      help="also time the one-token bundle's (step 1) gate and up kernel, "
                           "from its matvec form (quant_nbits.matmul_words), on its own buffers")
  args = parser.parse_args()
  from kernelgen.compiler import compile_item
  from kernelgen.device import Device
  from kernelgen.graph.at_value import item_at
  from kernelgen.graph.schedule import ScheduleItem
  cfg = dataclasses.replace(lm_models.CONFIGS["smollm2-135m"], layers=args.layers)
  plan, target, options = _captured_plan(cfg, args.step)
  (gate, gk), (up, uk) = _pair(plan)
  inputs = tuple(dict.fromkeys([i for i in up.inputs if i is not gate.out] + list(gate.inputs)))
  joined = item_at(ScheduleItem(up.out, inputs, "gate_up_1"), "seq", 1)
  if joined is None:
    raise SystemExit("item_at refused the joined item")
  fk = compile_item(joined, target, options)
  print("gate", gate.name, gk.global_size, gk.local_size, "up", up.name, "-> joined", fk.name,
        fk.global_size, fk.local_size, "binds",
        [(b.slot, b.kind) for b in fk.launch.bindings])
  runtime, rng = Device["WEBGPU"], np.random.default_rng(0)
  nodes = {id(n): n for n in (gate.out, up.out, *gate.inputs, *up.inputs)}
  handles = {}
  for key, node in nodes.items():
    nbytes = (node.buffer.nbytes if node.realized else node.size * node.dtype.itemsize)
    handles[key] = runtime.alloc(-(-nbytes // 16) * 16)
    if key not in (id(gate.out), id(up.out)):
      runtime.copyin(handles[key], _data(node, rng))

  def bound(item, kernel, out):
    slots = (out, *item.inputs)
    return [handles[id(slots[b.slot])] for b in kernel.launch.bindings]
  values = {"seq": 1}
  hg, hu = bound(gate, gk, gate.out), bound(up, uk, up.out)
  hf = bound(joined, fk, up.out)
  runtime.run(gk, hg, values)
  runtime.run(uk, hu, values)
  runtime.synchronize()
  width = up.out.shape[-1]
  want = np.frombuffer(runtime.copyout(handles[id(up.out)]), np.float32)[:width].copy()
  runtime.copyin(handles[id(up.out)], bytes(len(want) * 4))
  runtime.run(fk, hf, values)
  runtime.synchronize()
  got = np.frombuffer(runtime.copyout(handles[id(up.out)]), np.float32)[:width]
  err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
  print(f"joined vs pair at seq = 1: max |diff| / max |value| = {err:.2e}")
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))
  words = _one_token_kernel(cfg, runtime, rng) if args.one_token else None
  pair, one, alone = [], [], []
  for _ in range(args.rounds):
    pair.append(runtime.time_run(gk, hg, values) + runtime.time_run(uk, hu, values))
    one.append(runtime.time_run(fk, hf, values))
    if words:
      alone.append(runtime.time_run(*words, {}))
  text = f" | step-1 bundle's {_ms(alone)}" if alone else ""
  print(f"seq = 1, GPU ms, median / min of {args.rounds} interleaved: gate + up {_ms(pair)}, "
        f"joined {_ms(one)}{text}; load {os.getloadavg()[0]:.2f}")


def _ms(times: list) -> str:
  return f"{statistics.median(times) * 1e3:.3f} / {min(times) * 1e3:.3f}"


def _one_token_kernel(cfg, runtime, rng):
  """(kernel, handles) of the one-token bundle's kernel computing gate and up*silu(gate) (its
  one row a matvec: both reductions in one kernel already), on buffers of its own."""
  plan, _, _ = _captured_plan(cfg, 1)
  width = cfg.mlp
  item, kernel = next((it, k) for it, k in plan if it.name.startswith(f"r_1_1_{width}__"))
  slots = (item.out, *item.inputs)
  handles = []
  for b in kernel.launch.bindings:
    node = slots[b.slot]
    handles.append(runtime.alloc(-(-b.nbytes // 16) * 16))
    if b.slot:
      runtime.copyin(handles[-1], _data(node, rng)[:b.nbytes])
  print("step-1 bundle:", item.name, kernel.global_size, kernel.local_size)
  return kernel, handles


if __name__ == "__main__":
  main()
