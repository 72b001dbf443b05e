"""Recursive walks without Python recursion: graphs are as deep as programs make them (a
100,000-op chain is a 100,000-deep graph), far past Python's recursion limit.

A walk is written as a generator that *yields* a call instead of making it: `value = yield
child(...)` where child(...) is another such generator; `run(gen)` drives them with a stack of
its own and sends each call's return value back. Order, short-circuits and memos stay exactly as
the recursive form had them:

    def depth(node):
      if not node.src:
        return 1
      deepest = 0
      for s in node.src:
        deepest = max(deepest, (yield depth(s)))
      return 1 + deepest

    run(depth(root))
"""
from __future__ import annotations

from types import GeneratorType


def run(gen):
  """The return value of generator `gen`, running the generators it yields as calls (each one's
  return value sent back into its caller, an exception raised into it), on an explicit stack."""
  stack, value, error = [gen], None, None
  while True:
    try:
      call = stack[-1].send(value) if error is None else stack[-1].throw(error)
    except StopIteration as done:
      stack.pop()
      if not stack:
        return done.value
      value, error = done.value, None
      continue
    except Exception as raised:
      stack.pop()
      if not stack:
        raise
      value, error = None, raised
      continue
    if type(call) is not GeneratorType:
      raise TypeError(f"a trampolined walk yielded {call!r}: it must yield a call's generator")
    stack.append(call)
    value, error = None, None
