"""Conduit's JSON form of records: one JSON object per line.

``{"position": <base64>, "operation": "create|update|delete|snapshot", "metadata": {...},
"key": ..., "payload": {"before": ..., "after": ...}}`` — raw data is a base64
string, structured data an object, absent data ``null``.

Values JSON has no type for are written as text: bytes as base64, Decimal
keeping its scale (``"1.50"``), dates/times as TiDB text (``2020-02-20``,
``2020-02-20 02:20:20.123456``, ``-838:59:59``), NaN/±Infinity as
``"NaN"``/``"Infinity"``/``"-Infinity"``; ints are exact JSON integers of any size.

Lossless: with a schema store, the writer attaches the key/payload schema
reference exactly as the protobuf form does (:mod:`cdcflow.convert.schemaref`)
and the reader restores bytes, Decimal, dates, times and floats from it.
Without a store, or for data without a reference, the reader returns plain
JSON types. A union whose branches JSON cannot tell apart (say text and bytes
in one list) is written in Avro's JSON union form ``{"bytes": "..."}``.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any, Callable, Iterable

import orjson

from ..avro_values import Codec, INT64_MIN
from ..errors import ConversionError, SchemaError
from ..record import Operation, Record
from ..schemas import SchemaStore
from .schemaref import (
    KEY,
    META_KEYS,
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
    parse_date,
    parse_datetime,
    parse_decimal,
    parse_time,
    unb64,
)

UINT64_MAX = (1 << 64) - 1
_NONFINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_BIG_INT = re.compile(rb"\d{19}")  # orjson reads integers past 64 bits as floats; such lines use json


# ---------------------------------------------------------------------------
# Values -> JSON
# ---------------------------------------------------------------------------
def jsonable(value: Any, path: str = "$") -> Any:
    """The value with only JSON types (orjson ``Fragment`` for ints past 64 bits)."""
    t = type(value)
    if value is None or t is str or t is bool:
        return value
    if t is int:
        return value if INT64_MIN <= value <= UINT64_MAX else orjson.Fragment(str(value).encode())
    if t is float:
        if math.isfinite(value):
            return value
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
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


# ---------------------------------------------------------------------------
# Schema-guided JSON plans (compiled once per codec)
# ---------------------------------------------------------------------------
class _Bad(Exception):
    def __init__(self, message: str, value: Any = None):
        self.message = message
        self.value = value
        self.path: list[str] = []


_GROUP = {
    "null": "null", "boolean": "boolean", "long": "integer", "int": "integer", "bigint": "integer",
    "double": "float", "float": "float", "record": "object", "map": "object", "array": "array",
}  # everything else is written as a JSON string


def _group(node: Any) -> str:
    return _GROUP.get(node.kind, "string")


def _ambiguous(branches: list) -> bool:
    groups = [_group(b) for b in branches if b.kind != "null"]
    if len(groups) != len(set(groups)):
        objects = [b for b in branches if _group(b) == "object"]
        if groups.count("object") > 1 and all(b.kind == "record" for b in objects):
            keysets = [frozenset(orig for orig, _, _ in b.fields) for b in objects]
            others = [g for g in groups if g != "object"]
            return len(set(keysets)) != len(keysets) or len(others) != len(set(others))
        return True
    return "float" in groups and "string" in groups  # NaN is written as text


class _JsonPlan:
    """``write(native) -> json-able`` and ``read(json) -> native`` for one schema."""

    def __init__(self, codec: Codec):
        self._memo: dict[int, tuple[Callable, Callable]] = {}
        self.guided = False  # does writing need the schema (an ambiguous union)?
        self._write, self._read = self._compile(codec.root)

    def write(self, value: Any) -> Any:
        return self._write(value) if self.guided else jsonable(value)

    def read(self, value: Any) -> Any:
        try:
            return self._read(value)
        except _Bad as b:
            raise ConversionError(b.message, path="$" + "".join(reversed(b.path)), value=b.value) from None

    def _compile(self, node: Any) -> tuple[Callable, Callable]:
        hit = self._memo.get(id(node))
        if hit is not None:
            return hit
        kind = node.kind
        if kind == "record":
            # placeholder first: recursive schemas refer back to themselves
            cell: list = []
            self._memo[id(node)] = (lambda v: cell[0](v), lambda j: cell[1](j))
            cell.extend(self._record(node))
            self._memo[id(node)] = (cell[0], cell[1])
            return cell[0], cell[1]
        if kind == "array":
            item_w, item_r = self._compile(node.items)
            out = (_array_writer(item_w), _array_reader(item_r))
        elif kind == "map":
            val_w, val_r = self._compile(node.values)
            out = (_map_writer(val_w), _map_reader(val_r))
        elif kind == "union":
            out = self._union(node)
        else:
            out = (jsonable, _SCALAR_READERS.get(kind, _read_any))
        self._memo[id(node)] = out
        return out

    def _record(self, node: Any) -> tuple[Callable, Callable]:
        fields = [(orig, *self._compile(f)) for orig, _, f in node.fields]
        names = frozenset(orig for orig, _, _ in fields)

        def write(v: dict) -> dict:
            return {orig: w(v[orig]) for orig, w, _ in fields}

        def read(j: Any) -> dict:
            if type(j) is not dict:
                raise _Bad(f"expected an object, got {type(j).__name__}", j)
            if len(j) != len(names) or not names.issuperset(j):
                raise _Bad(f"object keys {sorted(j)} do not match the schema's {sorted(names)}", j)
            out = {}
            for orig, _, r in fields:
                try:
                    out[orig] = r(j[orig])
                except _Bad as b:
                    b.path.append(f".{orig}")
                    raise
            return out

        return write, read

    def _union(self, node: Any) -> tuple[Callable, Callable]:
        branches = node.branches
        compiled = [(b, *self._compile(b)) for b in branches]
        if _ambiguous(branches):
            self.guided = True
            by_label = {b.branch: r for b, _, r in compiled}

            def write(v: Any) -> Any:
                for b, w, _ in compiled:
                    try:
                        b.enc(v)
                    except Exception:
                        continue
                    return None if b.kind == "null" else {b.branch: w(v)}
                raise ConversionError(f"value fits no branch of {[b.branch for b in branches]}", value=v)

            def read(j: Any) -> Any:
                if j is None and "null" in by_label:
                    return None
                if type(j) is not dict or len(j) != 1:
                    raise _Bad(f"expected a one-key union object naming one of {sorted(by_label)}", j)
                ((label, inner),) = j.items()
                r = by_label.get(label)
                if r is None:
                    raise _Bad(f"union branch {label!r} is not one of {sorted(by_label)}", j)
                return r(inner)

            return write, read

        by_group: dict[str, list] = {}
        for b, _, r in compiled:
            by_group.setdefault(_group(b), []).append((b, r))

        def write(v: Any) -> Any:
            for b, w, _ in compiled:
                try:
                    b.enc(v)
                except Exception:
                    continue
                return w(v)
            raise ConversionError(f"value fits no branch of {[b.branch for b in branches]}", value=v)

        def read(j: Any) -> Any:
            t = type(j)
            if j is None:
                group = "null"
            elif t is bool:
                group = "boolean"
            elif t is int:
                group = "integer" if "integer" in by_group else "float"
            elif t is float:
                group = "float"
            elif t is str:
                group = "string" if "string" in by_group else "float"
            elif t is dict:
                group = "object"
            elif t is list:
                group = "array"
            else:
                group = "?"
            candidates = by_group.get(group)
            if not candidates:
                raise _Bad(f"JSON {t.__name__} fits no branch of {[b.branch for b in branches]}", j)
            if len(candidates) > 1:  # records told apart by their key sets
                for b, r in candidates:
                    if b.kind == "record" and len(j) == len(b.fields) and all(o in j for o, _, _ in b.fields):
                        return r(j)
            return candidates[0][1](j)

        return write, read


def _array_writer(item_w: Callable) -> Callable:
    return lambda v: [item_w(x) for x in v]


def _array_reader(item_r: Callable) -> Callable:
    def read(j: Any) -> list:
        if type(j) is not list:
            raise _Bad(f"expected an array, got {type(j).__name__}", j)
        out = []
        for i, x in enumerate(j):
            try:
                out.append(item_r(x))
            except _Bad as b:
                b.path.append(f"[{i}]")
                raise
        return out

    return read


def _map_writer(val_w: Callable) -> Callable:
    return lambda v: {k: val_w(x) for k, x in v.items()}


def _map_reader(val_r: Callable) -> Callable:
    def read(j: Any) -> dict:
        if type(j) is not dict:
            raise _Bad(f"expected an object, got {type(j).__name__}", j)
        out = {}
        for k, x in j.items():
            try:
                out[k] = val_r(x)
            except _Bad as b:
                b.path.append(f".{k}")
                raise
        return out

    return read


def _typed(expected: type, what: str) -> Callable:
    def read(j: Any) -> Any:
        if type(j) is not expected:
            raise _Bad(f"expected {what}, got {type(j).__name__}", j)
        return j

    return read


def _read_null(j: Any) -> None:
    if j is not None:
        raise _Bad(f"expected null, got {type(j).__name__}", j)
    return None


def _read_float(j: Any) -> float:
    t = type(j)
    if t is float:
        return j
    if t is int:
        return float(j)
    if t is str and j in _NONFINITE_TEXT:
        return _NONFINITE_TEXT[j]
    raise _Bad(f"expected a number, got {t.__name__}", j)


def _text_reader(parse: Callable[[str, str], Any], what: str) -> Callable:
    def read(j: Any) -> Any:
        if type(j) is not str:
            raise _Bad(f"expected {what} text, got {type(j).__name__}", j)
        try:
            return parse(j, "")
        except ConversionError as e:
            raise _Bad(str(e), j) from None

    return read


def _read_decimal(j: Any) -> Decimal:
    t = type(j)
    if t is str:
        try:
            return parse_decimal(j)
        except ConversionError as e:
            raise _Bad(str(e), j) from None
    if t is int or t is float:  # a peer wrote a JSON number
        return Decimal(str(j))
    raise _Bad(f"expected decimal text, got {t.__name__}", j)


def _read_any(j: Any) -> Any:
    return j


_SCALAR_READERS: dict[str, Callable] = {
    "null": _read_null,
    "boolean": _typed(bool, "a boolean"),
    "long": _typed(int, "an integer"),
    "int": _typed(int, "an integer"),
    "bigint": _typed(int, "an integer"),
    "double": _read_float,
    "float": _read_float,
    "string": _typed(str, "a string"),
    "enum": _typed(str, "a string"),
    "bytes": _text_reader(unb64, "base64"),
    "fixed": _text_reader(unb64, "base64"),
    "decimal": _read_decimal,
    "decimal_text": _read_decimal,
    "date": _text_reader(parse_date, "date"),
    "datetime": _text_reader(parse_datetime, "datetime"),
    "time": _text_reader(parse_time, "TIME"),
}

_plans: dict[str, _JsonPlan] = {}


def _plan(codec: Codec) -> _JsonPlan:
    plan = _plans.get(codec.fingerprint)
    if plan is None:
        if len(_plans) > 4096:
            _plans.clear()
        plan = _plans[codec.fingerprint] = _JsonPlan(codec)
    return plan


def _check(codec: Codec, value: Any) -> Codec:
    codec.prepare(value)
    return codec


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------
def _record_obj(r: Record, refs: SchemaRefs | None) -> dict:
    metadata = r.metadata
    key, before, after = r.key, r.before, r.after
    if refs is not None and (type(key) is dict or type(before) is dict or type(after) is dict):
        metadata = dict(metadata)
        derived: list[str] = []
        key_j = _side(refs, metadata, KEY, [key], derived, r.position)[0] if type(key) is dict else _raw(key)
        dict_sides = [v for v in (before, after) if type(v) is dict]
        converted = iter(_side(refs, metadata, PAYLOAD, dict_sides, derived, r.position) if dict_sides else ())
        before_j = next(converted) if type(before) is dict else _raw(before)
        after_j = next(converted) if type(after) is dict else _raw(after)
        mark_derived(metadata, derived)
    else:
        try:
            key_j, before_j, after_j = _plain_data(key, "key"), _plain_data(before, "payload.before"), _plain_data(
                after, "payload.after"
            )
        except ConversionError as e:
            raise in_context(e, f"record at position {r.position!r}") from None
    return {
        "position": b64(r.position),
        "operation": r.operation.text,
        "metadata": metadata,
        "key": key_j,
        "payload": {"before": before_j, "after": after_j},
    }


def _raw(value: Any) -> Any:
    return None if value is None else b64(value)


def _plain_data(value: Any, path: str) -> Any:
    if value is None:
        return None
    if type(value) is dict:
        return jsonable(value, path)
    return b64(value)


def _side(refs: SchemaRefs, metadata: dict, part: str, values: list, derived: list, position: bytes) -> list:
    try:
        codecs, subject, version, was_derived = refs.attach(metadata, part, values, _check)
    except ConversionError as e:
        raise in_context(e, f"record at position {position!r}: {part}") from None
    subject_key, version_key = META_KEYS[part]
    metadata[subject_key] = subject
    metadata[version_key] = version
    if was_derived:
        derived.append(part)
    plan = _plan(codecs[0])
    return [plan.write(v) for v in values]


def dumps_record(record: Record, store: SchemaStore | None = None) -> bytes:
    """One record as one JSON line (without the newline)."""
    return orjson.dumps(_record_obj(record, refs_for(store) if store is not None else None))


def dumps_lines(records: Iterable[Record], store: SchemaStore | None = None) -> bytes:
    """Records as JSON lines, each ending in a newline. Without a store no schema is attached."""
    refs = refs_for(store) if store is not None else None
    dumps = orjson.dumps
    return b"".join([dumps(_record_obj(r, refs)) + b"\n" for r in records])


def loads_record(line: bytes | str, store: SchemaStore | None = None, line_no: int = 1) -> Record:
    """One record from one JSON line; errors name ``line_no``."""
    if isinstance(line, str):
        line = line.encode()
    return _load(line, refs_for(store) if store is not None else None, line_no)


def loads_lines(data: bytes | str, store: SchemaStore | None = None) -> list[Record]:
    """Records from JSON lines (blank lines skipped); errors name the 1-based line number."""
    if isinstance(data, str):
        data = data.encode()
    refs = refs_for(store) if store is not None else None
    out = []
    for i, line in enumerate(data.split(b"\n"), 1):
        if line.strip():
            out.append(_load(line, refs, i))
    return out


def _load(line: bytes, refs: SchemaRefs | None, line_no: int) -> Record:
    try:
        obj = json.loads(line) if _BIG_INT.search(line) else orjson.loads(line)
    except ValueError as e:
        raise ConversionError(f"line {line_no}: invalid JSON: {e}") from None
    try:
        return _record_from_obj(obj, refs)
    except ConversionError as e:
        raise in_context(e, f"line {line_no}") from None
    except SchemaError as e:
        raise SchemaError(f"line {line_no}: {e}") from None


def _record_from_obj(obj: Any, refs: SchemaRefs | None) -> Record:
    if type(obj) is not dict:
        raise ConversionError(f"a record must be a JSON object, not {type(obj).__name__}")
    position = obj.get("position")
    position = b"" if position is None else _unb64(position, "position")
    op_text = obj.get("operation", "create")
    try:
        operation = Operation.from_text(op_text)
    except (ValueError, TypeError):
        raise ConversionError(f"unknown operation {op_text!r}", path="operation", value=op_text) from None
    metadata = obj.get("metadata") or {}
    if type(metadata) is not dict or not all(type(v) is str for v in metadata.values()):
        raise ConversionError("metadata must be an object of strings", path="metadata")
    payload = obj.get("payload") or {}
    if type(payload) is not dict:
        raise ConversionError("payload must be an object with before/after", path="payload")
    derived = pop_derived(metadata)
    key = _data_from_json(obj.get("key"), metadata, KEY, refs, "key")
    before = _data_from_json(payload.get("before"), metadata, PAYLOAD, refs, "payload.before")
    after = _data_from_json(payload.get("after"), metadata, PAYLOAD, refs, "payload.after")
    drop_refs(metadata, derived)
    return Record(position, operation, metadata, key, before, after)


def _unb64(text: Any, path: str) -> bytes:
    if type(text) is not str:
        raise ConversionError(f"expected a base64 string, got {type(text).__name__}", path=path)
    return unb64(text, path)


def _data_from_json(value: Any, metadata: dict, part: str, refs: SchemaRefs | None, path: str) -> Any:
    if value is None:
        return None
    if type(value) is str:
        return unb64(value, path)
    if type(value) is not dict:
        raise ConversionError(f"data must be an object, a base64 string or null, not {type(value).__name__}", path=path)
    subject_key, version_key = META_KEYS[part]
    subject = metadata.get(subject_key)
    if refs is None or not subject:
        return value
    codec = refs.codec(subject, metadata.get(version_key, "-1"))
    try:
        return _plan(codec).read(value)
    except ConversionError as e:
        raise in_context(e, f"{path}") from None
