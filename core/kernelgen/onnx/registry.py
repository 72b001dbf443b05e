"""The ONNX operators of the default domain (and a few of other domains), as kernelgen Tensor
code.

Each operator is a function (inputs, attrs) -> output Tensor or list of outputs, registered by
name with `@op`; `inputs[i]` is a Tensor (None when the optional input is absent),
`inputs.ints(i)` the host values of a shape-like input, `inputs.opset` the model's opset, where
an operator's inputs or attributes changed between versions (Squeeze's axes, Slice's starts,
Clip's bounds ...). Semantics follow the ONNX operator documentation: numpy broadcasting,
attribute defaults, negative axes, optional inputs. This module holds the registry and the
helpers the operator modules of operators/ share: math.py (elementwise, reductions), nn.py
(convolution, pooling, normalization, attention, recurrent layers: attention.py, rnn.py),
conv_transpose.py (ConvTranspose), shape.py (movement), resize.py, indexing.py (scatter/gather,
data-dependent shapes), control.py (If, Loop, Scan), sequence.py (sequences, optionals),
signal.py (DFT, STFT), quant.py (integer and quantized), llm.py (RotaryEmbedding, LinearAttention,
CausalConvWithState, FlexAttention), grid.py (GridSample, AffineGrid, RoiAlign, DeformConv),
random.py (Random*, Bernoulli, Multinomial), text.py (TfIdfVectorizer, ai.onnx.ml's
Binarizer, ArrayFeatureExtractor, TreeEnsemble), training.py (the training domain's
optimizers), contrib.py and quant_nbits.py (onnxruntime's com.microsoft operators of language
models: GroupQueryAttention, MatMulNBits ...). PREVIEW lists the operators of other domains
that live in OPS; DOMAIN_OPS holds those registered with `domain_op` under their domain (where
a default-domain operator of the same name means something else); every other operator of
another domain is refused by name and domain.
"""
from __future__ import annotations

from ..dtype import dtypes
from ..errors import ShapeError, UnsupportedError
from ..tensor.tensor import Tensor

OPS: dict = {}
DOMAIN_OPS: dict = {}     # (domain, name) -> fn: another domain's operators (com.microsoft ...)


def op(*names, foldable=True):
  def register(fn):
    fn.foldable = foldable
    for name in names:
      OPS[name] = fn
    return fn
  return register


def domain_op(domain: str, *names):
  """Register an operator of `domain` (its semantics may differ from a default-domain namesake:
  com.microsoft's RotaryEmbedding is not ONNX's)."""
  def register(fn):
    fn.foldable = True
    for name in names:
      DOMAIN_OPS[(domain, name)] = fn
    return fn
  return register


def implementation(node):
  """The function that computes `node` (its domain's operator first, then the default one)."""
  return DOMAIN_OPS.get((node.proto.domain, node.op)) or OPS[node.op]


PREVIEW = {"ai.onnx.preview": {"FlexAttention"},      # other domains' operators implemented
           "ai.onnx.preview.training": {"Adagrad", "Adam", "Momentum"},
           "ai.onnx.ml": {"Binarizer", "ArrayFeatureExtractor", "TreeEnsemble"}}


def check_supported(node) -> None:
  domain = node.proto.domain
  if node.op in PREVIEW.get(domain, ()) or (domain, node.op) in DOMAIN_OPS:
    return
  if domain not in ("", "ai.onnx"):
    known = sorted(n for d, n in DOMAIN_OPS if d == domain) + sorted(PREVIEW.get(domain, ()))
    also = f" (of that domain kernelgen implements {', '.join(known)})" if known else \
      " (only the default ONNX domain)"
    raise UnsupportedError(f"{node.describe()}: operator {node.op} of domain {domain!r} is "
                           f"not supported{also}")
  if node.op not in OPS:
    raise UnsupportedError(f"{node.describe()}: operator {node.op} is not implemented in "
                           f"kernelgen's ONNX importer")


def axis_index(a: int, ndim: int) -> int:
  if not -max(ndim, 1) <= a < max(ndim, 1):
    raise ShapeError(f"axis {a} is out of range for {ndim} dims")
  return a % max(ndim, 1)


def full(shape, value, dtype, device) -> Tensor:
  return Tensor.full(tuple(shape), value, dtype=dtype, device=device)


def broadcast(*shapes):
  from ..tensor.data import broadcast_shape
  return broadcast_shape(*shapes)



def widened(x: Tensor | None) -> Tensor | None:
  """x in float32 where it is a 16-bit float, else x itself (None stays None). onnxruntime's CPU
  kernels of a float16 node widen its inputs, compute in float32 and round each output once
  (`narrowed`); an operator decomposed into Tensor ops computes on widened inputs to match,
  rather than rounding every intermediate to float16. Not matched: onnxruntime's x86 CPU also
  drops the float32 -> float16 -> float32 Cast pairs between consecutive nodes it has no
  float16 kernel for (MatMul -> Sigmoid -> Mul -> MatMul of an MLP stays float32)."""
  if x is not None and x.dtype in (dtypes.float16, dtypes.bfloat16):
    return x.float()
  return x


def narrowed(y: Tensor, like: Tensor) -> Tensor:
  """y (computed on `widened` inputs) rounded once to the dtype of the node's input `like`."""
  return y if y.dtype == like.dtype else y.cast(like.dtype)
