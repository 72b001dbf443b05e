"""The Generate demo's language model as a kernelgen program with named inputs, exported at build
time (build.sh: python -m kernelgen export web/demos/lm_model.py --out .../lm_bundle) so the
page generates without Python: one generation step with a KV cache kept in the bundle
(tiny_gpt.cached_program; export/state.py): model.js's generate() prefills the prompt in one
run and then runs one token per step, each reading the keys and values the earlier steps left.

Inputs: `ids` and `positions` (1, s) int32 (s = kg.Dim("s", 1, CONTEXT): the new tokens),
`temperature` (1,) float32 and `seed` (1,) int32 (the token is drawn on the GPU). State:
`past_k{i}` / `past_v{i}` (past, dim) per block, past = kg.Dim("past", 0, CONTEXT - 1).
Outputs: `logits` (1, vocab) and `token` (1,) int32, the next token's, and the caches.
Weights: web/demos/lm/weights.safetensors (float16, cast to float32), examples/train_lm.py; in
the bundle each is named after its state_dict key, dots as underscores.
"""
import json
import os
import sys

import kernelgen as kg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from tiny_gpt import TinyGPT, cached_program  # noqa: E402


def load_model(device: str = "PYTHON") -> TinyGPT:
  """TinyGPT with the committed weights (float32) on device; KERNELGEN_LM_DIR names another
  folder holding a weights.safetensors written by examples/train_lm.py."""
  folder = os.environ.get("KERNELGEN_LM_DIR", os.path.join(HERE, "lm"))
  weights, meta = kg.load(os.path.join(folder, "weights.safetensors"), with_metadata=True)
  config = json.loads(meta["config"])
  model = TinyGPT(config["vocab"], config["dim"], config["layers"], config["heads"],
                  config["context"])
  model.load_state_dict({k: v.cast(kg.dtypes.float32).to(device) for k, v in weights.items()})
  return model.to(device)


model = load_model()
CONTEXT = model.context
# each parameter as a variable named after its state_dict key ("blocks.0.qkv.weight" is
# blocks_0_qkv_weight): the bundle keys its weights by these names, so the page can write
# weights it trained itself into the loaded bundle (generate.js)
globals().update({key.replace(".", "_"): value for key, value in model.state_dict().items()})
out, state = cached_program(model)          # the CLI exports `out` with `state`
