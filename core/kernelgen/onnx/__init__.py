"""ONNX models in: `kg.onnx.load(src)` reads a model (path, bytes or binary file object) with a
stdlib protobuf reader (proto.py) and `model.run({name: array}, device=...)` builds its outputs
as lazy Tensors, so `kg.compile` gives the model's kernels.
"""
from .data import MAX_MODEL_BYTES
from .proto import parse_model, parse_tensor

__all__ = ["MAX_MODEL_BYTES", "parse_model", "parse_tensor"]

from .model import Model, load  # noqa: E402

__all__ += ["Model", "load"]
