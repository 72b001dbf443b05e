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
optimizers). PREVIEW lists the operators of other domains that are implemented; every other
operator of another domain is refused by name.
"""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..tensor.tensor import Tensor

OPS: dict = {}


def op(*names, foldable=True):
  def register(fn):
    fn.foldable = foldable
    for name in names:
      OPS[name] = fn
    return fn
  return register


PREVIEW = {"ai.onnx.preview": {"FlexAttention"},      # other domains' operators implemented
           "ai.onnx.preview.training": {"Adagrad", "Adam", "Momentum"},
           "ai.onnx.ml": {"Binarizer", "ArrayFeatureExtractor", "TreeEnsemble"}}


def check_supported(node) -> None:
  domain = node.proto.domain
  if node.op in PREVIEW.get(domain, ()):
    return
  if domain not in ("", "ai.onnx"):
    raise UnsupportedError(f"{node.describe()}: operators of domain {domain!r} are not "
                           f"supported (only the default ONNX domain)")
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

