// Generation for a kernelgen WebGPU bundle of a causal LM (written as DIR/generate.js by
// kg.export, next to model.js, whose model.generate() loads it on its first call): prefill, then
// one step per token, the KV cache kept in the bundle's state. The Python side is
// export/causal.py (Bundle.generate), which takes the same steps.
//
// A causal LM bundle has state (the caches), an input `ids` or `input_ids` (1, s) whose size s
// is the new tokens of a step, and an output `logits` (the last new token's); optionally
// `positions` / `position_ids`, `attention_mask` and, for drawing the token on the GPU, an
// output `token` with inputs `temperature` and `seed`.

function fail(message) {
  throw new Error(`kernelgen model: ${message}`);
}

// Tokens `model` (model.js's Model) generates after promptIds (an array of ints): prefill (in
// steps of up to the ids input's length), then one step per token, the cache kept in the model's
// state. Greedy at temperature 0; else drawn from softmax(logits / temperature), on the GPU
// (only the id read back) where the bundle has a `token` output and topK is 0 and topP 1, else
// here from the logits read back (top-k, top-p, a seeded generator). onToken(id, {gpuMs}) hears
// each token as it comes; a token in `stop` (an id or array) ends it (included); signal (an
// AbortSignal) stops it: the promise then resolves with the tokens so far. A prompt longer than
// the context (the state dim's top + 1) is an Error; a generation that fills the context starts
// again from its last half.
export async function generate(model, promptIds, { maxNewTokens = 32, temperature = 0, topK = 0,
  topP = 1, seed = 0, stop = null, onToken = null, signal = null } = {}) {
  const lm = causalNames(model.manifest);
  const prompt = Array.from(promptIds ?? [], Number);
  if (!prompt.length || prompt.length > lm.context || !prompt.every(Number.isInteger)) {
    fail(`the prompt has ${prompt.length} tokens: this model takes 1..${lm.context} token ids ` +
      '(its context); shorten it');
  }
  const stops = new Set(stop === null ? [] : [stop].flat());
  const onDevice = lm.token && topK === 0 && topP >= 1;
  const random = mulberry32(seed);
  const tokens = [...prompt];
  const out = [];
  let fresh = prompt;
  let done = 0;
  model.reset();
  for (let i = 0; i < maxNewTokens && !signal?.aborted; i++) {
    if (done + fresh.length > lm.context) {        // full: again from the last half
      model.reset();
      fresh = tokens.slice(-Math.floor(lm.context / 2));
      done = 0;
    }
    while (fresh.length > lm.step) {        // a long prompt: all but its last step
      await model.run(causalFeeds(lm, fresh.slice(0, lm.step), done, 0, 0), { outputs: [] });
      fresh = fresh.slice(lm.step);
      done += lm.step;
    }
    const feeds = causalFeeds(lm, fresh, done, temperature, (seed * 1000003 + i) % 2 ** 31);
    const got = await model.run(feeds, { outputs: [onDevice ? 'token' : 'logits'] });
    done += fresh.length;
    const token = onDevice ? got.token[0] : sampleHere(got.logits, temperature, topK, topP, random);
    out.push(token);
    tokens.push(token);
    onToken?.(token, { gpuMs: model.timings.reduce((sum, t) => sum + t.ms, 0) });
    if (stops.has(token)) break;
    fresh = [token];
  }
  return out;
}

// A causal LM's input and output names and its context (see generate); an Error otherwise.
function causalNames(m) {
  const inputs = Object.fromEntries(m.inputs.map((s) => [s.name, s]));
  const has = (name) => m.outputs.some((o) => o.name === name);
  const ids = ['ids', 'input_ids'].find((n) => inputs[n]);
  if (!m.state?.length || !ids || !has('logits')) {
    fail('this model is not a causal LM: generate() needs state (the KV cache, kg.export(..., ' +
      "state=)), an input 'ids' or 'input_ids' and an output 'logits'; it has inputs " +
      `${Object.keys(inputs)} and outputs ${m.outputs.map((o) => o.name)}`);
  }
  const dims = Object.fromEntries((m.dims || []).map((d) => [d.name, d]));
  const last = (inputs[ids].symbolic_shape || inputs[ids].shape).at(-1);
  return { ids, positions: ['positions', 'position_ids'].find((n) => inputs[n]),
    mask: inputs.attention_mask ? 'attention_mask' : null,
    token: has('token') && inputs.temperature && inputs.seed ? 'token' : null,
    context: dims[m.state[0].dim].hi + 1,
    step: typeof last === 'number' ? last : dims[last.terms[0][0]].hi };
}

function causalFeeds(lm, fresh, done, temperature, seed) {
  const feeds = { [lm.ids]: Int32Array.from(fresh) };
  if (lm.positions) feeds[lm.positions] = Int32Array.from(fresh, (_, k) => done + k);
  if (lm.mask) feeds[lm.mask] = new Int32Array(done + fresh.length).fill(1);
  if (lm.token) {
    feeds.temperature = Float32Array.of(temperature);
    feeds.seed = Int32Array.of(seed);
  }
  return feeds;
}

// a seeded generator of floats in [0, 1)
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The next id of `logits` here: argmax at temperature 0, else a draw from softmax(logits / T)
// over the top k (0: all) and the smallest set reaching probability topP.
function sampleHere(logits, temperature, topK, topP, random) {
  const order = Array.from(logits.keys());
  if (temperature <= 0) return order.reduce((best, i) => (logits[i] > logits[best] ? i : best), 0);
  order.sort((a, b) => logits[b] - logits[a]);
  let kept = topK > 0 ? order.slice(0, topK) : order;
  const weights = kept.map((i) => Math.exp((logits[i] - logits[order[0]]) / temperature));
  const total = weights.reduce((a, b) => a + b, 0);
  let mass = 0;
  const n = topP < 1 ? weights.findIndex((w) => (mass += w / total) >= topP) + 1 : kept.length;
  kept = kept.slice(0, n || kept.length);
  const sum = weights.slice(0, kept.length).reduce((a, b) => a + b, 0);
  let draw = random() * sum;
  for (let k = 0; k < kept.length; k++) if ((draw -= weights[k]) <= 0) return kept[k];
  return kept[kept.length - 1];
}
