"""Causal LM bundles with their KV cache as bundle state (export/state.py, export/causal.py):
a kg.nn decoder's cached step (examples/tiny_gpt.py, cached_program) exported with
`state=` generates, through the bundle runner (PTXSIM; WEBGPU natively) and through model.js
`generate` in headless Chromium, the greedy tokens kg.generate gives on the model itself;
nothing is compiled per token; Stop (an AbortSignal) stops; a prompt past the context, a
bundle that is not a causal LM and a malformed state are clear errors."""
from __future__ import annotations

import json
import re
import sys

import pytest

import kernelgen as kg
from browser_util import local_page
from tools import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "examples"))
from tiny_gpt import TinyGPT, cached_program  # noqa: E402

pytestmark = pytest.mark.timeout(900)
CONTEXT, PROMPT, STEPS = 16, [3, 5, 7, 1, 9], 8


@pytest.fixture(scope="module")
def lm():
  """A small TinyGPT (vocab 48, width 16, 2 blocks) with embeddings large enough that its
  greedy tokens vary, and kg.generate's greedy tokens on it (no cache: the whole window)."""
  model = TinyGPT(48, 16, 2, 2, CONTEXT).to("PYTHON")
  model.tokens.weight = kg.nn.Parameter(kg.Tensor.randn(48, 16, seed=1, device="PYTHON") * 0.2)
  model.positions.weight = kg.nn.Parameter(kg.Tensor.randn(CONTEXT, 16, seed=2,
                                                           device="PYTHON"))
  return model, kg.generate(model, PROMPT, max_new_tokens=STEPS, device="PYTHON")


def _export(model, path, fmt, step=1):
  outputs, state = cached_program(model, step=step)
  return kg.export(outputs, str(path), format=fmt, state=state)


def test_the_manifest_declares_the_state(lm, tmp_path):
  bundle = _export(lm[0], tmp_path, "ptx")
  m = json.loads((tmp_path / "manifest.json").read_text())
  assert m["state"][0] == {"name": "past_k0", "output": "present_k0", "dim": "past", "axis": 0,
                           "row": 16, "outer": 1, "in_rows": CONTEXT,
                           "out_rows": CONTEXT, "dtype": "float32"}   # one buffer, in place
  assert [s["name"] for s in m["state"]] == ["past_k0", "past_v0", "past_k1", "past_v1"]
  assert [i["name"] for i in bundle.inputs] == ["ids", "positions", "temperature", "seed"]
  for patch, field in [({"axis": 5}, "state[0].axis"), ({"output": "nope"}, "state[0]"),
                       ({"row": -1}, "state[0].row")]:
    damaged = json.loads(json.dumps(m))
    damaged["state"][0].update(patch)
    (tmp_path / "manifest.json").write_text(json.dumps(damaged))
    with pytest.raises(kg.ManifestError, match=rf"{re.escape(field)} is"):
      kg.load_bundle(str(tmp_path))


@pytest.mark.parametrize("step", [1, 4])
def test_ptxsim_bundle_generates_kg_generates_greedy_tokens(lm, tmp_path, step):
  """The cached steps (the prompt token by token, or 4 then 1 with a symbolic step, then one
  token each) through Bundle.run on PTXSIM give the tokens of kg.generate recomputing the whole
  window; no kernel is compiled per token."""
  model, want = lm
  bundle = _export(model, tmp_path, "ptx", step)
  misses = []
  got = bundle.generate(PROMPT, max_new_tokens=STEPS, device="PTXSIM",
                        on_token=lambda t: misses.append(kg.cache_info()["misses"]))
  assert got == want and len(set(want)) > 1
  assert misses == [misses[0]] * STEPS
  assert bundle.generate(PROMPT, max_new_tokens=STEPS, device="PTXSIM") == want   # reset


def test_webgpu_bundle_generates_natively_without_new_pipelines(lm, tmp_path):
  pytest.importorskip("wgpu")
  model, want = lm
  bundle = _export(model, tmp_path, "webgpu")
  runtime = kg.Device["WEBGPU"]
  counts = []
  got = bundle.generate(PROMPT, max_new_tokens=STEPS, device="WEBGPU",
                        on_token=lambda t: counts.append(len(runtime.pipelines)))
  assert got == want and counts == [counts[0]] * STEPS


def test_sampling_on_the_device_is_seeded(lm, tmp_path):
  bundle = _export(lm[0], tmp_path, "ptx")
  a = bundle.generate(PROMPT, max_new_tokens=4, temperature=5.0, seed=3, device="PTXSIM")
  b = bundle.generate(PROMPT, max_new_tokens=4, temperature=5.0, seed=3, device="PTXSIM")
  c = bundle.generate(PROMPT, max_new_tokens=4, temperature=5.0, seed=4, device="PTXSIM")
  assert a == b and a != c and all(0 <= t < 48 for t in a)


def test_misuse_is_a_clear_error(lm, tmp_path):
  model = lm[0]
  bundle = _export(model, tmp_path / "lm", "ptx")
  with pytest.raises(kg.ShapeError, match=r"prompt has 17 tokens: this bundle takes 1\.\.16"):
    bundle.generate(list(range(17)), device="PTXSIM")
  outputs, _ = cached_program(model)
  plain = kg.export(outputs, str(tmp_path / "plain"), format="ptx")
  with pytest.raises(kg.ModelError, match="not a causal LM"):
    plain.generate(PROMPT, device="PTXSIM")
  with pytest.raises(kg.KernelgenError, match="'past_k0' -> 'logits': its output must have"):
    kg.export(outputs, str(tmp_path / "bad"), format="ptx", state={"past_k0": "logits"})
  with pytest.raises(kg.KernelgenError, match="'ids' -> 'logits': its input needs exactly one"):
    kg.export(outputs, str(tmp_path / "bad"), format="ptx", state={"ids": "logits"})
  with pytest.raises(kg.KernelgenError, match="the program has inputs"):
    kg.export(outputs, str(tmp_path / "bad"), format="ptx", state={"nope": "logits"})


GENERATE = """async ([name, prompt, steps]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const streamed = [];
  const greedy = await model.generate(prompt, { maxNewTokens: steps,
    onToken: (t) => streamed.push(t) });
  const again = await model.generate(prompt, { maxNewTokens: steps });
  const stopper = new AbortController();
  let heard = 0;
  const stopped = await model.generate(prompt, { maxNewTokens: 1000, temperature: 1.0,
    signal: stopper.signal, onToken: () => { heard += 1; if (heard === 3) stopper.abort(); } });
  const sampled = await model.generate(prompt, { maxNewTokens: steps, temperature: 5.0, seed: 3 });
  const topK = await model.generate(prompt, { maxNewTokens: steps, temperature: 5.0, topK: 4 });
  const errors = [];
  for (const bad of [Array.from({ length: 17 }, (_, i) => i), []]) {
    try { await model.generate(bad); } catch (e) { errors.push(e.message); }
  }
  const plain = await (await import(`/${name}_plain/model.js`)).load();
  try { await plain.generate(prompt); } catch (e) { errors.push(e.message); }
  plain.destroy();
  model.destroy();
  return { greedy, streamed, again, stopped, sampled, topK, errors };
}"""


def test_model_js_generate_gives_kg_generates_greedy_tokens(lm, chromium, serve, tmp_path):
  model, want = lm
  (tmp_path / "index.html").write_text("<!doctype html><title>bundle</title>")
  server = serve(tmp_path)
  _export(model, tmp_path / "lm", "webgpu")
  kg.export(cached_program(model)[0], str(tmp_path / "lm_plain"), format="webgpu")
  with local_page(chromium) as page:
    page.goto(server.url("index.html"))
    got = page.evaluate(GENERATE, ["lm", PROMPT, STEPS])
    assert page.console_errors == [], page.console_errors
  assert got["greedy"] == want and got["streamed"] == want and got["again"] == want
  assert len(got["stopped"]) == 3                      # Stop after the third token
  assert len(got["sampled"]) == STEPS and all(0 <= t < 48 for t in got["sampled"])
  assert len(got["topK"]) == STEPS and all(0 <= t < 48 for t in got["topK"])
  assert "the prompt has 17 tokens: this model takes 1..16" in got["errors"][0]
  assert "the prompt has 0 tokens" in got["errors"][1]
  assert "is not a causal LM" in got["errors"][2]
