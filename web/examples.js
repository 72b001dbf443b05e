// Example programs for the page (and the browser tests). Each assigns its result to `out`.
export const EXAMPLES = {
  elementwise: `# Elementwise ops fuse into one kernel.
x = Tensor.rand(8, 256, seed=1)
y = Tensor.rand(8, 256, seed=2) * 2.0 - 1.0
out = ((x * 2.0 - y).exp() * 0.5 + y.abs().sqrt()).relu()
`,
  softmax: `# Softmax over the last axis: max, exp, sum, divide.
x = Tensor.rand(16, 128, seed=0) * 6.0 - 3.0
out = x.softmax(axis=-1)
`,
  matmul: `# A matrix product (tiled for the target by the optimizer).
a = Tensor.rand(32, 64, seed=1) - 0.5
b = Tensor.rand(64, 48, seed=2) - 0.5
out = (a @ b).relu()
`,
  conv2d: `# A 3x3 convolution, NCHW input and OIHW weights, with bias.
x = Tensor.rand(1, 3, 12, 12, seed=3) - 0.5
w = Tensor.rand(4, 3, 3, 3, seed=4) - 0.5
b = Tensor.rand(4, seed=5)
out = x.conv2d(w, bias=b, padding=1)
`,
  int8: `# int8 tensors: wrapping arithmetic, as in numpy (packed four per word in WGSL).
a = Tensor.arange(-64, 64, dtype=dtypes.int8)
b = Tensor.full((128,), 3, dtype=dtypes.int8)
out = a * b + (a >> 2)
`,
  float16: `# float16: native f16 where the adapter has shader-f16, packed pairs otherwise.
x = (Tensor.rand(4, 64, seed=7) * 4.0 - 2.0).cast(dtypes.float16)
out = (x * x + 1.0).sqrt()
`,
};

export const DEFAULT_EXAMPLE = 'matmul';
