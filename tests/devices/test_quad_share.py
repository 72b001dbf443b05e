"""Quad sharing (lowering/quad_share.py, option quad_weights with subgroups): register-tiled convs
and matmuls load the addresses a quad of lanes shares a quarter per lane and hand them round with
QUAD_BROADCAST (WGSL quadBroadcast).

Values against numpy on the reference interpreter (subgroups of 4, 8 and 32 lanes) and on WEBGPU
(wgpu + lavapipe), sizes that divide no tile; the WGSL changes only where the adapter table (or
the caller) turns the option on and the device has subgroups; lanes that do not share keep their
own loads; PTX and the verifier refuse what they cannot do.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.errors import ExecutionError, UnsupportedError, VerifyError
from kernelgen.render.wgsl.adapters import CLASSES
from kernelgen.uop.ops import Ops, UOp
from kernelgen.uop.verify import verify
from kernelgen import dtypes
from tools import default_device, missing_tool, tint_validate

TILE = {"tile": (4, 4)}
QUAD = {"subgroups": True, "quad_weights": True, **TILE}


def conv_case(rng):
  """conv2d 5 -> 7 channels (7: no multiple of the tile) over 12 x 13, padding 1."""
  x = rng.standard_normal((1, 5, 12, 13)).astype(np.float32)
  w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  return (x, w), lambda a, b: a.conv2d(b, padding=1), np.einsum("nchwij,ocij->nohw", windows, w)


def matmul_case(rng):
  """(37, 29) @ (29, 61): 16 threads per row of 4x4 tiles, 37 and 61 no multiple of 4."""
  a = rng.standard_normal((37, 29)).astype(np.float32)
  b = rng.standard_normal((29, 61)).astype(np.float32)
  return (a, b), lambda p, q: p @ q, a @ b


CASES = {"conv": conv_case, "matmul": matmul_case}


def quad_ops(t: kg.Tensor, **options) -> int:
  """QUAD_BROADCAST nodes in the kernels of `t` compiled for PYTHON."""
  return sum(u.op is Ops.QUAD_BROADCAST for k in kg.compile(t, target="python", **options)
             for u in k.kernel.uops)


def wgsl(t: kg.Tensor, **options) -> str:
  return "\n".join(k.source for k in kg.compile(t, target="wgsl", **options))


@contextlib.contextmanager
def quads_on_python(monkeypatch, options: dict):
  """PYTHON as the default device, rendering with `options` (subgroups and quad_weights on);
  yields a setter for its subgroup (size, layout)."""
  rt = kg.Device["PYTHON"]

  def configure(size: int, layout: str = "linear"):
    monkeypatch.setattr(rt, "render_options", lambda: dict(options))
    monkeypatch.setattr(rt, "subgroup_size", size)
    monkeypatch.setattr(rt, "subgroup_layout", layout)

  with default_device(monkeypatch, "PYTHON"):
    yield configure


@pytest.fixture
def python_quads(monkeypatch):
  """PYTHON with subgroups and quad_weights on; returns a setter for (size, layout)."""
  with quads_on_python(monkeypatch, QUAD) as configure:
    yield configure


@pytest.mark.parametrize("size", [4, 8, 32])
@pytest.mark.parametrize("case", list(CASES))
def test_interpreter_matches_numpy(python_quads, case, size):
  interpreter_check(python_quads, CASES[case], QUAD, size)


def interpreter_check(configure, case, options: dict, size: int) -> None:
  """`case`'s expression on the PYTHON interpreter with subgroups of `size` lanes (configure:
  quads_on_python's setter) shares quads under `options` and equals numpy."""
  configure(size)
  inputs, expr, want = case(np.random.default_rng(size))
  y = expr(*[kg.Tensor(x) for x in inputs])
  assert quad_ops(y, **options) > 0
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_interpreter_refuses_quads_a_subgroup_cannot_hold(python_quads):
  """Subgroups of 2 lanes have no lane 2 or 3: undefined in WGSL, an error here."""
  python_quads(2)
  inputs, expr, _ = matmul_case(np.random.default_rng(0))
  with pytest.raises(ExecutionError, match="quad broadcast from lane"):
    expr(*[kg.Tensor(x) for x in inputs]).numpy()


def test_lanes_that_do_not_share_keep_their_loads():
  """(37, 29) @ (29, 23) in 4x4 tiles: 6 threads per row, so a quad spans two rows of A (and
  B's columns differ per lane): nothing is shared."""
  a, b = np.zeros((37, 29), np.float32), np.zeros((29, 23), np.float32)
  assert quad_ops(kg.Tensor(a) @ kg.Tensor(b), **QUAD) == 0


@pytest.mark.parametrize("adapter", CLASSES)
def test_wgsl_changes_only_where_the_table_and_subgroups_say(adapter):
  rng = np.random.default_rng(1)
  x = kg.Tensor(rng.standard_normal((1, 32, 24, 24)).astype(np.float32))   # (register tiles on
  w = kg.Tensor(rng.standard_normal((16, 32, 3, 3)).astype(np.float32))    # both CPU adapters)
  y = x.conv2d(w, padding=1)
  on = wgsl(y, adapter=adapter, subgroups=True)
  assert ("quadBroadcast" in on) == (adapter in ("swiftshader", "lavapipe"))
  assert on == wgsl(y, adapter=adapter, subgroups=True, quad_weights="quadBroadcast" in on)
  plain = wgsl(y, adapter=adapter, subgroups=False)
  assert "quadBroadcast" not in plain and "subgroup" not in plain
  assert plain == wgsl(y, adapter=adapter, subgroups=False, quad_weights=False)
  assert wgsl(y, adapter=adapter, subgroups=True, quad_weights=False) == plain


def test_wgsl_with_quads_passes_tint():
  inputs, expr, _ = conv_case(np.random.default_rng(0))
  for k in kg.compile(expr(*[kg.Tensor(x) for x in inputs]), target="wgsl", **QUAD):
    assert "quadBroadcast" in k.source and k.launch.features == ("subgroups",)
    tint_validate("enable subgroups;\n" + k.source, k.launch.entry_point)


def test_ptx_refuses_quad_broadcast():
  """(register tiles, not PTX's default workgroup-memory tiles or tensor cores)"""
  inputs, expr, _ = matmul_case(np.random.default_rng(0))
  y = expr(*[kg.Tensor(x) for x in inputs])
  with pytest.raises(UnsupportedError, match="PTX renders no quad broadcast"):
    kg.compile(y, target="ptx", stage=False, tensor_cores=False, **QUAD)
  assert kg.compile(y, target="ptx", stage=False, tensor_cores=False, **TILE)


@pytest.mark.parametrize("lane,dtype", [(4, dtypes.float32), (-1, dtypes.int32),
                                        (1, dtypes.float16), (2, dtypes.int8)])
def test_verifier_rejects_bad_quad_broadcasts(lane, dtype):
  bad = UOp(Ops.QUAD_BROADCAST, dtype, (UOp.const(dtype, 1),), lane)
  buf = UOp(Ops.PARAM, dtype.ptr(), (), 0)
  with pytest.raises(VerifyError, match="QUAD_BROADCAST"):
    verify(UOp(Ops.SINK, None, (buf.store(UOp.const(dtypes.int32, 0), bad),)))


# ---- WEBGPU: wgpu on lavapipe -------------------------------------------------------------------

@pytest.fixture
def webgpu_quads(monkeypatch):
  try:
    rt = kg.Device["WEBGPU"]
  except kg.DeviceError as error:
    missing_tool("device WEBGPU",
                 f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")
  base = rt.render_options()
  if not base.get("subgroups"):
    missing_tool("subgroups on the WebGPU adapter", "use an adapter with the subgroups feature")
  with default_device(monkeypatch, "WEBGPU"):
    yield rt, base


@pytest.mark.parametrize("forced", [TILE, {}])
@pytest.mark.parametrize("case", list(CASES))
def test_webgpu_matches_numpy(webgpu_quads, monkeypatch, case, forced):
  """The forced 4x4 tiles and the adapter's own choice, quad_weights on."""
  rt, base = webgpu_quads
  options = {**base, "quad_weights": True, **forced}
  monkeypatch.setattr(rt, "render_options", lambda: options)
  inputs, expr, want = CASES[case](np.random.default_rng(3))
  y = expr(*[kg.Tensor(x) for x in inputs])
  if forced:
    assert "quadBroadcast" in wgsl(y, **options)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_webgpu_det_conv_matches_numpy(webgpu_quads):
  """PP-OCRv4 det's 3x3 conv 96 -> 24 at a smaller size, as the adapter's table compiles it."""
  rt, base = webgpu_quads
  rng = np.random.default_rng(4)
  x = rng.standard_normal((1, 96, 20, 20)).astype(np.float32)
  w = (rng.standard_normal((24, 96, 3, 3)) * 0.1).astype(np.float32)
  y = kg.Tensor(x).conv2d(kg.Tensor(w), padding=1)
  source = wgsl(y, **base)
  if base.get("adapter") in ("lavapipe", "swiftshader"):
    assert "quadBroadcast" in source
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  np.testing.assert_allclose(y.numpy(), np.einsum("nchwij,ocij->nohw", windows, w),
                             rtol=1e-4, atol=1e-4)
