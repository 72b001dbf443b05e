"""Kept templates of rendered kernels: a renderer writes a kernel's source with the names that
differ between kernels of one structure (its entry point's, its buffers', the kernel's own) left
as marks, keeps that template, and fills in each kernel's names. A kernel of the same structure
under other names (compiler.renamed: the same linearized uops, other kernel and buffer names) is
filled in from the kept template, not written again (ResNet-50's 58 WGSL kernels are 29
structures). The marks hold a NUL, which no WGSL or PTX text has.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

ENTRY_MARK = "\0entry\0"    # the entry point's name
NAME_MARK = "\0name\0"      # the kernel's name as a comment quotes it (PTX)


def buffer_mark(slot: int) -> str:
  """The mark standing for buffer `slot`'s name in a template."""
  return f"\0{slot}\0"


def fill(template: str, marks: dict) -> str:
  """`template` with each mark (a key of `marks`) replaced by its text."""
  for mark, text in marks.items():
    template = template.replace(mark, text)
  return template


class Templates:
  """The templates (and what else the renderer made with them) of the kernels rendered last, at
  most `chars` characters of templates, each keyed by the kernel's uops (the tuple itself, kept
  with it), sizes, buffers but their names, and the renderer's `options` (hashable)."""

  def __init__(self, chars: int = 4_000_000):
    self.chars, self.kept, self.entries = chars, 0, OrderedDict()
    self.lock = threading.Lock()

  def get(self, kernel, options, make):
    """make(kernel): (template, ...), or what it gave for a kernel of the same key before."""
    key = (id(kernel.uops), kernel.global_size, kernel.local_size, kernel.vars, options,
           tuple((b.slot, b.dtype, b.size, b.access) for b in kernel.buffers))
    with self.lock:
      kept = self.entries.get(key)
      if kept is not None and kept[0] is kernel.uops:
        self.entries.move_to_end(key)
        return kept[1]
    made = make(kernel)
    with self.lock:
      old = self.entries.pop(key, None)
      self.kept += len(made[0]) - (len(old[1][0]) if old is not None else 0)
      self.entries[key] = (kernel.uops, made)
      while self.kept > self.chars and len(self.entries) > 1:
        self.kept -= len(self.entries.popitem(last=False)[1][1][0])
    return made


__all__ = ["ENTRY_MARK", "NAME_MARK", "buffer_mark", "fill", "Templates"]
