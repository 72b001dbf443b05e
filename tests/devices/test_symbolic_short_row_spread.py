"""On lavapipe a symbolic row kernel's short-row variants spread their rows over several
workgroups (issue 34, "no speed lost to generality": lavapipe softmax (64, n) at n = 77).

The static kernel of softmax (64, 77) on lavapipe takes 8 lanes a row: 64 workgroups, which
llvmpipe's compute thread pool splits into one chunk per CPU; the short-row variant that serves
n = 77 (a thread per row, rows.py's 64 rows per workgroup) was one workgroup, always run on one
CPU. With lavapipe's option row_short_groups the variant (and the pinned one at the range's low
end, unless that end is 1) takes at least that many workgroups where the rows allow it, rows.py's
default where there are many rows; SwiftShader (no such option: 8 workgroups ran slower there)
keeps one. At n = 1 the static kernel is elementwise in one workgroup of 64 threads, and the
pinned variant spread over 8 took about 1.45x its GPU time on lavapipe: it keeps one. Values
against numpy at n = 1, 77, each variant's edges and the top, the padding NaN and inf, natively
on both CPU adapters (each in a process bound to its Vulkan driver)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.variants import SHORT_ROW_LOCAL, short_row_local
from kernelgen.render.wgsl.adapters import TABLE
from kernelgen.render.targets import get_target
from kernelgen.uop.program import variant_for
from tools import missing_tool

HI = 4096
GROUPS = TABLE[("lavapipe", "rows")]["row_short_groups"]       # 8
ICDS = {"lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
        "swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json"}
# n = 1 (pinned), 77, the edges of each adapter's variants (lavapipe: the short rows up to 96,
# 8 lanes up to 127, 16 up to 255; SwiftShader: the short rows up to 8) and the top
VALUES = (1, 2, 8, 9, 77, 96, 97, 127, 128, 255, 256, 1000, HI)


def _kernel(rows: int, adapter: str):
  (kernel,) = kg.compile(kg.Tensor.empty(rows, kg.Dim("n", 1, HI), name="x").softmax(-1),
                         "wgsl", adapter=adapter)
  return kernel


@pytest.mark.parametrize("adapter, short, groups", [("lavapipe", 96, GROUPS),
                                                    ("swiftshader", 8, 1)])
def test_short_row_variants_of_few_rows_launch_the_adapters_workgroups(adapter, short, groups):
  kernel = _kernel(64, adapter)
  for v in (2, short):
    variant = variant_for(kernel, {"n": v})
    assert variant is not kernel and variant.launch.uniforms == kernel.launch.uniforms
    assert variant.launch.dispatch == (groups, 1, 1), (v, variant.launch.dispatch)
    assert variant.local_size == (64 // groups, 1, 1)
  if adapter == "lavapipe":            # the static kernel it stands in for: 64 workgroups
    (static,) = kg.compile(kg.Tensor.empty(64, 77, name="x").softmax(-1), "wgsl",
                           adapter=adapter)
    assert static.launch.dispatch == (64, 1, 1)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_the_pinned_variant_at_one_takes_the_static_kernels_workgroups(adapter):
  """n = 1: the static softmax (64, 1) reduces nothing (an elementwise kernel in one workgroup
  of 64 threads); the pinned variant serving it is launched the same way on both adapters."""
  pinned = variant_for(_kernel(64, adapter), {"n": 1})
  (static,) = kg.compile(kg.Tensor.empty(64, 1, name="x").softmax(-1), "wgsl", adapter=adapter)
  assert pinned is not variant_for(_kernel(64, adapter), {"n": 2})
  assert static.launch.dispatch == pinned.launch.dispatch == (1, 1, 1), pinned.launch.dispatch
  assert static.local_size == pinned.local_size == (64, 1, 1)


def test_row_short_groups_is_an_option():
  x = kg.Tensor.empty(64, kg.Dim("n", 1, HI), name="x").softmax(-1)
  (kernel,) = kg.compile(x, "wgsl", adapter="swiftshader", row_short_groups=4)
  assert variant_for(kernel, {"n": 5}).launch.dispatch == (4, 1, 1)
  (kernel,) = kg.compile(x, "wgsl", adapter="lavapipe", row_short_groups=0)
  assert variant_for(kernel, {"n": 77}).launch.dispatch == (1, 1, 1)
  with pytest.raises(kg.UnsupportedError, match="row_short_groups"):
    kg.compile(x, "wgsl", row_short_groups=-1)


def test_many_rows_keep_the_default_rows_per_workgroup():
  kernel = _kernel(4096, "lavapipe")
  variant = variant_for(kernel, {"n": 77})
  assert variant.local_size == (64, 1, 1) and variant.launch.dispatch == (64, 1, 1)


def test_short_row_local():
  target = get_target("wgsl")
  got = {rows: short_row_local(rows, 8, target) for rows in (1, 3, 8, 64, 100, 512, 513, 4096)}
  assert got == {1: 1, 3: 4, 8: 8, 64: SHORT_ROW_LOCAL, 100: 8, 512: 64, 513: 64, 4096: 64}
  assert short_row_local(64, 2, target) == 32 and short_row_local(64, 0, target) == 64


WORKER = """
import json, sys
import numpy as np
import kernelgen as kg
from kernelgen.uop.program import variant_for
kg.Device.DEFAULT = "WEBGPU"
runtime = kg.Device["WEBGPU"]
hi, values = int(sys.argv[1]), [int(v) for v in sys.argv[2].split(",")]
rows = np.random.default_rng(0).standard_normal((64, hi)).astype(np.float32)
rows[3] = -np.inf
rows[5, 0] = np.inf
rows[7, 1] = np.nan
out = {"adapter": runtime.render_options()["adapter"], "values": {}}
n = kg.Dim("n", 1, hi)
for v in values:
  x = rows.copy()
  x[:, v:] = np.where(np.arange(hi - v) % 2, np.nan, np.inf)
  got = kg.Tensor(x)[:, :n.bind(v)].softmax(-1).numpy()
  out["values"][v] = got.tolist()
print(json.dumps(out))
"""


def _softmax_np(x):
  x = x.astype(np.float64)
  with np.errstate(invalid="ignore"):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_softmax_over_symbolic_rows_on_each_cpu_adapter(adapter):
  if not os.path.exists(ICDS[adapter]):
    missing_tool(f"the {adapter} Vulkan driver", f"install it ({ICDS[adapter]})")
  core = str(Path(kg.__file__).resolve().parent.parent)
  env = {**os.environ, "VK_ICD_FILENAMES": ICDS[adapter], "VK_DRIVER_FILES": ICDS[adapter],
         "PYTHONPATH": core}
  proc = subprocess.run([sys.executable, "-c", WORKER, str(HI), ",".join(map(str, VALUES))],
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got["adapter"] == adapter
  rows = np.random.default_rng(0).standard_normal((64, HI)).astype(np.float32)
  rows[3] = -np.inf
  rows[5, 0] = np.inf
  rows[7, 1] = np.nan
  for v in VALUES:
    want = _softmax_np(rows[:, :v]).astype(np.float32)
    np.testing.assert_allclose(np.array(got["values"][str(v)], np.float32), want, rtol=2e-5,
                               atol=2e-6, err_msg=f"{adapter}, n = {v}")
