"""The Generate demo's language model as a kernelgen program with named inputs, exported at build
time (build.sh: python -m kernelgen export web/demos/lm_model.py --out .../lm_bundle) so the
page generates without Python: the next-token logits after n tokens, n a symbolic size
(`kg.Dim("n", 1, CONTEXT)`: one compiled program, one set of pipelines, for every length).

Input: `ids` (1, n) int32, the text so far (its last CONTEXT tokens: the model's learned
positions end there). Output: `logits` (1, vocab), the next token's, read at position n - 1.
Weights: web/demos/lm/weights.safetensors (float16, cast to float32), examples/train_lm.py; in
the bundle each is named after its state_dict key, dots as underscores.
"""
import json
import os
import sys

import kernelgen as kg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from tiny_gpt import TinyGPT  # noqa: E402


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
n = kg.Dim("n", 1, CONTEXT)
ids = kg.Tensor.empty(1, n, dtype=kg.dtypes.int32, name="ids", device="PYTHON")
with kg.no_grad():
  last = model.hidden(ids)[:, n - 1]                                 # (1, dim)
  out = {"logits": last @ model.tokens.weight.T}                     # (1, vocab)
