"""bench/cold_kernels.py reads each kernel's bindings from its WGSL (both systems' styles), as the
page's explicit layouts need them: a wrong kind would be rejected by the page's error scope, and
a binding the script left out would time a kernel that never ran. Pure Python, no browser."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import cold_kernels  # noqa: E402

TINYGRAD = """fn nan() -> f32 { let bits = 0xffffffffu; return bitcast<f32>(bits); }
@group(0) @binding(0)
var<uniform> INFINITY : f32;
@group(0) @binding(1)var<storage,read_write>data0:array<f32>;
@group(0) @binding(2)var<storage,read_write>data1:array<f32>;
@compute @workgroup_size(8,16) fn r_3_60(@builtin(workgroup_id) gindex: vec3<u32>) {
  data0[0] = data1[0];
}"""


def test_kernel_spec_reads_both_systems_bindings():
  import kernelgen as kg
  x = kg.Tensor([[1.0, 2.0], [3.0, 4.0]], device="PYTHON")
  (ours,) = kg.compile((x + 1).sum(axis=1), target="wgsl")
  got = cold_kernels.kernel_spec(ours.name, ours.source, ours.launch.dispatch)
  assert got["entry"] in ours.source and got["kinds"] == ["storage", "read"]
  assert got["dispatch"] == list(ours.launch.dispatch)
  theirs = cold_kernels.kernel_spec("tg", TINYGRAD, (10, 60, 3))
  assert (theirs["entry"], theirs["kinds"]) == ("r_3_60", ["uniform", "storage", "storage"])
  with pytest.raises(ValueError, match="numbered"):
    cold_kernels.kernel_spec("gap", TINYGRAD.replace("@binding(2)", "@binding(3)"), (1, 1, 1))
