"""kg.save / kg.load against the `safetensors` package: byte-identical files, round trips both
ways for every dtype both support (float16 and bfloat16 included), metadata, typed errors."""
from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest

import kernelgen as kg

from kernelgen.nn.safetensors import serialize

try:
  import safetensors.numpy as st_numpy
  from safetensors import safe_open
except ImportError:   # a missing oracle fails, never skips
  st_numpy = None


@pytest.fixture(autouse=True)
def _need_safetensors():
  if st_numpy is None:
    pytest.fail("the safetensors package is needed: .venv/bin/pip install safetensors")


DTYPES = ["bool", "uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
          "uint64", "int64", "float64"]


def _arrays(rng):
  out = {}
  for i, name in enumerate(DTYPES):
    shape = [(3, 4), (5,), (2, 1, 3), (), (0, 2)][i % 5]
    if name == "bool":
      a = rng.random(shape) > 0.5
    elif name.startswith(("int", "uint")):
      info = np.iinfo(name)
      a = rng.integers(max(info.min, -1000), min(info.max, 1000), shape, dtype=name)
    else:
      a = rng.standard_normal(shape).astype(name)
    out[f"t.{name}"] = a
  return out


def _opened(blob: bytes):
  import tempfile
  path = tempfile.NamedTemporaryFile(suffix=".safetensors", delete=False).name
  with open(path, "wb") as f:
    f.write(blob)
  return safe_open(path, framework="numpy")


def _bf16_bits(x: np.ndarray) -> np.ndarray:
  """float32 -> the bfloat16 bit patterns (round to nearest even), as uint16."""
  bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_save_is_byte_identical_to_safetensors():
  """One metadata key: the package keeps metadata in a hash map, so the order of several keys
  in its header changes from run to run (both orders load the same)."""
  arrays = _arrays(np.random.default_rng(0))
  for meta in ({"format": "np"}, None):
    ours = io.BytesIO()
    kg.save({k: kg.Tensor(v, device="PYTHON") for k, v in arrays.items()}, ours, metadata=meta)
    theirs = st_numpy.save(arrays, metadata=meta)
    assert ours.getvalue() == theirs
  meta = {"format": "np", "note": "kernelgen", "z": ""}
  blob = serialize({"a": kg.Tensor([1.0, 2.0], device="PYTHON")}, meta)
  with _opened(blob) as f:
    assert f.metadata() == meta


def test_their_file_loads_in_kernelgen(tmp_path):
  arrays = _arrays(np.random.default_rng(1))
  path = tmp_path / "a.safetensors"
  st_numpy.save_file(arrays, str(path), metadata={"k": "v"})
  tensors, meta = kg.load(str(path), device="PYTHON", with_metadata=True)
  assert meta == {"k": "v"} and set(tensors) == set(arrays)
  for name, a in arrays.items():
    t = tensors[name]
    assert t.dtype.name == a.dtype.name and t.shape == a.shape
    np.testing.assert_array_equal(t.numpy(), a)


def test_our_file_loads_in_safetensors(tmp_path):
  rng = np.random.default_rng(2)
  path = tmp_path / "b.safetensors"
  x = kg.Tensor.randn(4, 5, seed=3, device="PYTHON")
  y = kg.Tensor.arange(7, device="PYTHON")
  kg.save({"x": x, "y": y, "z": kg.Tensor(rng.standard_normal(3), device="PYTHON")}, str(path),
          metadata={"m": "1"})
  loaded = st_numpy.load_file(str(path))
  np.testing.assert_array_equal(loaded["x"], x.numpy())
  np.testing.assert_array_equal(loaded["y"], np.arange(7, dtype=np.int32))
  with safe_open(str(path), framework="numpy") as f:
    assert f.metadata() == {"m": "1"}


def test_bfloat16_both_ways():
  x = np.array([1.0, -2.5, 3.140625, 1e-3, 65504.0, -0.0], dtype=np.float32)
  t = kg.Tensor(x, dtype="bfloat16", device="PYTHON")
  blob = serialize({"b": t})   # the bytes save() writes
  header_len = struct.unpack("<Q", blob[:8])[0]
  header = json.loads(blob[8:8 + header_len])
  assert header["b"]["dtype"] == "BF16"
  raw = np.frombuffer(blob[8 + header_len:], dtype=np.uint16)
  np.testing.assert_array_equal(raw, _bf16_bits(x))
  # safetensors' numpy reader has no bfloat16 type: its raw reader parses our file, and the
  # bit patterns above are the oracle for the values
  import safetensors
  ((name, info),) = safetensors.deserialize(blob)
  assert name == "b" and info["dtype"] in ("BF16", "bfloat16") and list(info["shape"]) == [6]
  assert bytes(info["data"]) == _bf16_bits(x).tobytes()
  back = kg.load(blob, device="PYTHON")["b"]
  assert back.dtype == kg.dtypes.bfloat16
  np.testing.assert_array_equal(back.numpy(), t.numpy())


def test_float16_values_round_trip():
  x = np.array([0.5, -1.25, 6.1e-5, 65504], dtype=np.float16)
  back = st_numpy.load(serialize({"h": kg.Tensor(x, device="PYTHON")}))
  np.testing.assert_array_equal(back["h"], x)
  ours = kg.load(st_numpy.save({"h": x}), device="PYTHON")["h"]
  assert ours.dtype == kg.dtypes.float16
  np.testing.assert_array_equal(ours.numpy(), x)


def test_module_state_dict_round_trip(tmp_path):
  kg.nn.manual_seed(0)
  a = kg.nn.Sequential(kg.nn.Linear(3, 4), kg.nn.ReLU(), kg.nn.Linear(4, 2))
  kg.nn.manual_seed(1)
  b = kg.nn.Sequential(kg.nn.Linear(3, 4), kg.nn.ReLU(), kg.nn.Linear(4, 2))
  path = tmp_path / "m.safetensors"
  kg.save(a.state_dict(), path)
  b.load_state_dict(kg.load(path))
  for (n1, p1), (n2, p2) in zip(a.state_dict().items(), b.state_dict().items()):
    assert n1 == n2
    np.testing.assert_array_equal(p1.numpy(), p2.numpy())


def _file(header: dict, data: bytes = b"", raw_header: bytes | None = None) -> bytes:
  text = raw_header if raw_header is not None else json.dumps(header).encode()
  return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("blob, match", [
  (b"\x01\x02", "8-byte"),
  (struct.pack("<Q", 1 << 40) + b"{}", "does not fit"),
  (_file({}, raw_header=b"{not json"), "JSON"),
  (_file({}, raw_header=b"[1, 2]"), "object"),
  (_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "outside"),
  (_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "needs 12"),
  (_file({"a": {"dtype": "X99", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8), "X99"),
  (_file({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4), "shape"),
  (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, b"\0" * 12), "gaps"),
  (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8), "cover"),
  (_file({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4), "exactly"),
  (_file({"__metadata__": {"a": 1}}), "metadata"),
])
def test_malformed_files_raise_typed_errors(blob, match):
  with pytest.raises(kg.SafetensorsError, match=match):
    kg.load(blob)
  with pytest.raises(Exception):   # the reference rejects them too
    st_numpy.load(blob)


def test_bad_values_to_save():
  with pytest.raises(kg.SafetensorsError):
    kg.save([1, 2], io.BytesIO())
  with pytest.raises(kg.SafetensorsError):
    kg.save({"__metadata__": kg.Tensor([1.0])}, io.BytesIO())
  with pytest.raises(kg.SafetensorsError):
    kg.save({"a": kg.Tensor([1.0])}, io.BytesIO(), metadata={"a": 1})
