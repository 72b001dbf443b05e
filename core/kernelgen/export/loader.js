// A kernelgen WebGPU bundle's loader (written as DIR/model.js by kg.export): runs the exported
// program's WGSL kernels on WebGPU. An ES module with no dependencies (but generate(), which
// loads generate.js from next to it); the bundle's other files sit next to it: manifest.json,
// a .wgsl per distinct kernel, weights.safetensors, generate.js.
// model.js is one file on purpose (a page copies it next to its bundle and imports it alone):
// export/scripts.py joins it from this file (the entry: load()) and the parts it imports,
// loader_*.js (shared helpers, the manifest, the device, variants' builds, class Model).
//
//   import { load } from './DIR/model.js';
//   const model = await load({ device });   // device optional: share the page's GPUDevice
//   model.inputs; model.outputs;            // [{name, shape, dtype}]
//   const out = await model.run({ x: new Float32Array(64) });   // {y: Float32Array, ...}
//   model.destroy();
//
// `load({ device, timings: true })` also times each kernel on the GPU (timestamp queries, where
// the device has 'timestamp-query'): after each run, model.timings is [{name, ms}].
// model.workgroups: the workgroups the last run launched (a symbolic size launches only those
// its bound value needs). model.calls: what the last run asked of WebGPU, {submits (1),
// dispatches (one per kernel), writes (writeBuffer: the inputs, and the dims' values when they
// change), copies (state kept on the GPU), reads (outputs read back), maps (mapAsync: 1, all the
// outputs read back share one buffer; 0 when none is asked for)}.
//
// Forms: a bundle kg.export wrote with its default subgroups=None carries a kernel compiled with
// subgroups beside its plain form where the two differ (manifest.optional_features); load() asks
// the adapter for `subgroups` where it has them (a device passed in is used as it is), and runs
// those forms only where the device has the feature and passes a probe of its quads (see
// loader_forms.js); model.forms is {form: 'subgroups' | 'plain', probe: 'passed' | 'failed' |
// 'not run'}; model.manifest.kernels are the forms that run.
//
// Limits: a bundle exported for more than WebGPU's default limits (kg.export(...,
// max_storage_buffers=32): fewer, wider kernels) lists them in manifest.limits; load() asks the
// adapter for them (an Error where it cannot give them), and a device passed in must have them.
//
// Symbolic sizes (kg.Dim): manifest.dims lists each dim with its range; an input whose shape has
// one (its symbolic_shape) takes any length in range, which gives the dim's value; the kernels
// take the values as uniforms and the outputs come back at the bound sizes. A length out of range
// is an Error naming the dim and its range.
//
// Buffers, bind groups and each kernel's pipeline are made once, in load() (the pipelines
// while the weights are written), but a decode step's one-row kernels (a kernel launched at one
// value of its dim only), built after the first run that does not launch them, or by the first
// that does; a symbolic kernel's variants (the same kernel for small bound values) are built
// later, in the background, once runs ask for them (see Model.pick), or all at once by
// `await model.buildVariants()`; model.pipelines is {built, total}. run() writes the inputs,
// dispatches every kernel in one compute pass, and reads the outputs back. Intermediate buffers
// share storage as the manifest plans it. Every failure is an Error saying what to do.
//
// State (manifest.state, kg.export(..., state=)): inputs the model keeps between runs, such as a
// KV cache. The caller passes none of them; after each run the paired output's rows are copied
// into the state's buffer on the GPU; model.reset() empties them. A fixed state (dim null: a
// recurrent model's hidden state of one shape) is copied whole and starts as zeros. `run(inputs, { outputs })`
// reads back only the outputs named. A causal LM bundle (state, input ids, output logits) has
// `generate(promptIds, { maxNewTokens, temperature, topK, topP, seed, stop, onToken, signal })`:
// prefill, then one step per token, the token drawn on the GPU where the bundle has a `token`
// output (only its id read back); see generate.js.

import { ARRAYS, fail } from './loader_common.js';
import { checkManifest, fetchOk, inFolder, safetensors, withVariants } from './loader_manifest.js';
import { checkDevice, newDevice } from './loader_device.js';
import { checkForms, chooseForms, formLaunches } from './loader_forms.js';
import { Model } from './loader_model.js';

// The model next to this file (or at `base`, a URL of the bundle folder), ready to run.
// onProgress({done, total}), when given, is called as the kernels' pipelines are created (all
// of them at once, while the weights are written): first with done 0, then once per pipeline,
// last with done === total; the total is the pipelines load() waits for (each kernel's own, not
// its variants', nor a decode step's one-row kernels': see Model.prepare).
export async function load({ device = null, base = new URL('./', import.meta.url),
  timings = false, onProgress = null } = {}) {
  if (onProgress !== null && typeof onProgress !== 'function') {
    fail('load({onProgress}) takes a function called with {done, total}');
  }
  const root = new URL('./', new URL(base, globalThis.location?.href));
  let manifest;
  try {
    manifest = await (await fetchOk(new URL('manifest.json', root), 'manifest.json')).json();
  } catch (error) {
    if (error.message.startsWith('kernelgen model:')) throw error;
    fail(`${root}manifest.json is not valid JSON: re-export the bundle`);
  }
  if (manifest?.bundle !== 'webgpu') {
    fail(`${root} holds a ${manifest?.bundle} bundle: export with format="webgpu" for the web`);
  }
  checkManifest(manifest);
  checkForms(manifest);
  const unsupported = [...manifest.inputs, ...manifest.outputs].filter((s) => !ARRAYS[s.dtype]);
  if (unsupported.length) fail(`WebGPU has no ${unsupported[0].dtype}: export another dtype`);
  [...withVariants(manifest.kernels), ...formLaunches(manifest.kernels)]
    .forEach((k) => inFolder(root, k.file, 'the kernel file'));
  const weightsUrl = manifest.weights.length
    ? inFolder(root, manifest.weights_file, 'the weights file') : null;
  const weights = weightsUrl ? fetchOk(weightsUrl, manifest.weights_file)
    .then((r) => r.arrayBuffer()).then((bytes) => safetensors(new Uint8Array(bytes))) : null;
  weights?.catch(() => {});       // (awaited in prepare; a failure before then is not unhandled)
  const ownDevice = !device;
  device = device || await newDevice(manifest.features, timings, manifest.limits,
    manifest.optional_features || []);
  checkDevice(device, manifest);
  const forms = await chooseForms(device, manifest.kernels);
  const launches = withVariants(forms.kernels);
  const fetched = new Map();      // each file once (launches may share one)
  const files = Promise.all(launches.map((k) => {
    const url = inFolder(root, k.file, 'the kernel file');
    if (!fetched.has(k.file)) fetched.set(k.file, fetchOk(url, k.file).then((r) => r.text()));
    return fetched.get(k.file);
  }));
  const model = new Model(device, { ...manifest, kernels: forms.kernels }, ownDevice, timings);
  model.forms = { form: forms.form, probe: forms.probe };
  try {
    await model.prepare(files, weights, onProgress);
  } catch (error) {
    model.destroy();
    throw error;
  }
  return model;
}
