"""Records' structured values to and from ``google.protobuf.Struct`` — LOSSY, for peers that need it.

Struct knows only null, bool, double, string, lists and objects, so:

* ints within ±2**53 become numbers; larger ints become decimal strings (a
  double would silently round them);
* ``Decimal`` becomes its text keeping the scale (``"1.50"``);
* ``bytes`` become standard base64 strings;
* date / datetime / TIME become TiDB text (``2020-02-20``,
  ``2020-02-20 02:20:20.123456``, ``-838:59:59``);
* NaN and ±Infinity raise ConversionError (Struct's JSON mapping rejects them).

The way back cannot know what a string or number was: numbers with an
integral value become ``int`` (so a float ``2.0`` comes back as ``2``), others
``float``; strings stay strings. Use the protobuf form's Avro mode for
lossless transport.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import struct_pb2

from ..errors import ConversionError
from .textforms import TEXT_FORMS

MAX_SAFE_INT = 1 << 53


def to_struct(value: dict, path: str = "$") -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(plain(value, path))
    return out


def from_struct(value: struct_pb2.Struct) -> dict:
    return {k: _from_value(v) for k, v in value.fields.items()}


def plain(value: Any, path: str = "$") -> Any:
    """The value with only the Python types Struct accepts (see the module rules)."""
    t = type(value)
    if value is None or t is str or t is bool:
        return value
    if t is int:
        return value if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else str(value)
    if t is float:
        if math.isfinite(value):
            return value
        raise ConversionError(f"{value} cannot be represented in google.protobuf.Struct", path=path, value=value)
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ConversionError(f"dict key {k!r} is not a string", path=path)
            out[k] = plain(v, f"{path}.{k}")
        return out
    if t is list:
        return [plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    text_form = TEXT_FORMS.get(t)
    if text_form is not None:
        return text_form(value)
    raise ConversionError(f"unsupported value type {t.__name__}", path=path, value=value)


def _from_value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        x = v.number_value
        return int(x) if x.is_integer() else x
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return from_struct(v.struct_value)
    if kind == "list_value":
        return [_from_value(e) for e in v.list_value.values]
    return None
