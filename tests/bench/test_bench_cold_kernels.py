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


def test_against_a_checkout_compiles_with_that_checkouts_kernelgen(tmp_path):
  # --against NAME=DIR: DIR's core/ compiles the row in a subprocess; this checkout as DIR gives
  # the kernels compiled here, a folder without a kernelgen gives an error text, not kernels
  import numpy as np
  row = cold_kernels.peers.rows(np, True)["sum 1000"]
  here = cold_kernels.kernelgen_kernels(row, "lavapipe")
  assert cold_kernels.checkout_kernels(str(ROOT), "sum 1000", "lavapipe", True) == here
  got = cold_kernels.checkout_kernels(str(tmp_path), "sum 1000", "lavapipe", True)
  assert isinstance(got, str) and got


def test_variant_arguments_and_the_summary():
  assert cold_kernels.named(["noslide={\"slide\": false}"], "--variant") == \
    {"noslide": "{\"slide\": false}"}
  with pytest.raises(SystemExit, match="NAME=VALUE"):
    cold_kernels.named(["main"], "--against")
  got = {"pipelines": 10.0, "first": 20.0, "map": 1.0}
  lines = cold_kernels.medians([("lavapipe", "sum 16M", "kernelgen", got),
                                ("lavapipe", "sum 16M", "kernelgen", {**got, "first": 40.0}),
                                ("lavapipe", "sum 16M", "kernelgen", {**got, "first": 90.0}),
                                ("lavapipe", "sum 16M", "main", got)])
  assert len(lines) == 2
  assert "median    51.0  best    31.0 ms of 3" in lines[0] and lines[1].split()[3] == "main"
