"""The prepared GPU check (tests/gpu/run_all.py) works on the CPU path, and device CUDA fails
cleanly where there is no driver."""
from __future__ import annotations

import ctypes.util
import importlib.util
from pathlib import Path

import pytest

from kernelgen.device import Device
from kernelgen.errors import DeviceError


def _load_run_all():
  path = Path(__file__).with_name("run_all.py")
  spec = importlib.util.spec_from_file_location("run_all", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _has_driver() -> bool:
  try:
    ctypes.CDLL("libcuda.so.1")
    return True
  except OSError:
    return ctypes.util.find_library("cuda") is not None


@pytest.mark.tools       # assembles with ptxas
def test_dry_run_renders_and_assembles_programs_and_the_matmul(tmp_path):
  run_all = _load_run_all()
  status = run_all.main(["--dry-run", "--skip", "tests", "--size", "512", "--out", str(tmp_path)])
  summary = (tmp_path / "gpu_results.json").read_text()
  assert status == 0, summary
  assert '"bench"' in summary and '"matmul_f16"' in summary


@pytest.mark.skipif(_has_driver(), reason="a CUDA driver is installed here")
def test_cuda_device_without_a_driver_is_a_typed_error():
  from kernelgen.runtime.cuda import CUDARuntime
  with pytest.raises(DeviceError, match="no CUDA driver found.*PTXSIM"):
    CUDARuntime()
  assert not Device.available("CUDA")


@pytest.mark.skipif(not _has_driver(), reason="needs an NVIDIA driver")
def test_cuda_device_reports_its_arch():
  runtime = Device["CUDA"]
  assert runtime.arch.startswith("sm_") and runtime.render_options() == {"arch": runtime.arch}
