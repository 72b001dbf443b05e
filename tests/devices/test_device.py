"""Device names, the default device, and typed errors for unknown or unavailable devices."""
from __future__ import annotations

import pytest

import kernelgen as kg
from kernelgen.device import Device


def test_unknown_device_lists_valid_names():
  with pytest.raises(kg.DeviceError, match="unknown device 'TPU': use one of PYTHON, WEBGPU, "
                                           "CUDA, PTXSIM"):
    Device["TPU"]


def test_names_are_case_insensitive():
  assert Device.canonical("python") == "PYTHON"
  assert Device.canonical("cuda:0") == "CUDA"


def test_environment_overrides_default(monkeypatch):
  monkeypatch.setenv("KERNELGEN_DEVICE", "ptxsim")
  assert Device.DEFAULT == "PTXSIM"
  monkeypatch.setenv("KERNELGEN_DEVICE", "nope")
  with pytest.raises(kg.DeviceError, match="unknown device"):
    Device.DEFAULT


def test_default_can_be_assigned(monkeypatch):
  monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
  previous = Device._default
  try:
    Device.DEFAULT = "python"
    assert Device.DEFAULT == "PYTHON"
  finally:
    Device._default = previous


def test_unavailable_device_says_why(monkeypatch):
  monkeypatch.setitem(kg.device.RUNTIMES, "CUDA", ("runtime.no_such_module", "X"))
  monkeypatch.setattr(Device, "_open", {})
  with pytest.raises(kg.DeviceError, match="device CUDA is not available here .*No module"):
    Device["CUDA"]


def test_registered_runtime_is_used(monkeypatch):
  marker = object()
  monkeypatch.setattr(Device, "_open", {})
  Device.register("webgpu", marker)
  assert Device["WEBGPU"] is marker
