// Training-step measurements for bench/training.py: kernelgen (its worker, WEBGPU) and TF.js
// (WebGPU backend) in one page. Each returns {values: [step ms x STEPS, loss x STEPS], adapter}.
import { createKernelgen } from '/web/kernelgen.js';

let shared = null;  // one kernelgen worker for every model
async function ours(code) {
  shared ||= await createKernelgen({ base: '/', webgpu: true });
  // a training loop: no per-kernel GPU timestamps (the page's editor shows them; TF.js takes none)
  const result = await shared.run(code, { device: 'WEBGPU', reference: false, timings: false });
  return { values: Array.from(result.data), adapter: shared.info.gpu?.adapter || null };
}

function tensorOf(entry) {
  const bytes = Uint8Array.from(atob(entry.b64), (c) => c.charCodeAt(0));
  return tf.tensor(new Float32Array(bytes.buffer), entry.shape.length ? entry.shape : [1]);
}

// The same model, weights, batch, loss and SGD as bench/training.py's LOOP. TF.js's conv2d is
// NHWC with HWIO filters: the input and filters are transposed once, before training, and the
// features back to NCHW order before the flatten, so the linear layer's weights are the same.
async function tfjs(kind, model, lr, steps) {
  await tf.setBackend('webgpu');
  await tf.ready();
  const p = {};
  for (const [name, entry] of Object.entries(model.params)) {
    const t = tensorOf(entry);
    p[name] = tf.variable(name.startsWith('k') ? tf.transpose(t, [2, 3, 1, 0]) : t);
  }
  let x = tensorOf(model.x);
  if (kind === 'cnn') x = tf.transpose(x, [0, 2, 3, 1]);
  const onehot = tensorOf(model.onehot);
  const forward = () => {
    if (kind === 'mlp') {
      return tf.add(tf.matMul(tf.relu(tf.add(tf.matMul(x, p.w1), p.b1)), p.w2), p.b2);
    }
    let h = tf.relu(tf.add(tf.conv2d(x, p.k1, 1, [[0, 0], [1, 1], [1, 1], [0, 0]]), p.c1));
    h = tf.relu(tf.add(tf.conv2d(h, p.k2, 2, [[0, 0], [1, 1], [1, 1], [0, 0]]), p.c2));
    h = tf.reshape(tf.transpose(h, [0, 3, 1, 2]), [h.shape[0], -1]);
    return tf.add(tf.matMul(h, p.w3), p.b3);
  };
  const lossOf = () => tf.neg(tf.mean(tf.sum(tf.mul(tf.logSoftmax(forward()), onehot), -1)));
  const optimizer = tf.train.sgd(lr);
  const times = [];
  const losses = [];
  for (let i = 0; i < steps; i += 1) {
    const start = performance.now();
    const loss = optimizer.minimize(lossOf, true, Object.values(p));
    losses.push((await loss.data())[0]);
    times.push(performance.now() - start);
    loss.dispose();
  }
  return { values: [...times, ...losses], adapter: `tfjs ${tf.version.tfjs} webgpu` };
}

window.training = { ours, tfjs };
document.body.dataset.ready = 'true';
