"""The CPU adapters' Vulkan ICD files, and binding a bench process to one before wgpu loads.

wgpu picks its Vulkan driver from VK_ICD_FILENAMES / VK_DRIVER_FILES when it is first imported,
so a script that times one adapter natively sets them and starts itself again (`bind`): lavapipe
is Mesa's ICD, SwiftShader Chromium's own (the one its WebGPU falls back to).
"""
from __future__ import annotations

import os
import sys

ICDS = {"swiftshader": "/usr/lib/chromium/vk_swiftshader_icd.json",
        "lavapipe": "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"}


def bind(adapter: str) -> None:
  """Run this process on `adapter`'s ICD: re-executes it once with the variables set (a process
  whose environment already names that ICD returns at once). Call before importing wgpu."""
  icd = ICDS[adapter]
  if os.environ.get("VK_ICD_FILENAMES") != icd:
    os.environ.update(VK_ICD_FILENAMES=icd, VK_DRIVER_FILES=icd)
    os.execv(sys.executable, [sys.executable] + sys.argv)
