"""Protobuf's wire format, written by hand for tests and benchmarks: frazil reads Protobuf with
prost-reflect, and this small independent encoder checks that it reads what a producer sends.
Scalars are left out when they hold their default (as proto3 encoders do)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pyarrow as pa


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1   # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def uint(field: int, n: int) -> bytes:
    return key(field, 0) + varint(n) if n else b""


def double(field: int, x: float) -> bytes:
    return key(field, 1) + struct.pack("<d", x) if x else b""


def length(field: int, data: bytes) -> bytes:
    return key(field, 2) + varint(len(data)) + data


def text(field: int, s: str) -> bytes:
    return length(field, s.encode()) if s else b""


def timestamp(field: int, at: datetime) -> bytes:
    """A ``google.protobuf.Timestamp`` field."""
    whole = int(at.timestamp() // 1)
    return length(field, uint(1, whole) + uint(2, round((at.timestamp() - whole) * 1e6) * 1000))


def proto_of(schema: pa.Schema, name: str = "Row") -> str:
    """A proto3 file with one message of ``schema``'s columns (string, int64, double, bool,
    timestamps as ``google.protobuf.Timestamp``, structs as nested messages, lists as repeated)."""
    def message(fields: list[pa.Field], called: str, indent: str) -> str:
        lines, nested = [], []
        for number, f in enumerate(fields, 1):
            t = f.type
            repeated = pa.types.is_list(t)
            t = t.value_type if repeated else t
            if pa.types.is_struct(t):
                kind = f"{f.name.capitalize()}Msg"
                nested.append(message(list(t), kind, indent + "  "))
            else:
                kind = _SCALARS[next(k for k in _SCALARS if getattr(pa.types, k)(t))]
            lines.append(f"{indent}  {'repeated ' if repeated else ''}{kind} {f.name} = {number};")
        return f"{indent}message {called} {{\n" + "\n".join(nested + lines) + f"\n{indent}}}"
    return ('syntax = "proto3";\npackage bench;\nimport "google/protobuf/timestamp.proto";\n\n'
            + message(list(schema), name, "") + "\n")


_SCALARS = {"is_string": "string", "is_int64": "int64", "is_float64": "double", "is_boolean": "bool",
            "is_timestamp": "google.protobuf.Timestamp"}


def encoder(schema: pa.Schema) -> Callable[[dict[str, Any]], bytes]:
    """Encodes a row (as JSON gives it: timestamps as ISO-8601 text) as :func:`proto_of`'s message."""
    def field(number: int, t: pa.DataType, v: Any) -> bytes:
        if v is None:
            return b""
        if pa.types.is_list(t):
            return b"".join(field(number, t.value_type, x) for x in v)
        if pa.types.is_struct(t):
            return length(number, b"".join(field(i, c.type, v.get(c.name)) for i, c in enumerate(t, 1)))
        if pa.types.is_string(t):
            return text(number, v)
        if pa.types.is_int64(t) or pa.types.is_boolean(t):
            return uint(number, int(v))
        if pa.types.is_float64(t):
            return double(number, float(v))
        if pa.types.is_timestamp(t):
            return timestamp(number, datetime.fromisoformat(v))
        raise TypeError(f"no Protobuf encoding here for {t}")
    return lambda row: b"".join(field(i, f.type, row.get(f.name)) for i, f in enumerate(schema, 1))


# descriptor.proto's FieldDescriptorProto.Type numbers of the scalars descriptor_set writes
_TYPES = {"double": 1, "int64": 3, "bool": 8, "string": 9}


def descriptor_set(filename: str, package: str, messages: dict[str, list[tuple[str, int, str]]]) -> bytes:
    """A ``FileDescriptorSet`` (what ``protoc --descriptor_set_out`` writes) of one proto3 file
    declaring ``messages``: name to fields (name, number, scalar type), each field optional."""
    def field(name: str, number: int, kind: str) -> bytes:
        # FieldDescriptorProto: name 1, number 3, label 4 (LABEL_OPTIONAL = 1), type 5, json_name 10
        return text(1, name) + uint(3, number) + uint(4, 1) + uint(5, _TYPES[kind]) + text(10, name)

    # DescriptorProto: name 1, field 2
    types = b"".join(length(4, text(1, name) + b"".join(length(2, field(*f)) for f in fields))
                     for name, fields in messages.items())
    # FileDescriptorProto: name 1, package 2, message_type 4, syntax 12; the set's file 1
    return length(1, text(1, filename) + text(2, package) + types + text(12, "proto3"))
