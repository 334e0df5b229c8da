"""Conduit's JSON form of records: one JSON object per line.

``{"position": <base64>, "operation": "create|update|delete|snapshot", "metadata": {...},
"key": ..., "payload": {"before": ..., "after": ...}}`` — raw data is a base64
string, structured data an object, absent data ``null``.

Values JSON has no type for are written as text (``cdcflow.convert.textforms``):
bytes as base64, Decimal keeping its scale (``"1.50"``), dates, datetimes and
durations as ISO-8601-like text (``2020-02-20``, ``2020-02-20 02:20:20.123456``,
``-838:59:59``), NaN/±Infinity as
``"NaN"``/``"Infinity"``/``"-Infinity"``; ints are exact JSON integers of any size.

Lossless: with a schema store, the writer attaches the key/payload schema
reference exactly as the protobuf form does (:mod:`cdcflow.convert.schemaref`)
and the reader restores bytes, Decimal, dates, times and floats from it.
Without a store, or for data without a reference, the reader returns plain
JSON types. A union whose branches JSON cannot tell apart (say text and bytes
in one list) is written in Avro's JSON union form ``{"bytes": "..."}``.

Per Avro schema (cached by fingerprint) one writer, a tree of plain functions built from the
schema's nodes, checks a value as the Avro encoder does and builds its JSON form in one pass (the
reference), and one generated reader checks and restores it. A record whose metadata names a
schema its values fit keeps its metadata dict as is. With the compiled kernel
(``runtime/convert/_jsonform.c``) a whole batch is written in C from a per-schema plan of the
same tree; Python still picks each part's schema, and the Python writer writes every record the
kernel hands back.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import struct
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable

import orjson

from .. import accel
from .avro import Codec, INT64_MAX, INT64_MIN
from ..errors import ConversionError, SchemaError
from ..record import META_COLLECTION as _COLLECTION
from ..record import META_KEY_SCHEMA_SUBJECT as _KEY_SUBJECT
from ..record import META_KEY_SCHEMA_VERSION as _KEY_VERSION
from ..record import META_PAYLOAD_SCHEMA_SUBJECT as _PAYLOAD_SUBJECT
from ..record import META_PAYLOAD_SCHEMA_VERSION as _PAYLOAD_VERSION
from ..record import Operation, Record
from ..schemas import SchemaStore
from .protobuf import _metadata_of
from .schemaref import (
    KEY,
    META_KEYS,
    META_SCHEMA_DERIVED,
    PAYLOAD,
    SchemaRefs,
    drop_refs,
    in_context,
    mark_derived,
    pop_derived,
    refs_for,
)
from .textforms import (
    TEXT_FORMS,
    b64,
    date_of,
    datetime_of,
    decimal_text,
    parse_date,
    parse_datetime,
    parse_decimal,
    parse_time,
    time_of,
    time_text,
    unb64,
)

#: the compiled writer (runtime/convert/_jsonform.c), or None: the Python path below writes every line
_kernel = accel.load("cdcflow.convert._jsonform")

UINT64_MAX = (1 << 64) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_US = _dt.timedelta(microseconds=1)
_NONFINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_OPERATIONS = {op.text: op for op in Operation}
_OPERATION_TEXT = {op: op.text for op in Operation}


# ---------------------------------------------------------------------------
# Values -> JSON without a schema
# ---------------------------------------------------------------------------
def jsonable(value: Any, path: str = "$") -> Any:
    """The value with only JSON types (orjson ``Fragment`` for ints past 64 bits)."""
    t = type(value)
    if value is None or t is str or t is bool:
        return value
    if t is int:
        return value if INT64_MIN <= value <= UINT64_MAX else _big_int(value)
    if t is float:
        return value if value - value == 0.0 else _nonfinite(value)
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ConversionError(f"dict key {k!r} is not a string", path=path)
            out[k] = jsonable(v, f"{path}.{k}")
        return out
    if t is list:
        return [jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    text_form = TEXT_FORMS.get(t)
    if text_form is not None:
        return text_form(value)
    raise ConversionError(f"unsupported value type {t.__name__}", path=path, value=value)


def _nonfinite(value: float) -> str:
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def _big_int(value: int) -> orjson.Fragment:
    return orjson.Fragment(str(value).encode())


# ---------------------------------------------------------------------------
# Schema-guided JSON code (generated once per schema)
# ---------------------------------------------------------------------------
_GROUP = {
    "null": "null", "boolean": "boolean", "long": "integer", "int": "integer", "bigint": "integer",
    "double": "float", "float": "float", "record": "object", "map": "object", "array": "array",
}  # everything else is written as a JSON string


def _group(node: Any) -> str:
    return _GROUP.get(node.kind, "string")


def _ambiguous(branches: list) -> bool:
    """Can a reader not tell the union's branches apart by the JSON type of a value?"""
    groups = [_group(b) for b in branches if b.kind != "null"]
    if len(groups) != len(set(groups)):
        objects = [b for b in branches if _group(b) == "object"]
        if groups.count("object") > 1 and all(b.kind == "record" for b in objects):
            keysets = [frozenset(orig for orig, _, _ in b.fields) for b in objects]
            others = [g for g in groups if g != "object"]
            return len(set(keysets)) != len(keysets) or len(others) != len(set(others))
        return True
    return "float" in groups and "string" in groups  # NaN is written as text


class _Refused(Exception):
    """Raised by a schema's writer: the value does not fit; ``Codec.prepare`` says precisely why."""


_REFUSED = _Refused()  # one instance: a refusal is routine inside a union


def _checked(test: Callable[[Any], bool], write: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """A scalar's writer from its check and its JSON form (None: the value is its own JSON form)."""
    if write is None:
        def scalar(v: Any) -> Any:
            if not test(v):
                raise _REFUSED
            return v
    else:
        def scalar(v: Any) -> Any:
            if not test(v):
                raise _REFUSED
            return write(v)
    return scalar


def _number(v: float) -> Any:
    return v if v - v == 0.0 else _nonfinite(v)


def _f32_exact(v: float) -> bool:
    return v != v or struct.unpack("<f", struct.pack("<f", v))[0] == v


def _bigint_json(v: int) -> Any:
    return v if INT64_MIN <= v <= UINT64_MAX else _big_int(v)


def _decimal_fits(precision: int, scale: int) -> Callable[[Any], bool]:
    def fits(v: Any) -> bool:  # the scale exactly, at most ``precision`` digits, no negative zero
        if type(v) is not Decimal:
            return False
        sign, digits, exponent = v.as_tuple()
        return exponent == -scale and len(digits) <= precision and not (sign and not any(digits))
    return fits


def _scalar(node: Any) -> tuple[Callable[[Any], bool], Callable[[Any], Any] | None] | None:
    """(check, JSON form or None when the value is its own) of a scalar ``node``; None for a
    container. The check is ``cdcflow.convert.avro``'s strict one, which decides what fits; the
    text forms are ``textforms``'. A ``date`` stays as it is: orjson writes it as ``YYYY-MM-DD``,
    the same text. A union of null and one scalar (a nullable column) is a scalar too."""
    kind, avro = node.kind, node.avro
    if kind == "null":
        return (lambda v: v is None, None)
    if kind == "boolean":
        return (lambda v: type(v) is bool, None)
    if kind == "int":
        return (lambda v: type(v) is int and INT32_MIN <= v <= INT32_MAX, None)
    if kind == "long":
        return (lambda v: type(v) is int and INT64_MIN <= v <= INT64_MAX, None)
    if kind == "float":
        return (lambda v: type(v) is float and _f32_exact(v), _number)
    if kind == "double":
        return (lambda v: type(v) is float, _number)
    if kind == "bytes":
        return (lambda v: type(v) is bytes, b64)
    if kind == "string":
        return (lambda v: type(v) is str, None)
    if kind == "bigint":
        precision = int(avro.get("precision") or 0)
        limit = 10 ** precision
        if precision <= 0:
            return (lambda v: type(v) is int, _bigint_json)
        return (lambda v: type(v) is int and -limit < v < limit, _bigint_json)
    if kind == "decimal":  # finite, exponent == -scale <= 0: plain notation keeps the scale
        return (_decimal_fits(int(avro["precision"]), int(avro.get("scale", 0))), lambda v: format(v, "f"))
    if kind == "decimal_text":
        return (lambda v: type(v) is Decimal, decimal_text)
    if kind == "date":
        return (lambda v: type(v) is _dt.date, None)
    if kind == "datetime":
        return (lambda v: type(v) is _dt.datetime and v.tzinfo is None, lambda v: v.isoformat(" "))
    if kind == "time":
        return (lambda v: type(v) is _dt.timedelta and INT64_MIN <= v // _US <= INT64_MAX, time_text)
    if kind == "enum":
        symbols = frozenset(avro["symbols"])
        return (lambda v: type(v) is str and v in symbols, None)
    if kind == "fixed":
        size = int(avro["size"])
        return (lambda v: type(v) is bytes and len(v) == size, b64)
    if kind == "foreign":  # a logical type cdcflow does not model: accepts anything, as the reference
        return (lambda v: True, jsonable)
    if kind == "union" and len(node.branches) == 2 and {b.kind for b in node.branches} & {"null"}:
        other = node.branches[node.branches[0].kind == "null"]
        inner = None if other.kind == "foreign" else _scalar(other)
        if inner is None:
            return None
        test, write = inner
        if write is None:
            return (lambda v: v is None or test(v), None)
        return (lambda v: v is None or test(v), lambda v: None if v is None else write(v))
    return None


def union_branches(node: Any) -> tuple[list, Any]:
    """(branches, catch-all branch or None): the order a value tries a union's branches in.

    The reference picks the first branch that accepts a value. Scalar and container branches
    never accept the same value, so scalars are tried first (cheap type tests), then containers,
    each in schema order. A foreign logical type accepts anything: it ends the union (the
    branches after it are never picked).
    """
    scalars, containers = [], []
    for branch in node.branches:
        if branch.kind == "foreign":
            return scalars + containers, branch
        (containers if branch.kind in ("record", "array", "map", "union") else scalars).append(branch)
    return scalars + containers, None


def _json_writer(root: Any) -> Callable[[Any], Any]:
    """``write(native) -> json-able`` for the node tree under ``root``: checks the value as
    ``Codec.prepare`` does and builds its JSON form in one pass; raises ``_Refused`` when the
    value does not fit. A record's JSON object is a copy of its dict (the JSON keeps the
    value's key order); a union JSON cannot tell apart is written as ``{"branch": value}``.
    """
    writers: dict[int, Callable[[Any], Any]] = {}

    def of(node: Any) -> Callable[[Any], Any]:
        w = writers.get(id(node))
        if w is None:
            w = writers[id(node)] = build(node)
        return w

    def build(node: Any) -> Callable[[Any], Any]:
        scalar = _scalar(node)
        if scalar is not None:
            return _checked(*scalar)
        kind = node.kind
        if kind == "record":
            # (name, check, JSON form) of each field: a scalar field is checked inline; other
            # fields get their writer as the form, after this one is known (a recursive record)
            fields: list = []
            n = len(node.fields)
            copied = [True]  # False when every field is its own JSON form: the value is returned

            def record(v: Any) -> Any:
                if type(v) is not dict or len(v) != n:
                    raise _REFUSED
                o = v.copy() if copied[0] else v  # the JSON keeps the value's key order
                try:
                    for name, test, write in fields:
                        x = v[name]
                        if test is not None and not test(x):
                            raise _REFUSED
                        if write is not None:
                            o[name] = write(x)
                except KeyError:
                    raise _REFUSED from None
                return o

            writers[id(node)] = record
            for orig, _, f in node.fields:
                scalar = _scalar(f)
                fields.append((orig, *scalar) if scalar is not None else (orig, None, of(f)))
            copied[0] = any(write is not None for _, _, write in fields)
            return record
        if kind == "array":
            item = of(node.items)

            def array(v: Any) -> Any:
                if type(v) is not list:
                    raise _REFUSED
                return [item(x) for x in v]
            return array
        if kind == "map":
            value = of(node.values)

            def map_(v: Any) -> Any:
                if type(v) is not dict:
                    raise _REFUSED
                out = {}
                for k, x in v.items():
                    if type(k) is not str:
                        raise _REFUSED
                    out[k] = value(x)
                return out
            return map_
        if kind == "union":
            return union(node)
        raise AssertionError(f"unknown kind {kind}")  # pragma: no cover

    def union(node: Any) -> Callable[[Any], Any]:
        labelled = _ambiguous(node.branches)
        ordered, catch_all = union_branches(node)
        nullable = any(b.kind == "null" for b in ordered)
        tries = [(b.branch, of(b)) for b in ordered if b.kind != "null"]
        if catch_all is not None:
            tries.append((catch_all.branch, jsonable))

        def union_(v: Any) -> Any:
            if v is None and nullable:
                return None
            for label, w in tries:
                try:
                    out = w(v)
                except _Refused:
                    continue
                return {label: out} if labelled else out
            raise _REFUSED
        return union_

    return of(root)


class _Bad(Exception):
    """Raised by generated readers; the path is collected while unwinding."""

    def __init__(self, message: str, value: Any = None):
        self.message = message
        self.value = value
        self.path: list[str] = []


def _bad_keys(j: dict, names: frozenset) -> None:
    raise _Bad(f"object keys {sorted(j)} do not match the schema's {sorted(names)}", j)


def _bad_type(what: str, j: Any) -> None:
    raise _Bad(f"expected {what}, got {type(j).__name__}", j)


def _bad_union(labels: list, j: Any) -> None:
    raise _Bad(f"JSON {type(j).__name__} fits no branch of {labels}", j)


def _bad_union_object(labels: list, j: Any) -> None:
    raise _Bad(f"expected a one-key union object naming one of {labels}", j)


def _bad_label(label: str, labels: list, j: Any) -> None:
    raise _Bad(f"union branch {label!r} is not one of {labels}", j)


def _bad_text(parse: Callable[[str, str], Any], j: str) -> None:
    """Raise the textforms parser's own message for text the fast parse refused."""
    try:
        parse(j, "")
    except ConversionError as e:
        raise _Bad(str(e), j) from None
    raise _Bad(f"invalid text {j!r}", j)  # pragma: no cover - both parsers refuse the same texts


def _read_float(j: Any) -> float:
    t = type(j)
    if t is float:
        return j
    if t is int:
        return float(j)
    if t is str and j in _NONFINITE_TEXT:
        return _NONFINITE_TEXT[j]
    raise _Bad(f"expected a number, got {t.__name__}", j)


def _read_b64(j: Any) -> bytes:
    if type(j) is not str:
        raise _Bad(f"expected base64 text, got {type(j).__name__}", j)
    if not j:
        return b""
    try:
        return unb64(j)
    except ConversionError as e:
        raise _Bad(str(e), j) from None


def _read_decimal_number(j: Any) -> Decimal:
    if type(j) is int or type(j) is float:  # a peer wrote a JSON number
        return Decimal(str(j))
    raise _Bad(f"expected decimal text, got {type(j).__name__}", j)


# kind -> (what the error names, the textforms parser, the fast parser) for text values
_TEXT_KINDS = {
    "date": ("date", parse_date, "_pdate"),
    "datetime": ("datetime", parse_datetime, "_pdatetime"),
    "time": ("TIME", parse_time, "_ptime"),
}
_TYPED = {"boolean": ("bool", "a boolean"), "long": ("int", "an integer"), "int": ("int", "an integer"),
          "bigint": ("int", "an integer"), "string": ("str", "a string"), "enum": ("str", "a string")}


class _Source:
    """Lines of generated code plus the constants they refer to."""

    def __init__(self, ns: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.ns = ns
        self._n = 0

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value: Any, prefix: str = "_k") -> str:
        name = self.var(prefix)
        self.ns[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


class _ReaderGen:
    """``read(json) -> native``: checks the JSON value against the schema and restores the native
    one. Works in place on the freshly parsed JSON (a record's object becomes its dict, keeping the
    line's key order) and raises ``_Bad`` with the path when the value does not fit.

    ``known`` (a JSON type name: none, bool, int, float, str, dict, list) says which type a
    surrounding union test already established, so the value's own test is left out.
    """

    def __init__(self) -> None:
        self.functions: dict[int, str] = {}  # record node -> its function's name
        self.pending: list[Any] = []  # record nodes whose body is still to write
        self.src = _Source({
            "_Decimal": Decimal, "_Bad": _Bad, "_bad_keys": _bad_keys, "_bad_text": _bad_text, "_bad_type": _bad_type,
            "_bad_union": _bad_union, "_bad_union_object": _bad_union_object, "_bad_label": _bad_label,
            "_rfloat": _read_float, "_rb64": _read_b64, "_rdecnum": _read_decimal_number,
            "_DecErr": (InvalidOperation, ValueError, TypeError), "_pdecimal": parse_decimal,
            "_pdate": date_of, "_pdatetime": datetime_of, "_ptime": time_of,
            "_tf_date": parse_date, "_tf_datetime": parse_datetime, "_tf_time": parse_time,
        })

    def build(self, root: Any) -> Callable[[Any], Any]:
        if root.kind == "record":
            name = self.record_function(root)
        else:
            name = self.src.var("_jr_root")
            self.src.emit(0, f"def {name}(j):")
            self.src.emit(1, f"return {self.value(root, 'j', 1)}")
        while self.pending:  # written after their callers: recursive schemas work
            self._record_body(self.pending.pop())
        namespace = self.src.ns
        exec(compile("\n".join(self.src.lines), "<cdcflow JSON reader>", "exec"), namespace)  # noqa: S102
        return namespace[name]

    def record_function(self, node: Any) -> str:
        """The name of ``node``'s function (one per record node, named on first use)."""
        name = self.functions.get(id(node))
        if name is None:
            name = self.functions[id(node)] = self.src.var("_jr_rec")
            self.pending.append(node)
        return name

    def _record_body(self, node: Any) -> None:
        s = self.src
        names = s.const(frozenset(orig for orig, _, _ in node.fields), "_names")
        s.emit(0, f"def {self.functions[id(node)]}(j):")
        s.emit(1, "if type(j) is not dict:")
        s.emit(2, "_bad_type('an object', j)")
        s.emit(1, f"if len(j) != {len(node.fields)}:")
        s.emit(2, f"_bad_keys(j, {names})")
        fields = [(orig, field, s.var("x")) for orig, _, field in node.fields]
        if fields:
            s.emit(1, "try:")
            for orig, _, x in fields:
                s.emit(2, f"{x} = j[{orig!r}]")
            s.emit(1, "except KeyError:")
            s.emit(2, f"_bad_keys(j, {names})")
        for orig, field, x in fields:
            s.emit(1, "try:")  # free unless raised (3.11 exception tables)
            mark = len(s.lines)
            y = self.value(field, x, 2)
            if y != x:
                s.emit(2, f"j[{orig!r}] = {y}")
            if len(s.lines) == mark:
                s.lines.pop()  # nothing to check: no try
                continue
            s.emit(1, "except _Bad as b:")
            s.emit(2, f"b.path.append({'.' + orig!r})")
            s.emit(2, "raise")
        s.emit(1, "return j")

    def _typed(self, x: str, py: str, what: str, i: int, known: str | None) -> None:
        if known != py:
            self.src.emit(i, f"if type({x}) is not {py}:")
            self.src.emit(i + 1, f"_bad_type({what!r}, {x})")

    def value(self, node: Any, x: str, i: int, known: str | None = None) -> str:
        """Emit the check and restoration of JSON value ``x``; return the expression of the native value."""
        kind, s = node.kind, self.src
        if kind == "null":
            if known != "none":
                s.emit(i, f"if {x} is not None:")
                s.emit(i + 1, f"_bad_type('null', {x})")
            return "None"
        if kind in _TYPED:
            self._typed(x, *_TYPED[kind], i, known)
            return x
        if kind == "foreign":
            return x
        if kind == "record":
            s.emit(i, f"{self.record_function(node)}({x})")  # in place
            return x
        if kind in ("array", "map"):
            self._container(node, x, i, known)
            return x
        if kind == "union":
            return self._union(node, x, i)
        if kind in ("float", "double") and known == "float":
            return x
        y = s.var("y")
        if kind in ("float", "double"):
            if known == "int":
                s.emit(i, f"{y} = float({x})")
            elif known is None:
                s.emit(i, f"{y} = {x} if type({x}) is float else _rfloat({x})")
            else:
                s.emit(i, f"{y} = _rfloat({x})")
        elif kind in ("bytes", "fixed"):
            s.emit(i, f"{y} = _rb64({x})")
        elif kind in ("decimal", "decimal_text"):
            if known is None:
                s.emit(i, f"if type({x}) is str:")
            if known in (None, "str"):
                inner = i + (known is None)
                s.emit(inner, "try:")
                s.emit(inner + 1, f"{y} = _Decimal({x})")
                s.emit(inner, "except _DecErr:")
                s.emit(inner + 1, f"_bad_text(_pdecimal, {x})")
            if known is None:
                s.emit(i, "else:")
            if known != "str":
                s.emit(i + (known is None), f"{y} = _rdecnum({x})")
        elif kind in _TEXT_KINDS:
            what, _, fast = _TEXT_KINDS[kind]
            self._typed(x, "str", f"{what} text", i, known)
            s.emit(i, "try:")
            s.emit(i + 1, f"{y} = {fast}({x})")
            s.emit(i, "except (ValueError, TypeError):")
            s.emit(i + 1, f"_bad_text(_tf_{kind}, {x})")
        else:  # pragma: no cover
            raise AssertionError(f"unknown kind {kind}")
        return y

    def _container(self, node: Any, x: str, i: int, known: str | None) -> None:
        s = self.src
        is_map = node.kind == "map"
        py = "dict" if is_map else "list"
        if known != py:
            s.emit(i, f"if type({x}) is not {py}:")
            s.emit(i + 1, f"_bad_type({'an object' if is_map else 'an array'!r}, {x})")
        k, item = s.var("k"), s.var("x")
        s.emit(i, f"for {k}, {item} in {x}.items():" if is_map else f"for {k}, {item} in enumerate({x}):")
        s.emit(i + 1, "try:")
        mark = len(s.lines)
        e = self.value(node.values if is_map else node.items, item, i + 2)
        if e != item:
            s.emit(i + 2, f"{x}[{k}] = {e}")
        if len(s.lines) == mark:  # items need no check (foreign)
            s.emit(i + 2, "pass")
        s.emit(i + 1, "except _Bad as b:")
        s.emit(i + 2, f"b.path.append('.' + {k})" if is_map else f"b.path.append(f'[{{{k}}}]')")
        s.emit(i + 2, "raise")

    def _assign(self, y: str, node: Any, x: str, i: int, known: str | None = None) -> None:
        mark = len(self.src.lines)
        expr = self.value(node, x, i, known)
        if expr != y:
            self.src.emit(i, f"{y} = {expr}")
        elif len(self.src.lines) == mark:
            self.src.emit(i, "pass")

    def _union(self, node: Any, x: str, i: int) -> str:
        s = self.src
        branches = node.branches
        y = s.var("y")
        if _ambiguous(branches):  # Avro's JSON union form: {"<branch>": value}
            labels = s.const(sorted(b.branch for b in branches), "_labels")
            keyword = "if"
            if any(b.kind == "null" for b in branches):
                s.emit(i, f"if {x} is None:")
                s.emit(i + 1, f"{y} = None")
                keyword = "elif"
            s.emit(i, f"{keyword} type({x}) is not dict or len({x}) != 1:")
            s.emit(i + 1, f"_bad_union_object({labels}, {x})")
            s.emit(i, "else:")
            label, inner = s.var("label"), s.var("x")
            s.emit(i + 1, f"(({label}, {inner}),) = {x}.items()")
            keyword = "if"
            for b in branches:
                s.emit(i + 1, f"{keyword} {label} == {b.branch!r}:")
                self._assign(y, b, inner, i + 2)
                keyword = "elif"
            s.emit(i + 1, "else:")
            s.emit(i + 2, f"_bad_label({label}, {labels}, {x})")
            return y
        # Told apart by the JSON type: null, boolean, number (integer or float), string, object, array.
        by_group: dict[str, list] = {}
        for b in branches:
            by_group.setdefault(_group(b), []).append(b)
        groups = [("none", "null"), ("float", "float"), ("int", "integer" if "integer" in by_group else "float"),
                  ("str", "string" if "string" in by_group else "float"), ("bool", "boolean"), ("dict", "object"),
                  ("list", "array")]
        tests = [(known, by_group[group]) for known, group in groups if group in by_group]
        labels = s.const([b.branch for b in branches], "_labels")

        def test(known: str, type_of_x: str) -> str:
            return f"{x} is None" if known == "none" else f"{type_of_x} is {known}"

        if all(len(c) == 1 and _checked_by_type(c[0], known) for known, c in tests):
            # each branch is fully checked by its JSON type, say [null, long]: one test, the value as is
            s.emit(i, f"if not ({' or '.join(test(known, f'type({x})') for known, _ in tests)}):")
            s.emit(i + 1, f"_bad_union({labels}, {x})")
            return x
        t = s.var("t")
        s.emit(i, f"{t} = type({x})")
        keyword = "if"
        for known, candidates in tests:
            s.emit(i, f"{keyword} {test(known, t)}:")
            keyword = "elif"
            if len(candidates) == 1:
                self._assign(y, candidates[0], x, i + 1, known)
                continue
            inner_kw = "if"  # records told apart by their key sets
            for b in candidates:
                names = s.const(frozenset(orig for orig, _, _ in b.fields), "_names")
                s.emit(i + 1, f"{inner_kw} len({x}) == {len(b.fields)} and {names}.issuperset({x}):")
                self._assign(y, b, x, i + 2, known)
                inner_kw = "elif"
            s.emit(i + 1, "else:")
            self._assign(y, candidates[0], x, i + 2, known)
        if keyword == "if":
            s.emit(i, f"_bad_union({labels}, {x})")
        else:
            s.emit(i, "else:")
            s.emit(i + 1, f"_bad_union({labels}, {x})")
        return y


def _checked_by_type(node: Any, known: str) -> bool:
    """Does a JSON value of type ``known`` fit ``node`` as it is, with no further test?"""
    kind = node.kind
    if kind == "null" or kind == "foreign":
        return True
    if kind in _TYPED:
        return _TYPED[kind][0] == known
    return kind in ("float", "double") and known == "float"


class _JsonCode:
    """The writer and the generated reader of one schema."""

    __slots__ = ("codec", "write_fast", "read_fast", "plan")

    def __init__(self, codec: Codec):
        self.codec = codec
        self.write_fast: Callable[[Any], Any] = _json_writer(codec.root)
        self.read_fast: Callable[[Any], Any] = _ReaderGen().build(codec.root)
        self.plan: Any = _MISS  # the kernel's plan, built on first use (None: no plan)

    def write(self, value: Any) -> Any:
        """The JSON form of ``value``; the reference check's ConversionError (path, value) if it does not fit."""
        try:
            return self.write_fast(value)
        except ConversionError:
            raise
        except Exception:  # noqa: BLE001 - the reference check below says precisely what is wrong
            pass
        self.codec.prepare(value)
        raise ConversionError("the JSON writer refused a value its schema accepts", value=value)

    def read(self, j: Any) -> Any:
        """The native value of the freshly parsed JSON ``j`` (changed in place)."""
        try:
            return self.read_fast(j)
        except _Bad as b:
            raise ConversionError(b.message, path="$" + "".join(reversed(b.path)), value=b.value) from None


class _NoFit(ConversionError):
    """A value does not fit a candidate schema; the precise error is only worked out if no schema fits."""

    def __init__(self, code: _JsonCode, value: Any):
        super().__init__("value does not fit the schema")
        self.code = code
        self.value = value


_codes: dict[str, _JsonCode] = {}


def _code(codec: Codec) -> _JsonCode:
    code = _codes.get(codec.fingerprint)
    if code is None:
        if len(_codes) > 4096:
            _codes.clear()
        code = _codes[codec.fingerprint] = _JsonCode(codec)
    return code


def _attempt(codec: Codec, value: Any) -> Any:
    code = _code(codec)
    try:
        return code.write_fast(value)
    except ConversionError:
        raise
    except Exception:  # noqa: BLE001 - explained later, if no schema fits
        raise _NoFit(code, value) from None


# ---------------------------------------------------------------------------
# Records -> lines
# ---------------------------------------------------------------------------
class _Writer:
    """Writes the records of one batch. A record whose values fit the schemas its metadata names
    keeps its metadata dict; the writer of each named (subject, version) is looked up once per
    batch (and the last one per part remembered: a batch is mostly one table)."""

    __slots__ = ("refs", "_named", "_last", "_derived", "_plans")

    def __init__(self, refs: SchemaRefs):
        self.refs = refs
        self._named: dict[tuple[str | None, str | None], Callable | None] = {}
        self._plans: dict[tuple[str, str], Any] = {}  # (subject, version) -> kernel plan or None
        self._last = {KEY: (None, None, None), PAYLOAD: (None, None, None)}  # part -> (subject, version, writer)
        self._derived = {KEY: (None, None), PAYLOAD: (None, None)}  # part -> (codec, its writer)

    def _derived_fit(self, part: str, metadata: dict, values: tuple) -> tuple | None:
        """For metadata naming no schema of ``part``: (JSON forms, subject, version) of ``values`` with the
        schema ``SchemaRefs.attach`` would try first, when they all fit it; else None (``attach`` decides).

        Why: records that travelled with a derived schema arrive without a reference (readers drop
        it), so without this every record of a batch would go through ``attach``.
        """
        first = self.refs.first_derived(metadata, part)
        if first is None:
            return None
        codec, subject, version = first
        last_codec, w = self._derived[part]
        if codec is not last_codec:
            w = _code(codec).write_fast
            self._derived[part] = (codec, w)
        try:
            return [w(v) for v in values], subject, version
        except Exception:  # noqa: BLE001 - does not fit: attach tries the other recent schemas
            return None

    def _named_writer(self, part: str, subject: str | None, version: str | None) -> Callable | None:
        """The generated writer of the schema the metadata names; None if it names none or an unknown one."""
        w = self._named.get((subject, version), _MISS)
        if w is _MISS:
            w = None
            if subject and version:
                try:
                    w = _code(self.refs.codec(subject, version)).write_fast
                except SchemaError:
                    pass  # attach derives a schema (and says why not, if it cannot)
            self._named[(subject, version)] = w
        self._last[part] = (subject, version, w)
        return w

    def obj(self, r: Record) -> dict:
        metadata = r.metadata
        key, before, after = r.key, r.before, r.after
        copy: dict | None = None  # the metadata, copied once a reference changes
        derived: list[str] | None = None
        if type(key) is dict:
            subject, version = metadata.get(_KEY_SUBJECT), metadata.get(_KEY_VERSION)
            last_subject, last_version, w = self._last[KEY]
            if subject != last_subject or version != last_version:
                w = self._named_writer(KEY, subject, version)
            key_j = _MISS
            if w is not None:
                try:
                    key_j = w(key)
                except Exception:  # noqa: BLE001 - does not fit: attach picks another schema
                    pass
            elif subject is None and version is None:
                fit = self._derived_fit(KEY, metadata, (key,))
                if fit is not None:
                    copy, derived = dict(metadata), [KEY]
                    (key_j,), copy[_KEY_SUBJECT], copy[_KEY_VERSION] = fit
            if key_j is _MISS:
                copy, derived = dict(metadata), []
                (key_j,) = self._attach(copy, KEY, [key], derived, r.position, w is not None)
        else:
            key_j = None if key is None else b64(key)
        before_d, after_d = type(before) is dict, type(after) is dict
        if before_d or after_d:
            subject, version = metadata.get(_PAYLOAD_SUBJECT), metadata.get(_PAYLOAD_VERSION)
            last_subject, last_version, w = self._last[PAYLOAD]
            if subject != last_subject or version != last_version:
                w = self._named_writer(PAYLOAD, subject, version)
            fits = False
            if w is not None:
                try:
                    before_j = w(before) if before_d else None
                    after_j = w(after) if after_d else None
                    fits = True
                except Exception:  # noqa: BLE001 - does not fit: attach picks another schema
                    pass
            elif subject is None and version is None:
                sides = tuple(v for v in (before, after) if type(v) is dict)
                fit = self._derived_fit(PAYLOAD, metadata, sides)
                if fit is not None:
                    if copy is None:
                        copy, derived = dict(metadata), []
                    written, copy[_PAYLOAD_SUBJECT], copy[_PAYLOAD_VERSION] = fit
                    derived.append(PAYLOAD)
                    before_j = written[0] if before_d else None
                    after_j = written[-1] if after_d else None
                    fits = True
            if not fits:
                if copy is None:
                    copy, derived = dict(metadata), []
                sides = self._attach(copy, PAYLOAD, [v for v in (before, after) if type(v) is dict], derived,
                                     r.position, w is not None)
                before_j = sides[0] if before_d else None
                after_j = sides[-1] if after_d else None
            if not before_d:
                before_j = None if before is None else b64(before)
            if not after_d:
                after_j = None if after is None else b64(after)
        else:
            before_j = None if before is None else b64(before)
            after_j = None if after is None else b64(after)
        if copy is not None:
            mark_derived(copy, derived)
            metadata = copy
        position = r.position
        return {
            "position": b64(position) if position else "",
            "operation": _OPERATION_TEXT[r.operation],
            "metadata": metadata,
            "key": key_j,
            "payload": {"before": before_j, "after": after_j},
        }

    def line(self, r: Record) -> bytes:
        """The record's line, newline included (the kernel's handback)."""
        return orjson.dumps(self.obj(r), option=_APPEND_NEWLINE)

    def resolve(self, part_index: int, metadata: dict, subject: Any, version: Any) -> tuple | None:
        """For the kernel: (plan, derived reference as JSON object entries or None) of the schema
        ``obj`` would write key (0) or payload (1) with when its values fit, or None when ``obj``
        has to decide (no schema yet, an unknown one, no plan). The same choice as ``obj``: the
        named schema; with no reference at all, the derived one ``_derived_fit`` tries."""
        part = PAYLOAD if part_index else KEY
        if subject is None and version is None:
            first = self.refs.first_derived(metadata, part)
            if first is None:
                return None
            codec, subject, version = first
            plan = _plan_of(codec)
            if plan is None:
                return None
            subject_key, version_key = META_KEYS[part]
            return plan, orjson.dumps({subject_key: subject, version_key: version})[1:-1]
        if type(subject) is not str or type(version) is not str:
            return None  # metadata that is not str -> str: the record goes to obj anyway
        plan = self._plans.get((subject, version), _MISS)
        if plan is _MISS:
            plan = None
            if subject and version:
                try:
                    plan = _plan_of(self.refs.codec(subject, version))
                except SchemaError:
                    pass  # obj's attach derives a schema (or says why not)
            self._plans[(subject, version)] = plan
        return None if plan is None else (plan, None)

    def _attach(self, metadata: dict, part: str, values: list, derived: list, position: bytes,
                named_failed: bool) -> list:
        """Pick the schema (``SchemaRefs.attach``) and write the values with it; sets the reference."""
        try:
            try:
                written, subject, version, was_derived = self.refs.attach(
                    metadata, part, values, _attempt, named_failed)
            except _NoFit as e:  # even a derived schema refused: the reference check says why
                e.code.write(e.value)
                raise
        except ConversionError as e:
            raise in_context(e, f"record at position {position!r}: {part}") from None
        subject_key, version_key = META_KEYS[part]
        metadata[subject_key] = subject
        metadata[version_key] = version
        if was_derived:
            derived.append(part)
        return written


_MISS = object()


def _plain_obj(r: Record) -> dict:
    """A record without a schema store: structured data as plain JSON (no reference attached)."""
    try:
        key_j, before_j, after_j = (
            _plain_data(r.key, "key"), _plain_data(r.before, "payload.before"), _plain_data(r.after, "payload.after"))
    except ConversionError as e:
        raise in_context(e, f"record at position {r.position!r}") from None
    position = r.position
    return {
        "position": b64(position) if position else "",
        "operation": _OPERATION_TEXT[r.operation],
        "metadata": r.metadata,
        "key": key_j,
        "payload": {"before": before_j, "after": after_j},
    }


def _plain_data(value: Any, path: str) -> Any:
    if value is None:
        return None
    if type(value) is dict:
        return jsonable(value, path)
    return b64(value)


def _plain_line(r: Record) -> bytes:
    return orjson.dumps(_plain_obj(r), option=_APPEND_NEWLINE)


def dumps_record(record: Record, store: SchemaStore | None = None) -> bytes:
    """One record as one JSON line (without the newline)."""
    if _kernel is not None:
        return _kernel_lines([record], store)[:-1]
    if store is None:
        return orjson.dumps(_plain_obj(record))
    return orjson.dumps(_Writer(refs_for(store)).obj(record))


def dumps_lines(records: Iterable[Record], store: SchemaStore | None = None) -> bytes:
    """Records as JSON lines, each ending in a newline. Without a store no schema is attached."""
    if type(records) is not list and type(records) is not tuple:
        records = list(records)
    if _kernel is not None:
        return _kernel_lines(records, store)
    obj = _plain_obj if store is None else _Writer(refs_for(store)).obj
    dumps, newline, chunk = orjson.dumps, _APPEND_NEWLINE, _CHUNK
    # One orjson call per record, joined per chunk: the lines of a chunk are freed before the
    # next is written, so their memory is reused rather than the whole batch's held twice.
    return b"".join([b"".join([dumps(obj(r), option=newline) for r in records[i:i + chunk]])
                     for i in range(0, len(records), chunk)])


def dumps_each(records: Iterable[Record], store: SchemaStore | None = None) -> list[bytes]:
    """One JSON line per record (no newline), written as one batch: ``dumps_record`` for each,
    without its per-call cost (for destinations that send records one by one, e.g. Kafka)."""
    return dumps_lines(records, store).split(b"\n")[:-1]  # JSON text escapes every newline


_APPEND_NEWLINE = orjson.OPT_APPEND_NEWLINE
_CHUNK = 64  # records per joined chunk (any size from 16 to 1024 costs about the same)


# ---------------------------------------------------------------------------
# The compiled writer (runtime/convert/_jsonform.c)
# ---------------------------------------------------------------------------
# What the kernel reads records with: the Record type (its slots), the operations and their JSON,
# the metadata keys of the schema references, the derived mark and the collection.
_KERNEL_CONFIG: Any = None
if _kernel is not None:
    try:
        _KERNEL_CONFIG = _kernel.Config((
            Record, tuple(Operation), tuple(orjson.dumps(op.text) for op in Operation),
            _KEY_SUBJECT, _KEY_VERSION, _PAYLOAD_SUBJECT, _PAYLOAD_VERSION, META_SCHEMA_DERIVED, _COLLECTION,
        ))
    except TypeError:  # a Record without the slot layout the kernel reads: the Python path writes
        _kernel = None


def _kernel_lines(records: list | tuple, store: SchemaStore | None) -> bytes:
    """The kernel's lines of the batch; it hands a record it is not sure of back to the Python
    writer (its line goes in the same place)."""
    if store is None:
        return _kernel.dumps(records, _KERNEL_CONFIG, None, _plain_line)
    writer = _Writer(refs_for(store))
    return _kernel.dumps(records, _KERNEL_CONFIG, writer.resolve, writer.line)


def _plan_of(codec: Codec) -> Any:
    """The kernel's plan of the codec's schema (cached with its generated writer); None if none."""
    code = _code(codec)
    plan = code.plan
    if plan is _MISS:
        try:
            plan = _kernel_plan(codec.root)
        except (ValueError, TypeError, OverflowError):  # a schema the plan cannot hold: Python writes
            plan = None
        code.plan = plan
    return plan


def _kernel_plan(root: Any) -> Any:
    """The writer plan of the node tree under ``root``: flat tuple entries, children as indexes
    (a recursive record is plain data). Each entry takes exactly the values the Python writer
    (``_json_writer``) takes, and a union tests its branches in the Python writer's order."""
    k = _kernel
    simple = {
        "null": k.K_NULL, "boolean": k.K_BOOLEAN, "int": k.K_INT, "long": k.K_LONG, "double": k.K_DOUBLE,
        "bytes": k.K_BYTES, "string": k.K_STRING, "decimal_text": k.K_DECIMAL_TEXT, "date": k.K_DATE,
        "datetime": k.K_DATETIME, "time": k.K_TIME, "foreign": k.K_FOREIGN,
    }

    def entry(node: Any, visit: Callable[[Any], int]) -> tuple:
        kind = node.kind
        if kind in simple:
            return (simple[kind],)
        if kind == "bigint":
            precision = int(node.avro.get("precision") or 0)
            return (k.K_BIGINT, max(precision, 0), 10 ** precision if precision > 0 else None)
        if kind == "decimal":
            return (k.K_DECIMAL, int(node.avro["precision"]), int(node.avro.get("scale", 0)))
        if kind == "enum":
            return (k.K_ENUM, frozenset(node.avro["symbols"]))
        if kind == "fixed":
            return (k.K_FIXED, int(node.avro["size"]))
        if kind == "record":
            names = tuple(orig for orig, _, _ in node.fields)
            if any(type(name) is not str for name in names):
                return (k.K_PASS,)
            return (k.K_RECORD, names, tuple(orjson.dumps(name) + b":" for name in names),
                    tuple(visit(f) for _, _, f in node.fields))
        if kind == "array":
            return (k.K_ARRAY, visit(node.items))
        if kind == "map":
            return (k.K_MAP, visit(node.values))
        if kind == "union":
            ordered, catch_all = union_branches(node)
            if catch_all is not None:  # rare: Python writes it
                return (k.K_PASS,)
            labels = None
            if _ambiguous(node.branches):
                labels = tuple(b"" if b.kind == "null" else b"{" + orjson.dumps(b.branch) + b":" for b in ordered)
            return (k.K_UNION, tuple(visit(b) for b in ordered), labels)
        return (k.K_PASS,)  # Avro float (float32 exactness) and kinds the kernel does not know

    nodes, root_index = _flat_plan(root, entry)
    return k.Plan(nodes, root_index)


def _flat_plan(root: Any, entry: Callable[[Any, Callable[[Any], int]], tuple]) -> tuple[tuple, int]:
    """A kernel plan's node table: ``entry(node, visit)`` for every node under ``root``, children
    referred to by the index ``visit(child)`` returns, and the root's index.

    Why flat: a recursive record becomes plain data (no reference cycle through the kernel object).
    """
    entries: list[tuple] = []
    index: dict[int, int] = {}

    def visit(node: Any) -> int:
        at = index.get(id(node))
        if at is None:
            at = index[id(node)] = len(entries)
            entries.append(())  # reserved first: a recursive record refers to its own index
            entries[at] = entry(node, visit)
        return at

    root_index = visit(root)
    return tuple(entries), root_index


# ---------------------------------------------------------------------------
# Lines -> records
# ---------------------------------------------------------------------------
class _Reader:
    """Reads the records of one batch; caches the reader of each (subject, version) the metadata names."""

    __slots__ = ("refs", "_named")

    def __init__(self, refs: SchemaRefs | None):
        self.refs = refs
        self._named: dict[tuple[str, str], Callable] = {}

    def _data(self, value: Any, metadata: dict, subject_key: str, version_key: str, path: str) -> Any:
        """Key or payload side from its JSON: None, raw bytes from base64, or a restored dict."""
        t = type(value)
        if t is str:
            return unb64(value, path) if value else b""
        if t is not dict:
            raise ConversionError(f"data must be an object, a base64 string or null, not {t.__name__}", path=path)
        subject = metadata.get(subject_key)
        if self.refs is None or not subject:
            return value
        version = metadata.get(version_key, "-1")
        read = self._named.get((subject, version))
        if read is None:
            read = self._named[(subject, version)] = _code(self.refs.codec(subject, version)).read_fast
        try:
            return read(value)
        except _Bad as b:
            error = ConversionError(b.message, path="$" + "".join(reversed(b.path)), value=b.value)
        raise in_context(error, path) from None

    def record(self, obj: Any) -> Record:
        if type(obj) is not dict:
            raise ConversionError(f"a record must be a JSON object, not {type(obj).__name__}")
        get = obj.get
        position = get("position")
        position = b"" if position is None or position == "" else _unb64(position, "position")
        op_text = get("operation", "create")
        operation = _OPERATIONS.get(op_text) if type(op_text) is str else None
        if operation is None:
            raise ConversionError(f"unknown operation {op_text!r}", path="operation", value=op_text)
        metadata = get("metadata") or {}
        if type(metadata) is not dict:
            raise ConversionError("metadata must be an object of strings", path="metadata")
        try:
            "".join(metadata.values())  # TypeError unless every value is a string (JSON: exactly str)
        except TypeError:
            raise ConversionError("metadata must be an object of strings", path="metadata") from None
        payload = get("payload") or {}
        if type(payload) is not dict:
            raise ConversionError("payload must be an object with before/after", path="payload")
        derived = pop_derived(metadata) if META_SCHEMA_DERIVED in metadata else ()
        key = get("key")
        if key is not None:
            key = self._data(key, metadata, _KEY_SUBJECT, _KEY_VERSION, "key")
        before = payload.get("before")
        if before is not None:
            before = self._data(before, metadata, _PAYLOAD_SUBJECT, _PAYLOAD_VERSION, "payload.before")
        after = payload.get("after")
        if after is not None:
            after = self._data(after, metadata, _PAYLOAD_SUBJECT, _PAYLOAD_VERSION, "payload.after")
        if derived:
            drop_refs(metadata, derived)
        return Record(position, operation, metadata, key, before, after)

    def line(self, line: bytes, line_no: int, big_ints: bool = True) -> Record:
        """``big_ints``: the line may hold an integer orjson cannot read exactly (see :func:`_may_hold_big_ints`)."""
        try:
            obj = json.loads(line) if big_ints and _may_hold_big_ints(line) else orjson.loads(line)
        except ValueError as e:
            raise ConversionError(f"line {line_no}: invalid JSON: {e}") from None
        try:
            return self.record(obj)
        except ConversionError as e:
            raise in_context(e, f"line {line_no}") from None
        except SchemaError as e:
            raise SchemaError(f"line {line_no}: {e}") from None


# orjson reads integers past 64 bits as floats, so text that may hold one is read with json
# instead. A JSON number starts the text or follows ``:``, ``,``, ``[`` or whitespace, maybe with
# a minus sign. The test maps every byte to its class (digit "0", separator "S") and searches
# the result for runs of 19+ digits (no regular expression over every digit); only such a run
# that starts a number is read, and counts if it is past uint64 (or below int64). Digits inside
# strings follow a quote or a letter, so nanosecond timestamps in metadata cost nothing.
_NUMBER_CLASSES = bytes(
    ord("0") if c in b"0123456789" else ord("S") if c in b":,[ \t\r\n" else c if c == ord("-") else ord("x")
    for c in range(256)
)
_LONG_RUN = b"0" * 19
_SEPARATOR = ord("S")
_DIGIT_RUN = re.compile(rb"[0-9]+")


def _may_hold_big_ints(data: bytes) -> bool:
    classes = data.translate(_NUMBER_CLASSES)
    i = classes.find(_LONG_RUN)
    while i >= 0:
        negative = i > 0 and classes[i - 1] == 45  # "-"
        start = i - negative
        run = _DIGIT_RUN.match(data, i)
        if start == 0 or classes[start - 1] == _SEPARATOR:  # a number, not digits inside a string
            if int(run.group()) > (-INT64_MIN if negative else UINT64_MAX):
                return True
        i = classes.find(_LONG_RUN, run.end())
    return False


def _unb64(text: Any, path: str) -> bytes:
    if type(text) is not str:
        raise ConversionError(f"expected a base64 string, got {type(text).__name__}", path=path)
    return unb64(text, path)


def loads_record(line: bytes | str, store: SchemaStore | None = None, line_no: int = 1) -> Record:
    """One record from one JSON line; errors name ``line_no``."""
    if isinstance(line, str):
        line = line.encode()
    return _Reader(refs_for(store) if store is not None else None).line(line, line_no)


def loads_lines(data: bytes | str, store: SchemaStore | None = None) -> list[Record]:
    """Records from JSON lines (blank lines skipped); errors name the 1-based line number."""
    if isinstance(data, str):
        data = data.encode()
    read = _Reader(refs_for(store) if store is not None else None).line
    big_ints = _may_hold_big_ints(data)  # once for the batch; then line by line only if it may
    return [read(line, i, big_ints) for i, line in enumerate(data.split(b"\n"), 1) if line and not line.isspace()]


# ---------------------------------------------------------------------------
# Batch messages' bytes straight to lines (a standalone destination plugin)
# ---------------------------------------------------------------------------
#: the JSON of each operation, by its protobuf number
_WIRE_OPERATION_TEXTS = tuple(orjson.dumps(op.text) for op in Operation)


def _wire_metadata_json(block: bytes) -> bytes | None:
    """The kernel's ``metadata_json``: the JSON object of the metadata in ``block`` (map entries),
    parsed as ``from_wire`` parses it; None when ``from_wire`` would not keep it as it is (a key or
    payload schema subject: it decodes the data with that schema) or refuses it."""
    try:
        metadata = _metadata_of(block) if block else {}
    except ValueError:  # upb refuses it (bad UTF-8, a torn entry): from_wire decides
        return None
    if _KEY_SUBJECT in metadata or _PAYLOAD_SUBJECT in metadata:
        return None
    return orjson.dumps(metadata)


def dumps_wire(message: bytes) -> tuple[bytes, bytes] | None:
    """A batch message's records as JSON lines without building them, or None.

    ``message``: the bytes of a batch message (``Destination.Run.Request``: records in field 1).
    Returns ``(dumps_lines(from_wire(message, store), store), encode_acks(positions))`` byte for
    byte (any store: raw data under metadata naming no schema never consults it), the second
    being the ``Destination.Run.Response`` acknowledging every record in order
    (``cdcflow.standalone.framing.encode_acks``). Returns None, for the caller to convert the
    message with ``from_wire`` and ``dumps_lines``, when the kernel is not built or the message
    is not the plain shape: structured data, a schema reference in the metadata, unknown or
    repeated fields, malformed bytes, metadata upb refuses.
    """
    if _kernel is None:
        return None
    return _kernel.dumps_wire(message, _WIRE_OPERATION_TEXTS, _wire_metadata_json)
