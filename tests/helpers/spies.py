"""Spies on compiler internals that structural tests count calls of."""
from __future__ import annotations

import kernelgen.lowering.lower as lowering


def exchange_calls(monkeypatch) -> list:
  """The shapes of the members lowering/exchange.py exchanges through workgroup memory, appended
  as kernels are lowered from now on (a joined write reading other threads' elements)."""
  calls, exchange = [], lowering.exchange

  def spy(lw, member, *args):
    calls.append(member.shape)
    return exchange(lw, member, *args)
  monkeypatch.setattr(lowering, "exchange", spy)
  return calls
