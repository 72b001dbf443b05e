"""MatMulNBits with its packed weight held lane-major (quant_nbits.lane_major): where the adapter
asks for it (lane_layout: lavapipe's q4_lanes) and the weight is large (LANE_MAJOR_BYTES), the
words and scales are stored so that the rows a SIMD group of threads reads in one step are one
contiguous run; the matvec reads them through a view with the rows as three axes. Against
onnxruntime on PYTHON, PTXSIM and WEBGPU with the layout forced (small weights, several lane and
row counts), with and without zero points and bias, K short of a whole block, prefill rows; the
weights really stored lane-major; lavapipe's default; other adapters and small weights keep the
plain layout."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.onnx.operators import quant_nbits
from onnx_contrib_util import DEVICES, check
from test_onnx_quant_nbits import nbits_model, q4_matvec_kernel
from tools import ptxas_check, wgsl_validate


@pytest.fixture
def forced_lanes(monkeypatch):
  """Every weight lane-major with the given (lanes, rows), whatever its size and device."""
  def force(lanes: int, rows: int):
    monkeypatch.setattr(quant_nbits, "LANE_MAJOR_BYTES", 0)
    monkeypatch.setattr(quant_nbits, "lane_layout", lambda device: (lanes, rows))
  return force


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,k,bits,zp,bias,lanes,rows", [
  (64, 256, 4, "uint8", True, 8, 8),     # one group of 8 lanes x 8 rows
  (96, 288, 4, "none", False, 4, 4),     # 6 groups, 9 blocks
  (48, 100, 4, "float", True, 4, 2),     # K = 100: 4 blocks, the last one padded
  (32, 64, 8, "uint8", False, 2, 4)])    # 8-bit weights
def test_lane_major_matvec_matches_onnxruntime(forced_lanes, device, n, k, bits, zp, bias,
                                               lanes, rows):
  forced_lanes(lanes, rows)
  model, feeds = nbits_model(1, n, k, bits, 32, zp, bias, seed=n + k)
  check(model, feeds, device, rtol=1e-4, atol=1e-4)


def test_lane_major_prefill_rows_match_onnxruntime(forced_lanes):
  """M = 3 activation rows (a prompt's) and a leading batch axis over lane-major weights."""
  forced_lanes(4, 2)
  model, feeds = nbits_model(3, 64, 128, 4, 32, "uint8", True, seed=7, lead=(2,))
  check(model, feeds, "PYTHON", rtol=1e-4, atol=1e-4)


def _held_words(n: int, k: int) -> kg.Tensor:
  """The words the importer keeps for an (n, k) q4 weight after one run on PYTHON."""
  model, feeds = nbits_model(1, n, k, 4, 32, "uint8", True, seed=1)
  loaded = kg.onnx.load(model.SerializeToString())
  loaded.run(feeds, device="PYTHON")
  held = [t for key, t in loaded.uploads.items() if key[1].endswith(quant_nbits.WORDS)]
  assert len(held) == 1
  return held[0]


def test_weights_are_stored_lane_major(forced_lanes):
  """The held words are lane_major's view: rows as (groups, lanes, rows), row g * 8 + l * 2 + r
  at [g, l, r]; the buffer under the view is ordered (groups, blocks, rows, lanes, words), so the
  4 lanes' words of one block and row lie side by side."""
  forced_lanes(4, 2)
  words = _held_words(16, 64)
  assert tuple(words.shape) == (2, 4, 2, 2, 4)
  assert tuple(words.node.src[0].shape) == (2, 2, 2, 4, 4)     # the realized storage's order
  plain = np.frombuffer(nbits_model(1, 16, 64, 4, 32, "uint8", True, seed=1)[0].graph
                        .initializer[0].raw_data, np.uint32).reshape(16, 2, 4)
  assert np.array_equal(words.numpy(), plain.reshape(2, 4, 2, 2, 4))


def test_small_weights_and_other_devices_stay_plain(monkeypatch):
  """Below LANE_MAJOR_BYTES, and on a device whose adapter has no q4_lanes (PYTHON), the words
  stay (N, words per row)."""
  assert tuple(_held_words(64, 128).shape) == (64, 16)
  monkeypatch.setattr(quant_nbits, "LANE_MAJOR_BYTES", 0)
  assert quant_nbits.lane_layout("PYTHON") is None
  assert tuple(_held_words(64, 128).shape) == (64, 16)


def test_lavapipe_asks_for_eight_lanes_of_its_row_count():
  """lavapipe's adapter table: q4_lanes 8 with its reduce_rows; SwiftShader none."""
  from kernelgen.render.targets import get_target
  wgsl = get_target("wgsl")
  lavapipe = wgsl.adapter_defaults("lavapipe", "rows")
  assert lavapipe["q4_lanes"] == 8 and lavapipe["reduce_rows"] == 8
  assert "q4_lanes" not in wgsl.adapter_defaults("swiftshader", "rows")


def test_lane_major_refuses_rows_that_do_not_divide():
  from kernelgen.errors import ShapeError
  with pytest.raises(ShapeError, match="groups of 4 lanes"):
    quant_nbits.lane_major(kg.Tensor(np.zeros((10, 2), np.float32)), 4, 2)


def test_lane_major_matvec_wgsl_at_lavapipe_defaults(forced_lanes):
  """At lavapipe's defaults the lane-major matvec keeps the stepped layout (lowering/threads.py):
  one loop, reduce_rows outputs per thread, each row's block of words one vec4<u32> load a
  trip, the activation's vec4s loaded once for all rows; naga accepts it."""
  forced_lanes(8, 8)
  n, k = 128, 256
  kern = q4_matvec_kernel(n, k, target="wgsl", adapter="lavapipe")
  src = kern.source
  assert src.count("for (") == 1, src[:3000]
  assert kern.local_size[0] * kern.global_size[0] * 8 == n
  spec = {b.dtype.name + str(b.size): b for b in kern.buffers}
  w, x = spec[f"uint32{n * k // 8}"], spec[f"float32{k}"]
  assert "vec4<u32>" in src
  assert src.count(f"b{w.slot}_{w.name}[") == 8
  assert src.count(f"b{x.slot}_{x.name}[") == 8
  wgsl_validate(src)


def test_lane_major_matvec_ptx_assembles(forced_lanes):
  forced_lanes(4, 2)
  ptxas_check(q4_matvec_kernel(64, 288, target="ptx").source, "sm_80")
