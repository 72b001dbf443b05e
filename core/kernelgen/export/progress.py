"""Progress of a bundle run (`Bundle.run(..., progress=fn)`): kernel i of n, with an estimate.

`fn` gets a dict {"kernel": i (1-based), "kernels": n, "name": the kernel's name, "blocks":
(done, total) within it or None, "elapsed": seconds so far, "estimate": seconds left or None}
before each kernel and, on PTXSIM, as each batch of blocks finishes; returning False stops the
run with StoppedError. The estimate weighs each kernel by its threads times its PTX/WGSL
statements, and scales the time so far by the weight still to run.
"""
from __future__ import annotations

import time

from ..errors import StoppedError


def kernel_cost(kernel) -> int:
  threads = 1
  for d in tuple(kernel.launch.dispatch) + tuple(kernel.launch.workgroup_size):
    threads *= d
  return threads * max(1, kernel.launch.source.count(";"))


class RunProgress:
  """Reports to `callback` while the kernels of one run go."""

  def __init__(self, callback, kernels: list):
    self.callback, self.names = callback, [k.name for k in kernels]
    self.costs = [kernel_cost(k) for k in kernels]
    self.total, self.done, self.current = sum(self.costs), 0, -1
    self.start = time.perf_counter()

  def kernel(self, i: int) -> None:
    """Kernel i (0-based) is about to run."""
    if self.current >= 0:
      self.done += self.costs[self.current]
    self.current = i
    self._report(None, self.done)

  def blocks(self, done: int, total: int, _seconds: float = 0.0):
    """Within the current kernel, `done` of `total` blocks have run."""
    return self._report((done, total), self.done + self.costs[self.current] * done / total)

  def _report(self, blocks, done_cost: float):
    elapsed = time.perf_counter() - self.start
    estimate = elapsed * (self.total - done_cost) / done_cost if done_cost else None
    info = {"kernel": self.current + 1, "kernels": len(self.costs),
            "name": self.names[self.current], "blocks": blocks, "elapsed": elapsed,
            "estimate": estimate}
    if self.callback(info) is False:
      raise StoppedError(f"stopped at kernel {self.current + 1} of {len(self.costs)} "
                         f"({self.names[self.current]}) after {elapsed:.1f} s, as the progress "
                         f"callback asked")
    return True
