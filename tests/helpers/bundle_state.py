"""What the in-place KV cache tests read from a causal LM bundle: each state's input and output
buffers in its manifest, and a page script that runs model.js `generate` and records
`model.calls` after every token."""
from __future__ import annotations


def state_buffers(manifest: dict) -> dict:
  """{state name: (its input's buffer entry, its output's buffer entry)}."""
  buffers = {b["id"]: b for b in manifest["buffers"]}
  inputs = {s["name"]: s for s in manifest["inputs"]}
  outputs = {s["name"]: s for s in manifest["outputs"]}
  return {s["name"]: (buffers[inputs[s["name"]]["buffer"]], buffers[outputs[s["output"]]["buffer"]])
          for s in manifest["state"]}


# page.evaluate(GENERATE, [bundle folder, prompt ids, new tokens]) -> {tokens, seen: calls per token}
GENERATE = """async ([name, prompt, steps]) => {
  const { load } = await import(`/${name}/model.js`);
  const model = await load();
  const seen = [];
  const tokens = await model.generate(prompt, { maxNewTokens: steps,
    onToken: () => seen.push({ ...model.calls }) });
  model.destroy();
  return { tokens, seen };
}"""
