"""A protobuf wire-format reader for the messages an ONNX file holds (ModelProto and below).

Why not the `onnx` package or the `protobuf` runtime: kernelgen runs in Pyodide, where `onnx`
(a C++ extension) is not available, and shipping the protobuf runtime plus generated classes to
the page costs megabytes for a format this small. The wire format is five rules (varints,
64-bit, length-delimited, 32-bit; a tag is field << 3 | wire type), so a table of the fields
each message has, below, and one decoding loop read every ONNX message with the standard
library alone. Unknown fields are skipped (newer files read with this reader); a field whose
wire type does not fit its declared type, a truncated varint or length, or a group is a
`ModelError`. Repeated numeric fields are read packed and unpacked, as protobuf requires.

Messages are plain objects: a field that was not in the data reads as its default (0, 0.0, "",
b"", [] or None for a message), and `msg.has(name)` says whether it was present.
"""
from __future__ import annotations

import struct

from ..errors import ModelError

MAX_DEPTH = 64      # messages nested deeper than this (graphs in attributes in graphs ...) refuse

VARINT, I64, LEN, I32 = 0, 1, 2, 5
# scalar kinds -> the wire type they use when not packed
_WIRE = {"int64": VARINT, "int32": VARINT, "uint64": VARINT, "bool": VARINT, "enum": VARINT,
         "float": I32, "double": I64, "string": LEN, "bytes": LEN}
_DEFAULT = {"int64": 0, "int32": 0, "uint64": 0, "bool": False, "enum": 0, "float": 0.0,
            "double": 0.0, "string": "", "bytes": b""}


class Message:
  """A decoded message; FIELDS maps field number -> (name, kind, repeated)."""
  FIELDS: dict = {}

  def __init__(self, **values):
    for name, value in values.items():
      setattr(self, name, value)

  def has(self, name: str) -> bool:
    return name in self.__dict__

  def __getattr__(self, name):
    spec = type(self).BY_NAME.get(name)
    if spec is None:
      raise AttributeError(f"{type(self).__name__} has no field {name!r}")
    _, kind, repeated = spec
    if repeated:
      value = []
      setattr(self, name, value)
      return value
    return _DEFAULT.get(kind) if isinstance(kind, str) else None

  def __repr__(self) -> str:
    return f"<{type(self).__name__} {sorted(self.__dict__)}>"


def _message(name: str, fields: dict) -> type:
  cls = type(name, (Message,), {"FIELDS": fields, "__module__": __name__})
  cls.BY_NAME = {spec[0]: (num,) + spec[1:] for num, spec in fields.items()}
  return cls


def _define(schema: dict) -> dict:
  """Message classes from {name: {num: (field, kind or message name, repeated)}}."""
  classes = {name: _message(name, {}) for name in schema}
  for name, fields in schema.items():
    resolved = {num: (field, classes.get(kind, kind), rep) for num, (field, kind, rep)
                in fields.items()}
    classes[name].FIELDS = resolved
    classes[name].BY_NAME = {f: (num, k, r) for num, (f, k, r) in resolved.items()}
  return classes


R, O = True, False   # repeated, optional
SCHEMA = {
  "StringStringEntryProto": {1: ("key", "string", O), 2: ("value", "string", O)},
  "OperatorSetIdProto": {1: ("domain", "string", O), 2: ("version", "int64", O)},
  "Segment": {1: ("begin", "int64", O), 2: ("end", "int64", O)},
  "TensorProto": {
    1: ("dims", "int64", R), 2: ("data_type", "int32", O), 3: ("segment", "Segment", O),
    4: ("float_data", "float", R), 5: ("int32_data", "int32", R),
    6: ("string_data", "bytes", R), 7: ("int64_data", "int64", R), 8: ("name", "string", O),
    12: ("doc_string", "string", O), 9: ("raw_data", "bytes", O),
    13: ("external_data", "StringStringEntryProto", R), 14: ("data_location", "enum", O),
    10: ("double_data", "double", R), 11: ("uint64_data", "uint64", R),
    16: ("metadata_props", "StringStringEntryProto", R)},
  "SparseTensorProto": {1: ("values", "TensorProto", O), 2: ("indices", "TensorProto", O),
                        3: ("dims", "int64", R)},
  "Dimension": {1: ("dim_value", "int64", O), 2: ("dim_param", "string", O),
                3: ("denotation", "string", O)},
  "TensorShapeProto": {1: ("dim", "Dimension", R)},
  "TensorTypeProto": {1: ("elem_type", "int32", O), 2: ("shape", "TensorShapeProto", O)},
  "SequenceTypeProto": {1: ("elem_type", "TypeProto", O)},
  "MapTypeProto": {1: ("key_type", "int32", O), 2: ("value_type", "TypeProto", O)},
  "OptionalTypeProto": {1: ("elem_type", "TypeProto", O)},
  "OpaqueTypeProto": {1: ("domain", "string", O), 2: ("name", "string", O)},
  "TypeProto": {1: ("tensor_type", "TensorTypeProto", O),
                4: ("sequence_type", "SequenceTypeProto", O),
                5: ("map_type", "MapTypeProto", O), 9: ("optional_type", "OptionalTypeProto", O),
                8: ("sparse_tensor_type", "TensorTypeProto", O),
                7: ("opaque_type", "OpaqueTypeProto", O), 6: ("denotation", "string", O)},
  "ValueInfoProto": {1: ("name", "string", O), 2: ("type", "TypeProto", O),
                     3: ("doc_string", "string", O),
                     4: ("metadata_props", "StringStringEntryProto", R)},
  "AttributeProto": {
    1: ("name", "string", O), 21: ("ref_attr_name", "string", O),
    13: ("doc_string", "string", O), 20: ("type", "enum", O), 2: ("f", "float", O),
    3: ("i", "int64", O), 4: ("s", "bytes", O), 5: ("t", "TensorProto", O),
    6: ("g", "GraphProto", O), 22: ("sparse_tensor", "SparseTensorProto", O),
    14: ("tp", "TypeProto", O), 7: ("floats", "float", R), 8: ("ints", "int64", R),
    9: ("strings", "bytes", R), 10: ("tensors", "TensorProto", R),
    11: ("graphs", "GraphProto", R), 23: ("sparse_tensors", "SparseTensorProto", R),
    15: ("type_protos", "TypeProto", R)},
  "NodeProto": {1: ("input", "string", R), 2: ("output", "string", R), 3: ("name", "string", O),
                4: ("op_type", "string", O), 7: ("domain", "string", O),
                8: ("overload", "string", O), 5: ("attribute", "AttributeProto", R),
                6: ("doc_string", "string", O),
                9: ("metadata_props", "StringStringEntryProto", R)},
  "TensorAnnotation": {1: ("tensor_name", "string", O),
                       2: ("quant_parameter_tensor_names", "StringStringEntryProto", R)},
  "GraphProto": {1: ("node", "NodeProto", R), 2: ("name", "string", O),
                 5: ("initializer", "TensorProto", R),
                 15: ("sparse_initializer", "SparseTensorProto", R),
                 10: ("doc_string", "string", O), 11: ("input", "ValueInfoProto", R),
                 12: ("output", "ValueInfoProto", R), 13: ("value_info", "ValueInfoProto", R),
                 14: ("quantization_annotation", "TensorAnnotation", R),
                 16: ("metadata_props", "StringStringEntryProto", R)},
  "FunctionProto": {1: ("name", "string", O), 4: ("input", "string", R),
                    5: ("output", "string", R), 6: ("attribute", "string", R),
                    11: ("attribute_proto", "AttributeProto", R), 7: ("node", "NodeProto", R),
                    8: ("doc_string", "string", O), 9: ("opset_import", "OperatorSetIdProto", R),
                    10: ("domain", "string", O), 13: ("overload", "string", O),
                    12: ("value_info", "ValueInfoProto", R),
                    14: ("metadata_props", "StringStringEntryProto", R)},
  "ModelProto": {1: ("ir_version", "int64", O), 8: ("opset_import", "OperatorSetIdProto", R),
                 2: ("producer_name", "string", O), 3: ("producer_version", "string", O),
                 4: ("domain", "string", O), 5: ("model_version", "int64", O),
                 6: ("doc_string", "string", O), 7: ("graph", "GraphProto", O),
                 14: ("metadata_props", "StringStringEntryProto", R),
                 25: ("functions", "FunctionProto", R)},
}
CLASSES = _define(SCHEMA)
ModelProto, GraphProto, NodeProto = CLASSES["ModelProto"], CLASSES["GraphProto"], \
  CLASSES["NodeProto"]
AttributeProto, TensorProto = CLASSES["AttributeProto"], CLASSES["TensorProto"]
ValueInfoProto, TypeProto = CLASSES["ValueInfoProto"], CLASSES["TypeProto"]

# AttributeProto.type values
ATTR_TYPES = {1: "FLOAT", 2: "INT", 3: "STRING", 4: "TENSOR", 5: "GRAPH", 11: "SPARSE_TENSOR",
              13: "TYPE_PROTO", 6: "FLOATS", 7: "INTS", 8: "STRINGS", 9: "TENSORS", 10: "GRAPHS",
              12: "SPARSE_TENSORS", 14: "TYPE_PROTOS"}


# ---- the wire format -------------------------------------------------------------------------

def read_varint(buf, pos: int, end: int, where: str) -> tuple[int, int]:
  """(value, next position) of the base-128 varint at pos; at most 10 bytes."""
  value, shift = 0, 0
  while True:
    if pos >= end:
      raise ModelError(f"truncated varint in {where}: the data ends inside a number; "
                       f"the file is cut short or not an ONNX model")
    byte = buf[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      return value, pos
    shift += 7
    if shift >= 70:
      raise ModelError(f"varint longer than 10 bytes in {where}: not protobuf data")


def _signed(value: int, bits: int) -> int:
  value &= (1 << bits) - 1
  return value - (1 << bits) if value >> (bits - 1) else value


def _scalar(kind: str, raw: int):
  if kind in ("int64", "enum"):
    return _signed(raw, 64)
  if kind == "int32":
    return _signed(raw, 32)
  if kind == "bool":
    return raw != 0
  return raw & 0xFFFFFFFFFFFFFFFF


def _packed(kind: str, data, where: str) -> list:
  """A packed repeated numeric field's values."""
  if kind == "float" or kind == "double":
    size, fmt = (4, "f") if kind == "float" else (8, "d")
    if len(data) % size:
      raise ModelError(f"packed {kind} field in {where} has {len(data)} bytes, not a multiple "
                       f"of {size}: the file is damaged")
    return list(struct.unpack(f"<{len(data) // size}{fmt}", data))
  out, pos, end = [], 0, len(data)
  while pos < end:
    raw, pos = read_varint(data, pos, end, where)
    out.append(_scalar(kind, raw))
  return out


def _skip(buf, pos: int, end: int, wire: int, where: str) -> int:
  if wire == VARINT:
    return read_varint(buf, pos, end, where)[1]
  if wire == I64:
    return _need(pos + 8, end, where)
  if wire == I32:
    return _need(pos + 4, end, where)
  if wire == LEN:
    length, pos = read_varint(buf, pos, end, where)
    return _need(pos + length, end, where)
  raise ModelError(f"wire type {wire} in {where} (groups or invalid): not ONNX protobuf data")


def _need(pos: int, end: int, where: str) -> int:
  if pos > end:
    raise ModelError(f"truncated field in {where}: it runs {pos - end} bytes past the end of "
                     f"its message; the file is cut short or damaged")
  return pos


def _read_field(cls, spec, wire: int, buf, pos: int, end: int, depth: int):
  """(value or list of values, next position) of one field occurrence."""
  name, kind, repeated = spec
  where = f"{cls.__name__}.{name}"
  if wire == LEN:
    length, pos = read_varint(buf, pos, end, where)
    stop = _need(pos + length, end, where)
    if not isinstance(kind, str):
      return decode(kind, buf, pos, stop, depth + 1), stop
    if kind == "string":
      try:
        return str(buf[pos:stop], "utf-8"), stop
      except UnicodeDecodeError:
        raise ModelError(f"{where} is not valid UTF-8: the file is damaged") from None
    if kind == "bytes":
      return bytes(buf[pos:stop]), stop
    if repeated:
      return _packed(kind, buf[pos:stop], where), stop
  elif isinstance(kind, str) and _WIRE.get(kind) == wire:
    if wire == VARINT:
      raw, pos = read_varint(buf, pos, end, where)
      return _scalar(kind, raw), pos
    size, fmt = (4, "<f") if wire == I32 else (8, "<d")
    stop = _need(pos + size, end, where)
    return struct.unpack(fmt, buf[pos:stop])[0], stop
  expected = "LEN" if not isinstance(kind, str) else _WIRE[kind]
  raise ModelError(f"{where} has wire type {wire}, but a {getattr(kind, '__name__', kind)} "
                   f"field needs {expected}: the file is damaged or not an ONNX model")


def decode(cls, buf, pos: int = 0, end: int | None = None, depth: int = 0):
  """Decode buf[pos:end] as message class `cls`."""
  end = len(buf) if end is None else end
  if depth > MAX_DEPTH:
    raise ModelError(f"messages nested more than {MAX_DEPTH} deep ({cls.__name__}): the model "
                     f"is damaged or hostile")
  msg, fields = cls(), cls.FIELDS
  while pos < end:
    tag, pos = read_varint(buf, pos, end, cls.__name__)
    num, wire = tag >> 3, tag & 7
    spec = fields.get(num)
    if num == 0:
      raise ModelError(f"field number 0 in {cls.__name__}: not protobuf data")
    if spec is None:
      pos = _skip(buf, pos, end, wire, cls.__name__)
      continue
    value, pos = _read_field(cls, spec, wire, buf, pos, end, depth)
    if not spec[2]:
      setattr(msg, spec[0], value)
    elif isinstance(value, list) and isinstance(spec[1], str) and spec[1] not in ("string",
                                                                                   "bytes"):
      getattr(msg, spec[0]).extend(value)
    else:
      getattr(msg, spec[0]).append(value)
  return msg


def parse_model(data) -> ModelProto:
  """A ModelProto from the bytes of an .onnx file."""
  return decode(ModelProto, memoryview(data) if not isinstance(data, bytes) else data)


def parse_tensor(data) -> TensorProto:
  """A TensorProto from the bytes of a .pb file (the ONNX test data sets)."""
  return decode(TensorProto, data)
