"""The stdlib ONNX protobuf reader (kernelgen.onnx.proto) against the onnx package's
own parse of every model in the test corpus, and its typed errors on damaged input."""
from __future__ import annotations

import io
import math
import struct

import pytest

import kernelgen as kg
from kernelgen.onnx import data as onnx_data
from kernelgen.onnx import proto
from onnx_corpus import light_models, node_cases, onnx_or_missing


def _same(ours, theirs, path: str) -> None:
  """Every field of our message equals the protobuf message's (floats compared by bits)."""
  for num, (name, kind, repeated) in type(ours).FIELDS.items():
    mine, ref = getattr(ours, name), getattr(theirs, name)
    where = f"{path}.{name}"
    if repeated:
      ref = list(ref)
      assert len(mine) == len(ref), f"{where}: {len(mine)} values, onnx has {len(ref)}"
      for i, (a, b) in enumerate(zip(mine, ref)):
        _same_value(a, b, kind, f"{where}[{i}]")
    elif not isinstance(kind, str):
      assert ours.has(name) == theirs.HasField(name), f"{where}: presence differs"
      if ours.has(name):
        _same(mine, ref, where)
    else:
      if theirs.DESCRIPTOR.fields_by_name[name].has_presence:
        assert ours.has(name) == theirs.HasField(name), f"{where}: presence differs"
      _same_value(mine, ref, kind, where)


def _same_value(a, b, kind, where: str) -> None:
  if not isinstance(kind, str):
    _same(a, b, where)
  elif kind in ("float", "double"):
    fmt = "<f" if kind == "float" else "<d"
    assert struct.pack(fmt, a) == struct.pack(fmt, b) or (math.isnan(a) and math.isnan(b)), \
      f"{where}: {a} != {b}"
  else:
    assert a == b, f"{where}: {a!r} != {b!r}"


def _corpus():
  return [*light_models(), *(case / "model.onnx" for case in node_cases())]


def test_reader_matches_onnx_on_every_model_in_the_corpus():
  onnx = onnx_or_missing()
  models = _corpus()
  assert len(models) > 1000, "the corpus should hold the node cases and the light models"
  for path in models:
    raw = path.read_bytes()
    _same(proto.parse_model(raw), onnx.load_from_string(raw), path.parent.name + "/" + path.name)


def test_reader_matches_onnx_on_test_data_tensors():
  onnx = onnx_or_missing()
  files = [f for case in node_cases()[::7] for f in sorted(case.glob("test_data_set_0/*.pb"))]
  assert len(files) > 200
  for f in files:
    raw = f.read_bytes()
    ref = onnx.TensorProto()
    ref.ParseFromString(raw)
    _same(proto.parse_tensor(raw), ref, f.name)


def _typed_tensor(onnx, values, elem_type, field):
  t = onnx.TensorProto(name="t", data_type=elem_type, dims=[len(values)])
  getattr(t, field).extend(values)
  return t


@pytest.mark.parametrize("elem_type, field, values, dtype", [
  (1, "float_data", [1.5, -2.0, 3.25], "float32"),
  (6, "int32_data", [-1, 7, 2 ** 31 - 1], "int32"),
  (7, "int64_data", [-(2 ** 40), 3, 0], "int64"), (11, "double_data", [0.1, -1e300, 2], "float64"),
  (12, "uint64_data", [2 ** 32 - 1, 0, 5], "uint32"),
  (13, "uint64_data", [2 ** 64 - 1, 1, 2], "uint64"),
  (3, "int32_data", [-128, 127, 0], "int8"), (2, "int32_data", [255, 0, 1], "uint8"),
  (5, "int32_data", [-32768, 5, 32767], "int16"), (9, "int32_data", [1, 0, 1], "bool"),
  (10, "int32_data", [0x3C00, 0xC000, 0x7BFF], "float16"),
])
def test_typed_fields_unpacked_and_packed_give_numpy_values(elem_type, field, values, dtype):
  onnx = onnx_or_missing()
  import numpy as np
  from onnx import numpy_helper
  t = _typed_tensor(onnx, values, elem_type, field)
  packed = t.SerializeToString()
  unpacked = _unpack_repeated(packed)
  expected = numpy_helper.to_array(t)
  for raw in (packed, unpacked):
    got_dtype, shape, payload = onnx_data.tensor_payload(proto.parse_tensor(raw), None)
    assert got_dtype.name == dtype and shape == (3,)
    want = expected.view(np.uint16) if dtype == "float16" else expected
    np.testing.assert_array_equal(np.frombuffer(payload, dtype=want.dtype), want)


def _unpack_repeated(raw: bytes) -> bytes:
  """The same TensorProto with every packed numeric field written one element per tag."""
  msg = proto.parse_tensor(raw)
  out = bytearray()
  for num, (name, kind, repeated) in proto.TensorProto.FIELDS.items():
    if not msg.has(name):
      continue
    for v in (getattr(msg, name) if repeated else [getattr(msg, name)]):
      if kind == "float":
        out += _varint(num << 3 | 5) + struct.pack("<f", v)
      elif kind == "double":
        out += _varint(num << 3 | 1) + struct.pack("<d", v)
      elif kind in ("string", "bytes"):
        b = v.encode() if isinstance(v, str) else v
        out += _varint(num << 3 | 2) + _varint(len(b)) + b
      else:
        out += _varint(num << 3) + _varint(v & 0xFFFFFFFFFFFFFFFF)
  return bytes(out)


def _varint(v: int) -> bytes:
  out = bytearray()
  while True:
    out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
    v >>= 7
    if not v:
      return bytes(out)


# ---- damaged input ---------------------------------------------------------------------------

def _model_bytes() -> bytes:
  return light_models()[0].read_bytes()


@pytest.mark.parametrize("damage, words", [
  (lambda b: b[:len(b) // 2], "truncated"),
  (lambda b: b"\x08" + b"\xff" * 12, "varint"),
  (lambda b: b"\x08\xff\xff", "truncated varint"),
  (lambda b: b"\x3a\x05\x0a", "truncated field"),           # graph (7), LEN 5, one byte
  (lambda b: b"\x0a\x00", "wire type"),                     # ir_version as LEN
  (lambda b: b"\x3d\x00\x00\x00\x00", "wire type"),         # graph as a 32-bit value
  (lambda b: b"\x0b", "wire type 3"),                       # a group
  (lambda b: b"\x00\x00", "field number 0"),
])
def test_damaged_protobuf_is_a_model_error(damage, words):
  with pytest.raises(kg.ModelError, match=words):
    kg.onnx.parse_model(damage(_model_bytes()))


def test_deep_nesting_is_refused_not_a_recursion_error():
  inner = b""
  for _ in range(200):      # a TypeProto holding a sequence of a sequence of ...
    seq = b"\x0a" + _varint(len(inner)) + inner
    inner = b"\x22" + _varint(len(seq)) + seq
  with pytest.raises(kg.ModelError, match="nested"):
    proto.decode(proto.TypeProto, inner)


def test_unknown_fields_are_skipped():
  raw = _model_bytes()
  extra = _varint(99 << 3 | 2) + _varint(3) + b"abc" + _varint(98 << 3) + _varint(5)
  assert _same_graph(proto.parse_model(extra + raw), proto.parse_model(raw))


def _same_graph(a, b) -> bool:
  return [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node] and \
    a.ir_version == b.ir_version


def test_model_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
  path = tmp_path / "m.onnx"
  path.write_bytes(_model_bytes())
  monkeypatch.setattr(onnx_data, "MAX_MODEL_BYTES", 100)
  for src in (str(path), path.read_bytes(), io.BytesIO(path.read_bytes())):
    with pytest.raises(kg.LimitError, match="over the limit"):
      onnx_data.read_limited(src)
  reads = []

  class Spy(io.BytesIO):
    def read(self, n=-1):
      reads.append(n)
      return super().read(n)
  with pytest.raises(kg.LimitError):
    onnx_data.read_limited(Spy(path.read_bytes()))
  assert reads == [101], "a file object is read at most limit + 1 bytes"


def test_the_limit_is_one_gigabyte():
  assert onnx_data.MAX_MODEL_BYTES == 1 << 30


def test_external_data_by_path_matches_onnx(tmp_path):
  onnx = onnx_or_missing()
  import numpy as np
  from onnx import external_data_helper, helper, numpy_helper
  w = np.arange(4096, dtype=np.float32).reshape(64, 64) / 7
  graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
    [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 64])],
    [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 64])],
    [numpy_helper.from_array(w, "w")])
  model = helper.make_model(graph)
  external_data_helper.convert_model_to_external_data(model, location="weights.bin",
                                                       size_threshold=0)
  onnx.save(model, str(tmp_path / "m.onnx"))
  parsed = proto.parse_model((tmp_path / "m.onnx").read_bytes())
  t = parsed.graph.initializer[0]
  assert t.data_location == 1
  dtype, shape, raw = onnx_data.tensor_payload(t, str(tmp_path))
  np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(shape), w)
  with pytest.raises(kg.ModelError, match="from its path"):
    onnx_data.tensor_payload(t, None)
  t.external_data[0].value = "../weights.bin"
  with pytest.raises(kg.ModelError, match="relative path"):
    onnx_data.tensor_payload(t, str(tmp_path))


def test_not_a_model_source_is_a_model_error():
  with pytest.raises(kg.ModelError, match="path, bytes or a binary file"):
    onnx_data.read_limited(12)
  with pytest.raises(kg.ModelError, match="binary mode"):
    onnx_data.read_limited(io.StringIO("x"))
  with pytest.raises(kg.ModelError, match="cannot open"):
    onnx_data.read_limited("/nonexistent/m.onnx")


def test_damaged_models_give_typed_errors_only():
  """Byte flips, cuts and insertions anywhere in a real model: kg.onnx.load either reads it or
  raises a KernelgenError, never a raw Python exception."""
  import random
  raw = light_models()[-1].read_bytes()
  rng = random.Random(7)
  outcomes = {"read": 0, "refused": 0}
  for _ in range(300):
    data = bytearray(raw)
    kind = rng.randrange(3)
    at = rng.randrange(len(data))
    if kind == 0:
      data[at] = rng.randrange(256)
    elif kind == 1:
      del data[at:at + rng.randrange(1, 40)]
    else:
      data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    try:
      kg.onnx.load(bytes(data))
      outcomes["read"] += 1
    except kg.KernelgenError:
      outcomes["refused"] += 1
  assert outcomes["refused"] > 50, outcomes
