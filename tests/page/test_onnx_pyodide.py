"""kg.onnx in the standard library alone (this file also runs inside Pyodide in the page, through
test_browser.py): a model written out as protobuf bytes here, read, run on PYTHON, compiled.
Expected values are written out by hand."""
from __future__ import annotations

import struct

import pytest

import kernelgen as kg


def _varint(v: int) -> bytes:
  out = bytearray()
  v &= (1 << 64) - 1
  while True:
    out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
    v >>= 7
    if not v:
      return bytes(out)


def _len(field: int, payload: bytes) -> bytes:
  return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _int(field: int, value: int) -> bytes:
  return _varint(field << 3) + _varint(value)


def _tensor(name: str, dims, fmt: str, elem: int, values) -> bytes:
  body = b"".join(_int(1, d) for d in dims) + _int(2, elem) + _len(8, name.encode())
  return body + _len(9, struct.pack(f"<{len(values)}{fmt}", *values))


def _value_info(name: str, dims) -> bytes:
  shape = b"".join(_len(1, _int(1, d) if isinstance(d, int) else _len(2, d.encode()))
                   for d in dims)
  tensor_type = _int(1, 1) + _len(2, shape)
  return _len(1, name.encode()) + _len(2, _len(1, tensor_type))


def _node(op: str, inputs, outputs, attrs=b"") -> bytes:
  return (b"".join(_len(1, i.encode()) for i in inputs) +
          b"".join(_len(2, o.encode()) for o in outputs) + _len(4, op.encode()) + attrs)


def _model() -> bytes:
  """y = reshape(relu(x @ w), [-1]) with x of shape (N, 2): N symbolic."""
  graph = (_len(1, _node("MatMul", ["x", "w"], ["h"])) +
           _len(1, _node("Relu", ["h"], ["r"])) +
           _len(1, _node("Reshape", ["r", "flat"], ["y"])) +
           _len(2, b"g") +
           _len(5, _tensor("w", [2, 2], "f", 1, [1.0, -1.0, 2.0, 0.5])) +
           _len(5, _tensor("flat", [1], "q", 7, [-1])) +
           _len(11, _value_info("x", ["N", 2])) + _len(12, _value_info("y", ["M"])))
  opset = _len(1, b"") + _int(2, 13)
  return _int(1, 8) + _len(8, opset) + _len(7, graph)


def test_a_hand_written_model_loads_and_runs():
  m = kg.onnx.load(_model())
  assert m.input_names == ["x"] and m.output_names == ["y"]
  assert m.input_shapes == {"x": ("N", 2)}
  y = m.run({"x": [[1.0, 2.0], [-3.0, 1.0]]}, device="PYTHON")["y"]
  # rows: [1*1 + 2*2, 1*-1 + 2*0.5] = [5, 0]; [-3 + 2, 3 + 0.5] = [-1, 3.5] -> relu
  assert y.shape == (4,) and y.tolist() == [5.0, 0.0, 0.0, 3.5]


def test_the_model_compiles_to_kernels():
  out = kg.onnx.load(_model()).run({"x": [[1.0, 2.0]]}, device="PYTHON")
  kernels = kg.compile(list(out.values()), target="wgsl")
  assert len(kernels) == 1 and "fn " in kernels[0].source


def test_truncated_model_is_a_model_error():
  with pytest.raises(kg.ModelError):
    kg.onnx.load(_model()[:-7])
