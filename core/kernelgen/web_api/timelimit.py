"""The web page's own time limit (limits.page_seconds, besides Stop): every command the worker
runs is timed (program.guarded), and long work checks the clock where it goes round
(limits.tick: each kernel compiled and run, each interpreter workgroup, each PTXSIM block).
A program typed into the page is compiled with a tick at the start of each loop trip and each
function call, so `while True: pass` ends with a LimitError too; the ticks carry the line of the
statement they stand before, so errors and tracebacks name the program's own lines."""
from __future__ import annotations

import ast

TICK = "__kg_tick__"   # the name the ticks call (bound to limits.tick in the program's globals)


class _Ticks(ast.NodeTransformer):
  """Puts `__kg_tick__()` first in every loop body and function body (after a docstring)."""

  def _ticked(self, node):
    self.generic_visit(node)
    body = node.body
    first = 1 if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body and
                  isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and
                  isinstance(body[0].value.value, str)) else 0
    where = body[min(first, len(body) - 1)]
    call = ast.Expr(ast.Call(ast.Name(TICK, ast.Load()), [], []))
    body.insert(first, ast.copy_location(call, where))
    ast.fix_missing_locations(call)
    return node

  visit_For = visit_AsyncFor = visit_While = _ticked
  visit_FunctionDef = visit_AsyncFunctionDef = _ticked


def compile_ticked(code: str, filename: str):
  """`code` compiled for exec with the ticks in (SyntaxError as compile() raises it)."""
  tree = ast.parse(code, filename, "exec")
  return compile(_Ticks().visit(tree), filename, "exec")
