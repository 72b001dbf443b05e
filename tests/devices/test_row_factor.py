"""An RMS norm read by the gated pair of projections after it, silu(n @ Wg.T) * (n @ Wu.T) with
n = x * rsqrt(mean(x^2) + eps) * g, over a symbolic row count in an exported bundle (a q4 LM's
MLP: export/onnx_lm.py). A run of two rows or more launches the norm's sum of squares, gate and
up*silu(gate) (prefill, unchanged); a run of one row launches one kernel: the pair joined
(graph/one_row.py) with the norm's sum taken beside the products, one loop for all three
(one_row.norm_joins, lowering/row_factor.py factored: r * sum_k x g W for sum_k x r g W). Main
before: the one-row run launched the norm's sum kernel too (2 kernels).
Values against numpy at sizes that divide no tile or q4 block (K 45 and 72, N 37), eps 1e-6
and 1e-2, fp32 and MatMulNBits (4-bit blocks of 32), at one row and at several: natively on
WEBGPU and on PTXSIM (the bundle), and the one-row kernel on PYTHON (the interpreter)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kernelgen as kg
from tools import device_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lm_models  # noqa: E402

N, HI = 128, 64
RNG = np.random.default_rng(11)


def _weights(k: int) -> dict:
  rng = np.random.default_rng(k)
  return {"g": (1.0 + 0.1 * rng.standard_normal(k)).astype(np.float32),
          "wg": (rng.standard_normal((N, k)) * 0.3).astype(np.float32),
          "wu": (rng.standard_normal((N, k)) * 0.3).astype(np.float32),
          "wo": (rng.standard_normal((k, k)) * 0.3).astype(np.float32)}


def _fp32_program(k: int, eps: float) -> dict:
  w = _weights(k)
  seq = kg.Dim("seq", 1, HI).bind(1)
  x, skip = (kg.Tensor.empty(seq, k, name=name) for name in ("x", "skip"))
  n = (x + skip).rms_norm(k, kg.Tensor(w["g"]), eps)
  y = (n @ kg.Tensor(w["wg"]).permute(1, 0)).silu() * (n @ kg.Tensor(w["wu"]).permute(1, 0))
  return {"y": y}


def _dequantized(packed: np.ndarray, scales: np.ndarray, zps: np.ndarray, k: int) -> np.ndarray:
  """The (N, k) weight MatMulNBits computes with from quantize_q4's arrays."""
  n, blocks, _ = packed.shape
  codes = np.stack([packed & 15, packed >> 4], -1).reshape(n, blocks, lm_models.BLOCK)
  zp = np.stack([zps & 15, zps >> 4], -1).reshape(n, -1)[:, :blocks]
  w = (codes.astype(np.float32) - zp[..., None]) * scales.reshape(n, blocks)[..., None]
  return w.reshape(n, -1)[:, :k]


def _q4_model(k: int, eps: float):
  """(ONNX model: as a q4 LM's layer, an output projection, SkipSimplifiedLayerNormalization of
  it and a residual, two MatMulNBits, silu * up; its weights as numpy computes with them)."""
  from onnx import TensorProto, helper, numpy_helper
  w = _weights(k)
  inits, nodes, want = [numpy_helper.from_array(w["g"], "g")], [], {"g": w["g"]}
  for name, a, n in (("wo", "x", k), ("wg", "n", N), ("wu", "n", N)):
    packed, scales, zps = lm_models.quantize_q4(w[name])
    want[name] = _dequantized(packed, scales, zps, k)
    inits += [numpy_helper.from_array(a, f"{name}.{part}")
              for a, part in ((packed, "q"), (scales, "s"), (zps, "z"))]
    nodes.append(helper.make_node("MatMulNBits", [a, f"{name}.q", f"{name}.s", f"{name}.z"],
                                  [name], domain="com.microsoft", K=k, N=n, bits=4,
                                  block_size=lm_models.BLOCK))
    if name == "wo":        # the residual stream x + x @ Wo.T, normed
      nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", ["wo", "x", "g"],
                                    ["n", "", "", ""], domain="com.microsoft", epsilon=eps))
  nodes += [helper.make_node("Sigmoid", ["wg"], ["sig"]),
            helper.make_node("Mul", ["wg", "sig"], ["silu"]),
            helper.make_node("Mul", ["silu", "wu"], ["y"])]
  graph = helper.make_graph(
    nodes, "norm_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", k])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", N])], inits)
  model = helper.make_model(graph, ir_version=10, opset_imports=[
    helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
  return model, want


def _q4_program(k: int, eps: float) -> tuple:
  model, want = _q4_model(k, eps)
  seq = kg.Dim("seq", 1, HI).bind(1)
  feeds = {"x": kg.Tensor.empty(1, seq, k, name="x", device="PYTHON")}
  loaded = kg.onnx.load(model.SerializeToString())
  loaded.row_adapter = "lavapipe"     # traced for a CPU adapter, as export/onnx_lm.py does
  return {"y": loaded.run(feeds, device="PYTHON", replay=False)["y"]}, want


def _feeds(shape: tuple) -> dict:
  """The inputs of a case of `shape` (the q4 model's: x; the fp32 program's: x and skip)."""
  names = ("x",) if len(shape) == 3 else ("x", "skip")
  return {name: (RNG.standard_normal(shape) * 2).astype(np.float32) for name in names}


def _residual(x: np.ndarray, w: dict) -> np.ndarray:
  """The q4 model's residual stream x + x @ Wo.T (float64)."""
  x64 = x.astype(np.float64)
  return x64 + x64 @ w["wo"].T.astype(np.float64)


def _want(feeds: dict, w: dict, eps: float) -> np.ndarray:
  x64 = _residual(feeds["x"], w) if "wo" in w else feeds["x"].astype(np.float64)
  x64 = x64 + feeds.get("skip", 0.0)
  n = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w["g"]
  g = n @ w["wg"].T.astype(np.float64)
  return (g / (1.0 + np.exp(-g)) * (n @ w["wu"].T.astype(np.float64))).astype(np.float32)


def _case(dtype: str, k: int, eps: float) -> tuple:
  """(program, weights as numpy computes with them, the input's shape but its row count)."""
  if dtype == "q4":
    program, want = _q4_program(k, eps)
    return program, want, (1,)
  fp32 = {name: a for name, a in _weights(k).items() if name != "wo"}
  return _fp32_program(k, eps), fp32, ()


def _launched(kernels: list, seq: int) -> list:
  return [k["name"] for k in kernels
          if "runs" not in k or k["runs"]["lo"] <= seq <= k["runs"]["hi"]]


CASES = [("fp32", 45, 1e-6), ("fp32", 45, 1e-2), ("q4", 96, 1e-6), ("q4", 160, 1e-2)]


@pytest.mark.parametrize("dtype,k,eps", CASES[::2])
def test_a_one_row_run_launches_one_kernel_for_the_norm_and_the_pair(tmp_path, dtype, k, eps):
  program, _, _ = _case(dtype, k, eps)
  kernels = kg.export(program, str(tmp_path), format="webgpu").manifest["kernels"]
  one, three = _launched(kernels, 1), _launched(kernels, 3)
  # (the q4 model's output projection before, at every row count)
  assert len(one) == 1 + (dtype == "q4") and len(three) == len(one) + 2, (one, three)
  above = [k["name"] for k in kernels if k.get("runs", {}).get("lo") == 2]
  assert len(above) == 3 and above == three[-3:] and one[-1].endswith("_seq1"), (above, one)


@pytest.mark.parametrize("dtype,k,eps", CASES)
def test_the_bundle_matches_numpy_at_any_row_count_on_webgpu(tmp_path, dtype, k, eps):
  device_runtime("WEBGPU")
  program, w, lead = _case(dtype, k, eps)
  bundle = kg.export(program, str(tmp_path), format="webgpu")
  assert len(_launched(bundle.manifest["kernels"], 1)) == 1 + (dtype == "q4")
  for rows in (1, 2, 5, 1, HI):
    feeds = _feeds(lead + (rows, k))
    got = bundle.run(feeds, device="WEBGPU")["y"].numpy()
    np.testing.assert_allclose(got, _want(feeds, w, eps), rtol=2e-4, atol=2e-4,
                               err_msg=f"rows {rows}")


@pytest.mark.parametrize("dtype,k,eps", CASES[1:3])
def test_the_bundle_matches_numpy_on_ptxsim(tmp_path, dtype, k, eps):
  program, w, lead = _case(dtype, k, eps)
  bundle = kg.export(program, str(tmp_path), format="ptx")
  assert len(_launched(bundle.manifest["kernels"], 1)) == 1 + (dtype == "q4")
  for rows in (1, 3):
    feeds = _feeds(lead + (rows, k))
    got = bundle.run(feeds, device="PTXSIM")["y"].numpy()
    np.testing.assert_allclose(got, _want(feeds, w, eps), rtol=2e-4, atol=2e-4,
                               err_msg=f"rows {rows}")


@pytest.mark.parametrize("dtype,k,eps", CASES)
def test_the_one_row_kernel_matches_numpy_on_python(dtype, k, eps):
  """The joined kernel itself (one_row_joins, as an export makes it) run by the interpreter."""
  from kernelgen.compiler import _schedule, compile_item
  from kernelgen.graph.one_row import one_row_joins
  from kernelgen.lowering.row_factor import factored
  from kernelgen.render.targets import get_target
  program, w, lead = _case(dtype, k, eps)
  roots = [t.node for t in program.values()]
  target = get_target("wgsl")
  items = _schedule(roots, target, {}, ())
  joins = one_row_joins(items, roots, target.buffer_limit({}), factored)
  (joined,) = [j[2] for j in joins if j[2] is not None]
  runtime = kg.Device["PYTHON"]
  compiled = compile_item(joined, "python")
  feeds = _feeds(lead + (HI, k))
  handles = [runtime.alloc(joined.out.size * 4)]
  for node in joined.inputs:
    if not node.realized:       # the q4 model's output projection's output: its values
      data = _residual(feeds["x"], w).astype(np.float32).tobytes()
    else:
      name = node.buffer.name
      data = feeds[name].tobytes() if name in feeds else node.buffer.copyout()
    handles.append(runtime.alloc(max(len(data), 1)))
    runtime.copyin(handles[-1], data)
  runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], {})
  got = np.frombuffer(bytes(runtime.copyout(handles[0])), np.float32)[:N]
  want = _want({name: a.reshape(HI, k)[:1] for name, a in feeds.items()}, w, eps).reshape(-1)
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("rows,eps", [(1, 1e-6), (3, 1e-2)])
def test_a_factored_static_kernel_matches_numpy(device, rows, eps):
  """rms_norm(x) @ W of static rows, the norm's sum computed in the matmul's kernel, factored
  (lowering/row_factor.py) and run as it is, K 45."""
  from kernelgen.compiler import compile_item
  from kernelgen.graph.one_row import inlined
  from kernelgen.graph.schedule import schedule
  from kernelgen.lowering.row_factor import factored
  runtime = device_runtime(device)
  w = _weights(45)
  x = (RNG.standard_normal((rows, 45)) * 2).astype(np.float32)
  y = kg.Tensor(x).rms_norm(45, kg.Tensor(w["g"]), eps) @ kg.Tensor(w["wg"].T.copy())
  *norms, item = schedule([y.node])     # (3 rows: the norm's sum a kernel, computed in it)
  for norm in norms:
    item = inlined(item, norm)
  item = factored(item)
  assert item is not None
  compiled = compile_item(item, runtime.target or "python")
  handles = [runtime.alloc(item.out.size * 4)]
  for node in item.inputs:
    handles.append(runtime.alloc(node.buffer.nbytes))
    runtime.copyin(handles[-1], node.buffer.copyout())
  runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], {})
  got = np.frombuffer(bytes(runtime.copyout(handles[0]))[:item.out.size * 4], np.float32)
  x64 = x.astype(np.float64)
  n = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w["g"]
  np.testing.assert_allclose(got.reshape(rows, N), n @ w["wg"].T, rtol=2e-4, atol=2e-4)
