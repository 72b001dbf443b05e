"""The page's WEBGPU runtime (runtime/webgpu_browser.py) reads several buffers back through one
map, as the native runtime and model.js do: copyout_many asks gpu.js's readMany for them all at
once (one staging buffer, one mapAsync), and copyout is a read of one. A stand-in for gpu.js
counts the maps; a stand-in for Pyodide's ffi passes values through."""
from __future__ import annotations

from types import SimpleNamespace

from kernelgen.runtime.webgpu_browser import BrowserWebGPU


class JsBytes:
  """A Uint8Array as Pyodide hands it over: bytes through to_bytes()."""

  def __init__(self, data: bytes):
    self.data = data

  def to_bytes(self) -> bytes:
    return self.data


class FakeGpu:
  """gpu.js's buffers and reads: `read` maps once per buffer, `readMany` once for them all."""

  def __init__(self):
    self.buffers: dict = {}
    self.maps = 0

  def alloc(self, nbytes):
    self.buffers[len(self.buffers) + 1] = bytes(nbytes)
    return len(self.buffers)

  def write(self, handle, data):
    self.buffers[handle] = bytes(data)

  def read(self, handle):
    self.maps += 1
    return JsBytes(self.buffers[handle])

  def readMany(self, handles):  # noqa: N802 (gpu.js's name)
    self.maps += 1
    return [JsBytes(self.buffers[h]) for h in handles]


def _runtime() -> BrowserWebGPU:
  runtime = object.__new__(BrowserWebGPU)    # no Pyodide here: what the reads use
  runtime.gpu, runtime.handles = FakeGpu(), set()
  runtime.ffi = SimpleNamespace(to_js=lambda value: value, run_sync=lambda promise: promise,
                                can_run_sync=lambda: True, JsException=RuntimeError)
  runtime.build_next = lambda: None          # (no variant waits to be built)
  return runtime


def test_copyout_many_reads_every_buffer_through_one_map():
  runtime = _runtime()
  first, second, third = (runtime.alloc(n) for n in (4, 3, 8))
  runtime.copyin(first, b"\x01\x02\x03\x04")
  runtime.copyin(second, b"abc")
  runtime.copyin(third, bytes(range(8)))
  got = runtime.copyout_many([first, second, third])
  assert got == [b"\x01\x02\x03\x04", b"abc", bytes(range(8))]
  assert runtime.gpu.maps == 1
  assert runtime.copyout(second) == b"abc" and runtime.gpu.maps == 2
