"""The Tensor's operation families, one per module; each defines a mixin class that Tensor
lists among its bases (tensor/tensor.py) and the function forms kernelgen exports.

elementwise.py (operators, math), reduce.py (sum, max, mean, softmax ...), special.py (erf,
lgamma ...), activations.py, losses.py, linalg.py (matmul, dot), conv.py (conv1d/2d and the
conv2d backward rule), pooling.py, norms.py (layernorm, rms_norm, batchnorm, group/instance
norm), attention.py (scaled_dot_product_attention), interpolate.py (interpolate, dropout),
einsum.py, shape.py (movement and creation helpers), indexing.py (basic indexing),
advanced_indexing.py (integer-array indexing, take, gather), scatter.py (setitem, scatter,
scatter_add), sorted_scatter.py (their sorted device form), scan.py (cumsum ...) and sort.py.
"""
