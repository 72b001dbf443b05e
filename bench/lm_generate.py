"""Greedy generation of a random-weight causal LM (bench/lm_models.py) by kg.generate against
onnxruntime's (CPU) greedy loop: prints both token lists, whether they agree, and the wall time
of each (kernelgen's includes compiling every step: the shapes are static, so each decode step
with a longer cache is a new program).

    python bench/lm_generate.py --config smollm2-135m --dtype q4 --prompt 32 --tokens 64
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core"))

import lm_models  # noqa: E402


def ort_greedy(model_bytes: bytes, prompt: list, steps: int) -> list:
  import onnxruntime as ort
  sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
  past_inputs = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
  fdt = np.float16 if "float16" in past_inputs[0].type else np.float32
  past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), fdt) for i in past_inputs}
  new, total, out = list(prompt), 0, []
  names = [o.name for o in sess.get_outputs()]
  for _ in range(steps):
    total += len(new)
    feeds = {"input_ids": np.array([new], np.int64),
             "attention_mask": np.ones((1, total), np.int64),
             "position_ids": np.arange(total - len(new), total, dtype=np.int64)[None], **past}
    results = dict(zip(names, sess.run(None, feeds)))
    past = {n: results[n.replace("past_key_values.", "present.")] for n in past}
    out.append(int(results["logits"][0, -1].astype(np.float32).argmax()))
    new = [out[-1]]
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", choices=sorted(lm_models.CONFIGS), default="tiny")
  parser.add_argument("--dtype", choices=("fp32", "fp16", "q4"), default="q4")
  parser.add_argument("--prompt", type=int, default=8)
  parser.add_argument("--tokens", type=int, default=16)
  parser.add_argument("--device", default="WEBGPU")
  parser.add_argument("--layers", type=int, default=0, help="fewer layers than the config's")
  args = parser.parse_args()
  import kernelgen as kg
  cfg = lm_models.CONFIGS[args.config]
  if args.layers:
    cfg = dataclasses.replace(cfg, layers=args.layers)
  model = lm_models.build(cfg, args.dtype).SerializeToString()
  prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab, args.prompt)]
  t0 = time.perf_counter()
  want = ort_greedy(model, prompt, args.tokens)
  t1 = time.perf_counter()
  stamps = []
  got = kg.generate(kg.onnx.load(model), prompt, max_new_tokens=args.tokens, device=args.device,
                    on_token=lambda t: stamps.append(time.perf_counter()))
  t2 = time.perf_counter()
  print(f"{args.config} ({cfg.layers} layers) {args.dtype}: prompt {args.prompt}, {args.tokens} tokens, load "
        f"{os.getloadavg()[0]:.1f}")
  print(f"onnxruntime CPU {t1 - t0:.1f} s: {want}")
  print(f"kernelgen {args.device} {t2 - t1:.1f} s (first token {stamps[0] - t1:.1f} s): {got}")
  same = sum(a == b for a, b in zip(got, want))
  print(f"identical: {got == want} ({same}/{len(want)} positions)")


if __name__ == "__main__":
  main()
