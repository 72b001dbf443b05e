"""Full-depth causal LMs (bench/lm_models.py's SmolLM2-135M and Qwen2.5-0.5B layouts, random
weights) on a kernelgen device against onnxruntime (CPU): a PROMPT-token prompt, then N tokens.

onnxruntime's greedy tokens are the reference; kernelgen is fed the same tokens (forced
decoding), and each position's top-1 (argmax of kernelgen's logits) is compared with the token
onnxruntime chose there. All N equal means kernelgen's greedy tokens are onnxruntime's; the first
position that differs is where kernelgen's greedy run would leave onnxruntime's. Each line: the
model, dtype, agreeing positions of N, the first disagreement, and the seconds each side took.

    python bench/lm_correctness.py [--config smollm2-135m qwen2.5-0.5b] [--dtype fp32 fp16 q4]
                                   [--new 64] [--prompt 32] [--layers L] [--device WEBGPU]
                                   [--bundle]

--bundle runs the exported causal LM bundle (export/onnx_lm.py: one bundle, its step symbolic up
to the prompt's length, the token drawn on the device; what bench/lm_page.py runs in the page)
through Bundle.run instead of kg.onnx's model (kernelgen.onnx.generate.OnnxCausalLM).

--f32-reference (fp16 only) also runs onnxruntime on the fp32 model with every weight rounded to
fp16 (the fp16 model's weights, computed in fp32), fed the same tokens: each position's top-1 of
that reference against kernelgen's and against onnxruntime's own fp16 run, and at each position
where kernelgen and onnxruntime fp16 differ, the reference's logit margin between their two
tokens (a near tie that fp16 arithmetic decides, or a real error).

--layers cuts the depth (a quick check at the real widths); the models are written to a
temporary folder (external data: Qwen2.5-0.5B in fp32 passes protobuf's 2 GB).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

import lm_models  # noqa: E402


def _write(cfg, dtype: str, folder: str) -> str:
  """The model of `cfg` in `dtype` written to `folder` (weights as external data); its path."""
  import onnx
  model = lm_models.build(cfg, dtype)
  path = os.path.join(folder, f"model-{dtype}.onnx")
  onnx.save_model(model, path, save_as_external_data=True, location=f"weights-{dtype}.bin")
  return path


def forced_top1(path: str, prompt: list, tokens: list, device: str) -> list:
  """kernelgen's argmax at each of len(tokens) positions, fed `prompt` then `tokens`."""
  import kernelgen as kg
  from kernelgen.onnx.generate import OnnxCausalLM
  lm = OnnxCausalLM(kg.onnx.load(path), device)
  new, total, top = list(prompt), 0, []
  for tok in tokens:
    total += len(new)
    logits = lm.step(new, total).numpy()
    top.append(int(np.asarray(logits, np.float32).argmax()))
    new = [tok]
  return top


def _rounded_fp32(cfg, folder: str) -> str:
  """The fp32 model of `cfg` with every float initializer rounded to fp16 (the fp16 model's
  weights: lm_models draws both from one fp32 stream); its path."""
  import onnx
  from onnx import TensorProto, numpy_helper
  model = lm_models.build(cfg, "fp32")
  for i, init in enumerate(model.graph.initializer):
    if init.data_type == TensorProto.FLOAT:
      a = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
      model.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, init.name))
  path = os.path.join(folder, "model-fp32-rounded.onnx")
  onnx.save_model(model, path, save_as_external_data=True, location="weights-fp32-rounded.bin")
  return path


def _reference_line(cfg, folder: str, prompt: list, want: list, got: list) -> str:
  """--f32-reference's line: the fp16-rounded fp32 reference against kernelgen and onnxruntime
  fp16 (`want`, its greedy tokens, also what everyone was fed), and its margins where they
  differ."""
  ref = lm_models.ort_steps(_rounded_fp32(cfg, folder), prompt, len(want), forced=want)[1]
  picks = [int(r.argmax()) for r in ref]
  kg_ok = sum(a == b for a, b in zip(got, picks))
  ort_ok = sum(a == b for a, b in zip(want, picks))
  spread = np.median([r.std() for r in ref])
  margins = [f"{i}: {ref[i][w] - ref[i][g]:+.4f}" for i, (g, w) in enumerate(zip(got, want))
             if g != w]
  return (f"  fp16 weights computed in fp32 (onnxruntime): kernelgen agrees {kg_ok}/{len(picks)}, "
          f"onnxruntime fp16 {ort_ok}/{len(picks)}; where the two differ, the reference's "
          f"logit(onnxruntime's) - logit(kernelgen's) (logits' std {spread:.3f}): "
          f"{', '.join(margins) or 'none'}")


def forced_top1_bundle(path: str, prompt: list, tokens: list, device: str) -> list:
  """As forced_top1, through the causal LM bundle of the model (one, its step symbolic): the
  prompt in one run, then one run per token, each reading back the token drawn at temperature 0
  (the argmax)."""
  import kernelgen as kg
  from kernelgen.export.causal import _feeds, names
  from kernelgen.export.onnx_lm import causal_program
  outputs, state = causal_program(kg.onnx.load(path), len(prompt), len(prompt) + len(tokens))
  with tempfile.TemporaryDirectory() as folder:
    bundle = kg.export(outputs, folder, format="webgpu" if device == "WEBGPU" else "ptx",
                       state=state)
    lm, new, done, top = names(bundle.manifest), list(prompt), 0, []
    bundle.reset()
    for tok in tokens:
      got = bundle.run(_feeds(lm, new, done, 0.0, 0), device=device, outputs=["token"])
      top.append(int(got["token"].tolist()[0]))
      done, new = done + len(new), [tok]
  return top


def run_one(name: str, dtype: str, args) -> str:
  """One line of agreement for config `name` in `dtype`."""
  cfg = lm_models.CONFIGS[name]
  if args.layers:
    cfg = dataclasses.replace(cfg, layers=args.layers)
  prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab, args.prompt)]
  with tempfile.TemporaryDirectory() as folder:
    path = _write(cfg, dtype, folder)
    start = time.perf_counter()
    want = lm_models.ort_greedy(path, prompt, args.new)
    ort_s = time.perf_counter() - start
    start = time.perf_counter()
    got = (forced_top1_bundle if args.bundle else forced_top1)(path, prompt, want, args.device)
    kg_s = time.perf_counter() - start
    extra = ("\n" + _reference_line(cfg, folder, prompt, want, got)
             if args.f32_reference and dtype == "fp16" else "")
  same = [a == b for a, b in zip(got, want)]
  first = same.index(False) if False in same else None
  return (f"{name:14s} {cfg.layers:2d} layers {dtype:5s} top-1 agreement {sum(same)}/{len(same)} "
          f"({100 * sum(same) / max(len(same), 1):.1f} %), greedy identical: "
          f"{'yes' if first is None else f'no, from token {first}'}; onnxruntime {ort_s:.1f} s, "
          f"kernelgen {args.device}{' bundle' if args.bundle else ''} {kg_s:.1f} s{extra}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", nargs="+", default=["smollm2-135m", "qwen2.5-0.5b"],
                      choices=sorted(lm_models.CONFIGS))
  parser.add_argument("--dtype", nargs="+", default=["fp32", "fp16", "q4"],
                      choices=["fp32", "fp16", "q4"])
  parser.add_argument("--new", type=int, default=64)
  parser.add_argument("--prompt", type=int, default=32)
  parser.add_argument("--layers", type=int, default=0)
  parser.add_argument("--device", default="WEBGPU")
  parser.add_argument("--bundle", action="store_true", help="run the exported bundle")
  parser.add_argument("--f32-reference", action="store_true",
                      help="fp16: also compare with the fp16 weights computed in fp32")
  args = parser.parse_args()
  print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; prompt {args.prompt} tokens, "
        f"{args.new} forced", flush=True)
  for name in args.config:
    for dtype in args.dtype:
      print(run_one(name, dtype, args), flush=True)


if __name__ == "__main__":
  main()
