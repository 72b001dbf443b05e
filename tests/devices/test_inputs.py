"""Tensor.empty is an input: an unfilled buffer that compiled kernels bind, by name (issue 17)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor, dtypes
from kernelgen.render.ptx.target import ISA_VERSION
from tools import DEVICES, missing_tool, ptxas_check, wgsl_validate


def names(kernel) -> list[tuple[str, str]]:
  return [(b.name, b.access) for b in kernel.buffers]


def webgpu_or_fail() -> str:
  if not kg.Device.available("WEBGPU"):
    missing_tool("device WEBGPU", "pip install wgpu; apt-get install mesa-vulkan-drivers")
  return "WEBGPU"


# ---- compiled kernels bind it ----

@pytest.mark.parametrize("target", ["python", "wgsl", "ptx"])
def test_empty_operands_are_buffers_of_the_kernel_not_folded_zeros(target):
  y = Tensor.empty(64, 32, name="x") @ Tensor.empty(32, 16, name="w")
  (k,) = kg.compile(y, target=target)
  assert names(k) == [("out", "write"), ("x", "read"), ("w", "read")]
  assert [(b.dtype, b.size) for b in k.buffers] == [(dtypes.float32, 64 * 16),
                                                    (dtypes.float32, 64 * 32),
                                                    (dtypes.float32, 32 * 16)]


def test_unnamed_empty_is_called_by_its_slot():
  (k,) = kg.compile(Tensor.empty(8) + Tensor.empty(8, dtype="int16"), target="wgsl")
  assert names(k) == [("out", "write"), ("in1", "read"), ("in2", "read")]
  assert sorted(b.dtype.name for b in k.buffers[1:]) == ["float32", "int16"]


def test_names_appear_in_wgsl_bindings_and_ptx_parameters():
  y = Tensor.empty(16, 16, name="x") * Tensor.empty(16, 16, name="scale")
  (wgsl,) = kg.compile(y, target="wgsl")
  assert sorted(b.name for b in wgsl.buffers) == ["out", "scale", "x"]
  for b in wgsl.buffers:
    assert f"@binding({b.slot}) var<storage, {'read' if b.slot else 'read_write'}> " \
           f"b{b.slot}_{b.name}: array<f32>;" in wgsl.source
  wgsl_validate(wgsl.source, wgsl.launch.entry_point)
  (ptx,) = kg.compile(y, target="ptx", arch="sm_80")
  params = ",\n".join(f"\t.param .u64 data{b.slot}_{b.name}" for b in ptx.buffers)
  assert f"(\n{params}\n)" in ptx.source
  ptxas_check(ptx.source, "sm_80")


def test_a_repeated_name_gets_a_suffix_within_the_kernel():
  a, b = Tensor.empty(4, name="x"), Tensor.empty(4, name="x")
  (k,) = kg.compile(a + b + Tensor.empty(4, name="out"), target="wgsl")
  assert sorted(names(k)) == [("out", "write"), ("out_2", "read"), ("x", "read"), ("x_2", "read")]
  wgsl_validate(k.source, k.launch.entry_point)


def test_one_buffer_read_twice_is_bound_once():
  x = Tensor.empty(4, 4, name="x")
  (k,) = kg.compile(x + x.T, target="wgsl")
  assert names(k) == [("out", "write"), ("x", "read")]


@pytest.mark.parametrize("bad", ["", "1x", "x-y", "_x", "x y", "é", "a" * 65])
def test_a_name_that_is_not_an_identifier_is_a_typed_error(bad):
  with pytest.raises(kg.BufferNameError, match="not an identifier kernels can use"):
    Tensor.empty(4, name=bad)


def test_a_name_that_is_not_a_str_is_a_typed_error():
  with pytest.raises(kg.BufferNameError, match="must be a str, not int"):
    Tensor.empty(4, name=3)


def test_reserved_words_are_fine_as_names_because_renderers_prefix_them():
  y = Tensor.empty(8, name="var") + Tensor.empty(8, name="ld")
  (wgsl,) = kg.compile(y, target="wgsl")
  assert sorted(names(wgsl)[1:]) == [("ld", "read"), ("var", "read")]
  wgsl_validate(wgsl.source, wgsl.launch.entry_point)
  (ptx,) = kg.compile(y, target="ptx")
  ptxas_check(ptx.source, "sm_80")


def test_empty_has_the_shape_dtype_and_device_asked_for():
  t = Tensor.empty(2, 3, dtype="float16", device="PYTHON", name="h")
  assert (t.shape, t.dtype, t.device) == ((2, 3), dtypes.float16, "PYTHON")
  assert Tensor.empty((4, 5)).shape == (4, 5) and Tensor.empty(0).shape == (0,)
  with pytest.raises(kg.ShapeError, match="negative dimension"):
    Tensor.empty(2, -1)


def test_compiling_an_empty_alone_gives_no_kernels():
  assert kg.compile(Tensor.empty(4, name="x"), target="wgsl") == []


# ---- reading it before anything wrote it: unspecified values, never a crash ----

@pytest.mark.parametrize("device", DEVICES)
def test_reading_an_unwritten_empty_runs_on_every_device(device):
  device = webgpu_or_fail() if device == "WEBGPU" else device
  x = Tensor.empty(5, 7, device=device, name="x")
  assert x.numpy().shape == (5, 7) and x.numpy().dtype == np.float32
  y = (x @ Tensor.empty(7, 3, device=device)).relu().sum(axis=0)
  assert y.numpy().shape == (3,) and y.dtype == dtypes.float32
  q = Tensor.empty(6, dtype="int32", device=device) // Tensor.empty(6, dtype="int32",
                                                                     device=device)
  assert len(q.tolist()) == 6
  b = Tensor.empty(3, dtype="bool", device=device)
  assert b.where(1.0, 2.0).numpy().shape == (3,)


def test_empty_then_combined_with_written_data_keeps_the_written_part():
  # where() selects only written values: the unspecified ones are never read into the result
  x = Tensor.empty(4, device="PTXSIM")
  y = kg.where(Tensor([True, True, True, True], device="PTXSIM"),
               Tensor([1.0, 2.0, 3.0, 4.0], device="PTXSIM"), x)
  assert y.tolist() == [1.0, 2.0, 3.0, 4.0]


# ---- the page names buffers too ----

def test_page_compile_names_inputs_after_the_programs_variables():
  from kernelgen import web_api
  code = "x = Tensor.empty(8, 4)\nw = Tensor.empty(4, 2, name='weights')\nout = x @ w\n"
  result = web_api.compile_program(code, "sm_80", "wgsl,ptx")
  assert result["ok"], result
  for target in ("wgsl", "ptx"):
    (k,) = result[target]["kernels"]
    assert [b["name"] for b in k["buffers"]] == ["out", "x", "weights"]
    assert [b["name"] for b in k["launch"]["bindings"]] == ["out", "x", "weights"]


def test_every_ptx_arch_assembles_named_parameters():
  y = Tensor.empty(32, 32, name="x") @ Tensor.empty(32, 32, name="w")
  for sm in ISA_VERSION:
    (k,) = kg.compile(y, target="ptx", arch=f"sm_{sm}")
    assert "data1_x" in k.source and "data2_w" in k.source
  (k,) = kg.compile(y, target="ptx", arch="sm_120")
  ptxas_check(k.source, "sm_120")
