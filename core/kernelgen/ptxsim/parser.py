"""PTX text -> Module: entries with parameters, register and shared declarations, instructions.

The parser knows PTX's statement syntax, not instruction semantics: every instruction becomes an
`Instr` (opcode, modifiers, operands, guard) that `isa.py` later turns into an executable step.
Anything it cannot read is a `PTXSyntaxError` naming the line.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from ..errors import CompileError


class PTXSyntaxError(CompileError):
  """PTX text the simulator cannot read or does not support; `.line` is its 1-based line."""


@dataclass(frozen=True)
class Instr:
  line: int                     # 1-based source line of the statement
  text: str                     # the statement as written, for error messages
  opcode: str                   # "add", "ld", "mma", ...
  mods: tuple[str, ...]         # the dotted modifiers in order: ("rn", "f32")
  operands: tuple               # parsed operands (see `parse_operand`)
  guard: tuple | None = None    # (predicate register, negated) for `@%p` / `@!%p`


@dataclass
class Entry:
  name: str
  params: list[tuple[str, str]] = field(default_factory=list)   # (name, type) in order
  regs: dict[str, str] = field(default_factory=dict)            # register -> declared type
  shared: list[tuple[str, int, str, int]] = field(default_factory=list)  # name, align, type, n
  instrs: list[Instr] = field(default_factory=list)
  labels: dict[str, int] = field(default_factory=dict)          # label -> instruction index
  line: int = 0


@dataclass
class Module:
  version: str = ""
  target: str = ""
  address_size: int = 64
  entries: dict[str, Entry] = field(default_factory=dict)
  shared: list[tuple[str, int, str, int]] = field(default_factory=list)  # module-scope .shared


SPECIAL_REGS = {f"%{n}.{d}" for n in ("tid", "ntid", "ctaid", "nctaid") for d in "xyz"} | {
  "%laneid", "%warpid", "%nwarpid", "%warpsize"}
_HEADER_DIRECTIVES = (".version", ".target", ".address_size")
_IGNORED_DIRECTIVES = (".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".pragma", ".file",
                       ".loc", ".section", ".extern")
_IDENT = r"[A-Za-z_$%][\w$]*"
_LABEL_RE = re.compile(r"^([A-Za-z_$][\w$]*)\s*:$")
_REGDECL_RE = re.compile(r"^(%?[A-Za-z_$][\w$]*)<(\d+)>$")
_SHARED_RE = re.compile(r"^\.shared\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([A-Za-z_$][\w$]*)"
                        r"\s*\[\s*(\d*)\s*\]$")
_ENTRY_RE = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\((.*)\)"
                       r"(.*)$", re.S)
_PARAM_RE = re.compile(r"^\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+([A-Za-z_$][\w$]*)$")


# ---- statements ---------------------------------------------------------------------------

def _strip_comments(text: str) -> str:
  """Comments replaced by spaces, newlines kept (so line numbers stay right)."""
  def blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))
  return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def statements(text: str):
  """(line, statement) pairs: instructions/directives without `;`, labels with `:`, braces."""
  buf, start, line = [], 0, 1
  for ch in _strip_comments(text):
    if ch == "\n":
      line += 1
      if "".join(buf).strip().startswith(_HEADER_DIRECTIVES):
        yield start, "".join(buf).strip()
        buf = []
      elif buf and not "".join(buf).strip():
        buf = []
      if buf:
        buf.append(" ")
      continue
    if not buf and ch.isspace():
      continue
    if not buf:
      start = line
    if ch == ";":
      yield start, "".join(buf).strip()
      buf = []
    elif ch in "{}" and not _open_bracket(buf):
      if "".join(buf).strip():
        yield start, "".join(buf).strip()
      yield line, ch
      buf = []
    elif ch == ":" and _LABEL_RE.match("".join(buf).strip() + ":"):
      yield start, "".join(buf).strip() + ":"
      buf = []
    else:
      buf.append(ch)
  if "".join(buf).strip():
    yield start, "".join(buf).strip()


def _open_bracket(buf: list[str]) -> bool:
  """Whether a brace now belongs to an instruction's vector operand (not a scope brace)."""
  text = "".join(buf).strip()
  return bool(text) and not text.startswith(".")


# ---- operands -----------------------------------------------------------------------------
# ("reg", name) | ("imm", int) | ("fimm", float, bits-or-None, width) | ("vec", (ops...))
# ("addr", base operand or None, offset) | ("sym", name)

def _split_commas(text: str) -> list[str]:
  parts, depth, cur = [], 0, []
  for ch in text:
    depth += ch in "[{("
    depth -= ch in "]})"
    if ch == "," and depth == 0:
      parts.append("".join(cur).strip())
      cur = []
    else:
      cur.append(ch)
  if "".join(cur).strip():
    parts.append("".join(cur).strip())
  return parts


def _number(tok: str):
  """An immediate operand from a PTX literal, or None if `tok` is not a number."""
  t = tok.strip()
  neg = t.startswith("-")
  body = t[1:] if neg else t
  low = body.lower()
  if re.fullmatch(r"0f[0-9a-f]{8}", low):
    value = struct.unpack("<f", int(low[2:], 16).to_bytes(4, "little"))[0]
    return ("fimm", -value if neg else value, int(low[2:], 16) ^ (neg << 31), 32)
  if re.fullmatch(r"0d[0-9a-f]{16}", low):
    value = struct.unpack("<d", int(low[2:], 16).to_bytes(8, "little"))[0]
    return ("fimm", -value if neg else value, int(low[2:], 16) ^ (neg << 63), 64)
  m = re.fullmatch(r"(0x[0-9a-f]+|0b[01]+|0[0-7]*|[1-9]\d*)u?", low)
  if m:
    v = int(m.group(1), 0) if not re.fullmatch(r"0[0-7]+", m.group(1)) else int(m.group(1), 8)
    return ("imm", -v if neg else v)
  if re.fullmatch(r"(\d+\.\d*|\.\d+|\d+)(e[+-]?\d+)?", low):
    return ("fimm", -float(low) if neg else float(low), None, 64)
  return None


def parse_operand(tok: str):
  tok = tok.strip()
  if tok.startswith("{") and tok.endswith("}"):
    return ("vec", tuple(parse_operand(p) for p in _split_commas(tok[1:-1])))
  if tok.startswith("[") and tok.endswith("]"):
    return _parse_address(tok[1:-1].replace(" ", ""))
  num = _number(tok)
  if num is not None:
    return num
  if tok.startswith("!%"):
    return ("not", tok[1:])
  if tok in SPECIAL_REGS or re.fullmatch(_IDENT, tok) and tok.startswith("%"):
    return ("reg", tok)
  if re.fullmatch(_IDENT, tok):
    return ("sym", tok)
  return None


def _parse_address(inner: str):
  if re.fullmatch(r"-?(?:0x[0-9a-fA-F]+|\d+)", inner):
    return ("addr", None, int(inner, 0))
  m = re.fullmatch(r"([%\w$]+)(?:([+-])(-?(?:0x[0-9a-fA-F]+|\d+)))?", inner)
  if not m:
    return None
  base = parse_operand(m.group(1))
  if base is None or base[0] not in ("reg", "sym"):
    return None
  off = int(m.group(3), 0) if m.group(3) else 0
  return ("addr", base, -off if m.group(2) == "-" else off)


# ---- instructions and declarations ---------------------------------------------------------

def parse_instruction(line: int, stmt: str) -> Instr:
  guard = None
  text = stmt
  if stmt.startswith("@"):
    m = re.match(r"@(!?)(%[\w$]+)\s+(.*)$", stmt, re.S)
    if not m:
      raise PTXSyntaxError(f"bad guard in `{stmt}` at line {line}: write `@%p` or `@!%p`",
                           line=line)
    guard, stmt = (m.group(2), bool(m.group(1))), m.group(3)
  head, _, rest = stmt.partition(" ")
  parts = head.split(".")
  if not re.fullmatch(r"[a-z][a-z0-9_]*", parts[0]):
    raise PTXSyntaxError(f"unsupported instruction `{head}` at line {line}: `{text}`", line=line)
  operands = []
  for tok in _split_commas(rest):
    op = parse_operand(tok)
    if op is None:
      raise PTXSyntaxError(f"cannot read operand `{tok}` at line {line}: `{text}`", line=line)
    operands.append(op)
  return Instr(line, " ".join(text.split()), parts[0], tuple(parts[1:]), tuple(operands), guard)


def _declare_regs(entry: Entry, line: int, stmt: str) -> None:
  m = re.match(r"^\.reg\s+(?:\.v\d\s+)?\.(\w+)\s+(.*)$", stmt, re.S)
  if not m:
    raise PTXSyntaxError(f"bad register declaration at line {line}: `{stmt}`", line=line)
  rtype = m.group(1)
  for name in _split_commas(m.group(2)):
    rng = _REGDECL_RE.match(name)
    if rng:
      for i in range(int(rng.group(2))):
        entry.regs[f"{rng.group(1)}{i}"] = rtype
    elif re.fullmatch(_IDENT, name):
      entry.regs[name] = rtype
    else:
      raise PTXSyntaxError(f"bad register name `{name}` at line {line}", line=line)


def _shared_decl(line: int, stmt: str) -> tuple[str, int, str, int]:
  m = _SHARED_RE.match(" ".join(stmt.split()))
  if not m or not m.group(4):
    raise PTXSyntaxError(f"unsupported shared declaration at line {line}: `{stmt}` (write "
                         "`.shared .align A .b8 name[N]`)", line=line)
  align = int(m.group(1) or 1)
  return (m.group(3), align, m.group(2), int(m.group(4)))


def _parse_entry_header(line: int, stmt: str) -> Entry:
  m = _ENTRY_RE.match(stmt)
  if not m:
    raise PTXSyntaxError(f"unsupported declaration at line {line}: `{stmt[:80]}`", line=line)
  entry = Entry(m.group(1), line=line)
  for p in _split_commas(m.group(2)):
    pm = _PARAM_RE.match(" ".join(p.split()))
    if not pm:
      raise PTXSyntaxError(f"unsupported kernel parameter `{p}` at line {line}: use "
                           "`.param .u64 name` or a scalar `.param .u32 name`", line=line)
    entry.params.append((pm.group(2), pm.group(1)))
  return entry


def _body_statement(entry: Entry, line: int, stmt: str) -> None:
  label = _LABEL_RE.match(stmt)
  if label:
    entry.labels[label.group(1)] = len(entry.instrs)
  elif stmt.startswith(".reg"):
    _declare_regs(entry, line, stmt)
  elif stmt.startswith(".shared"):
    entry.shared.append(_shared_decl(line, stmt))
  elif stmt.startswith(_IGNORED_DIRECTIVES):
    pass
  elif stmt.startswith("."):
    raise PTXSyntaxError(f"unsupported directive `{stmt.split()[0]}` at line {line}: "
                         f"`{stmt}`", line=line)
  else:
    entry.instrs.append(parse_instruction(line, stmt))


def _directive_value(line: int, stmt: str) -> str:
  """What follows a module directive's name (`.version 8.0` -> "8.0"); PTXSyntaxError if
  nothing does."""
  parts = stmt.split(None, 1)
  if len(parts) < 2:
    raise PTXSyntaxError(f"{parts[0][:40]} at line {line} has no value", line=line)
  return parts[1].strip()


def parse(text: str) -> Module:
  """Parse PTX source text into a Module (syntax only; semantics are checked when compiled)."""
  mod, entry, pending, depth = Module(), None, None, 0
  for line, stmt in statements(text):
    if entry is not None:
      if stmt == "{":
        depth += 1
      elif stmt == "}":
        depth -= 1
        if depth == 0:
          mod.entries[entry.name] = entry
          entry = None
      else:
        _body_statement(entry, line, stmt)
    elif stmt.startswith(".version"):
      mod.version = _directive_value(line, stmt)
    elif stmt.startswith(".target"):
      mod.target = _directive_value(line, stmt)
    elif stmt.startswith(".address_size"):
      size = _directive_value(line, stmt)
      if size not in ("32", "64"):
        raise PTXSyntaxError(f".address_size at line {line} is {size[:20]!r}: it must be 32 or "
                             f"64", line=line)
      mod.address_size = int(size)
    elif stmt.startswith(".shared"):
      mod.shared.append(_shared_decl(line, stmt))
    elif stmt == "{" and pending is not None:
      entry, depth, pending = pending, 1, None
    elif ".entry" in stmt.split("(")[0]:
      pending = _parse_entry_header(line, stmt)
    elif stmt.startswith(_IGNORED_DIRECTIVES):
      pass
    else:
      raise PTXSyntaxError(f"unsupported module-level statement at line {line}: `{stmt[:80]}`",
                           line=line)
  if entry is not None:
    raise PTXSyntaxError(f"entry {entry.name} (line {entry.line}) is missing its closing `}}`",
                         line=entry.line)
  return mod
