"""The one mapping between native record values and Avro.

Native values (see ``cdcflow.record``) are ints of any size, ``Decimal`` (scale
kept), ``bytes``, ``str``, ``float``, ``bool``, ``None``, lists, dicts, naive
``datetime.date``/``datetime.datetime`` and ``datetime.timedelta`` (TiDB TIME).
Avro has no type for several of these, so a few are marked with the field
property ``"cdcflow.type"`` and restored on decode:

======================  ==============================================================
kind                    Avro type
======================  ==============================================================
null, boolean, string   the Avro primitive
long                    ``long`` (ints within int64)
bigint                  ``bytes`` decimal, scale 0, ``"cdcflow.type": "int"`` (any int)
double                  ``double`` (every float; never Avro ``float``)
bytes                   ``bytes``
decimal(p, s)           ``bytes`` decimal(p, s); the value's scale must equal ``s``
decimal_text            ``string`` + ``"cdcflow.type": "decimal"`` (NaN, Infinity, -0,
                        positive exponents: Decimals Avro's decimal cannot hold exactly)
date                    ``int`` / ``date``
datetime                ``long`` / ``local-timestamp-micros`` (naive)
time                    ``long`` + ``"cdcflow.type": "time-micros"`` (signed microseconds)
======================  ==============================================================

Nested dicts are nested records; a field name Avro does not allow is sanitized
and the original kept in the field property ``"cdcflow.name"``. Lists are arrays
of the union of their element types.

A :class:`Codec` is compiled once per schema: it checks every value strictly
(``True`` is not a ``long``, ``1`` is not a ``double``, ``Decimal('1.5')`` does
not fit scale 2), so an encode that succeeds is lossless, and an encode that
raises :class:`~cdcflow.errors.ConversionError` tells the caller to derive a
schema instead.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import re
import threading
from decimal import Decimal
from typing import Any, Callable

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from ..errors import ConversionError, SchemaError
from .textforms import GoTime

CDCFLOW_TYPE = "cdcflow.type"
CDCFLOW_NAME = "cdcflow.name"

KINDS = (
    "null", "boolean", "long", "bigint", "double", "string", "bytes",
    "decimal", "decimal_text", "date", "datetime", "time",
)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
BIGINT_MIN_PRECISION = 20  # 2**64-1 (BIGINT UNSIGNED) has 20 digits
DECIMAL_MIN_PRECISION = 65  # TiDB's widest DECIMAL; a stable precision keeps derived schemas stable
_US = _dt.timedelta(microseconds=1)


# ---------------------------------------------------------------------------
# Types per kind
# ---------------------------------------------------------------------------
def avro_type(kind: str, **params: Any) -> Any:
    """The Avro type cdcflow uses for values of ``kind`` (see the module table).

    ``decimal`` takes ``precision`` and ``scale``; ``bigint`` takes an optional
    ``precision`` (digits, default 20).
    """
    if kind in ("null", "boolean", "long", "double", "string", "bytes"):
        return kind
    if kind == "bigint":
        precision = max(int(params.get("precision") or BIGINT_MIN_PRECISION), 1)
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 0, CDCFLOW_TYPE: "int"}
    if kind == "decimal":
        precision, scale = int(params["precision"]), int(params.get("scale", 0))
        if precision < 1 or not 0 <= scale <= precision:
            raise SchemaError(f"invalid decimal({precision}, {scale})")
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    if kind == "decimal_text":
        return {"type": "string", CDCFLOW_TYPE: "decimal"}
    if kind == "date":
        return {"type": "int", "logicalType": "date"}
    if kind == "datetime":
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if kind == "time":
        return {"type": "long", CDCFLOW_TYPE: "time-micros"}
    raise SchemaError(f"unknown value kind {kind!r}; expected one of {KINDS}")


def value_type(value: Any, path: str = "") -> Any:
    """The Avro type of one native scalar or container value (nested names not yet unique)."""
    return _Deriver().type_of(value, path or "$", "Value")


# ---------------------------------------------------------------------------
# Schema derivation
# ---------------------------------------------------------------------------
_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NAME_BAD_CHAR = re.compile(r"[^A-Za-z0-9_]")


def avro_name(name: str) -> str:
    """A valid Avro name for ``name`` (invalid characters become ``_``)."""
    if _NAME_OK.match(name):
        return name
    fixed = _NAME_BAD_CHAR.sub("_", name)
    return fixed if fixed and not fixed[0].isdigit() else "_" + fixed


def derive_schema(value: dict, name: str = "Record") -> dict:
    """Avro record schema describing one structured value exactly."""
    return derive_shared_schema([value], name)


def derive_shared_schema(values: list[dict], name: str = "Record") -> Any:
    """One schema all ``values`` conform to (before and after of one record).

    Values of the same shape merge into one record (fields whose types differ
    become unions). If they cannot merge (different field sets, or types Avro
    cannot tell apart in a union) the schema is a union of one record per
    shape, so both still travel under one schema reference.
    """
    if not values:
        raise ConversionError("no value to derive a schema from")
    deriver = _Deriver()
    branches: list[dict] = []
    for i, value in enumerate(values):
        if type(value) is not dict:
            raise ConversionError(f"structured data must be a dict, not {type(value).__name__}", path="$")
        candidate = deriver.record(value, name if i == 0 else f"{name}_{i}", "$")
        for j, existing in enumerate(branches):
            try:
                branches[j] = deriver.merge(existing, candidate, "$")
                break
            except ConversionError:
                continue
        else:
            branches.append(candidate)
    return branches[0] if len(branches) == 1 else branches


class _Deriver:
    """Builds Avro types from values; keeps record names unique within one schema."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def unique(self, name: str) -> str:
        base, n = avro_name(name), 1
        out = base
        while out in self.names:
            n += 1
            out = f"{base}_{n}"
        self.names.add(out)
        return out

    def record(self, value: dict, type_name: str, path: str) -> dict:
        rec_name = self.unique(type_name)
        fields, used = [], set()
        for key, item in value.items():
            if type(key) is not str:
                raise ConversionError(f"dict key {key!r} is not a string", path=path)
            fname = avro_name(key)
            base, n = fname, 1
            while fname in used:
                n += 1
                fname = f"{base}_{n}"
            used.add(fname)
            field = {"name": fname, "type": self.type_of(item, f"{path}.{key}", f"{rec_name}_{fname}")}
            if fname != key:
                field[CDCFLOW_NAME] = key
            fields.append(field)
        return {"type": "record", "name": rec_name, "fields": fields}

    def type_of(self, value: Any, path: str, type_name: str) -> Any:
        t = type(value)
        if value is None:
            return "null"
        if t is bool:
            return "boolean"
        if t is int:
            if INT64_MIN <= value <= INT64_MAX:
                return "long"
            return avro_type("bigint", precision=max(BIGINT_MIN_PRECISION, len(str(abs(value)))))
        if t is float:
            return "double"
        if t is str:
            return "string"
        if t is bytes:
            return "bytes"
        if t is Decimal:
            return _decimal_type(value)
        if t is _dt.datetime or t is GoTime:
            if value.tzinfo is not None:
                raise ConversionError("datetime with a time zone is not a native value (use naive UTC)", path=path)
            return avro_type("datetime")
        if t is _dt.date:
            return avro_type("date")
        if t is _dt.timedelta:
            if not INT64_MIN <= value // _US <= INT64_MAX:
                raise ConversionError("timedelta out of the signed 64-bit microsecond range", path=path)
            return avro_type("time")
        if t is dict:
            return self.record(value, type_name, path)
        if t is list:
            items: Any = None
            for i, element in enumerate(value):
                et = self.type_of(element, f"{path}[{i}]", f"{type_name}_item")
                items = et if items is None else self.merge(items, et, f"{path}[{i}]")
            return {"type": "array", "items": "null" if items is None else items}
        raise ConversionError(f"unsupported value type {t.__name__}", path=path, value=value)

    def merge(self, a: Any, b: Any, path: str) -> Any:
        """The narrowest type holding values of both; ConversionError when Avro cannot say it exactly."""
        if a == b:
            return a
        branches = list(a) if isinstance(a, list) else [a]
        for nb in (b if isinstance(b, list) else [b]):
            key = _branch_key(nb)
            for i, existing in enumerate(branches):
                ek = _branch_key(existing)
                if existing == nb:
                    break
                if ek == key or {ek, key} == {"long", "bytes"} and _is_int_kind(existing) and _is_int_kind(nb):
                    merged = self._merge_same(existing, nb, path)
                    rest = branches[:i] + branches[i + 1:]
                    if rest:
                        # the merged type may now collide with another branch (two decimals of
                        # different scales become decimal text, a string): merge it in again
                        combined = self.merge(rest if len(rest) > 1 else rest[0], merged, path)
                        branches = list(combined) if isinstance(combined, list) else [combined]
                    else:
                        branches = [merged]
                    break
            else:
                branches.append(nb)
        branches.sort(key=lambda t: t != "null")  # null first: the Avro convention for optional values
        return branches[0] if len(branches) == 1 else branches

    def _merge_same(self, a: Any, b: Any, path: str) -> Any:
        ka, kb = _kind_name(a), _kind_name(b)
        if {ka, kb} <= {"long", "bigint"}:
            pa = a.get("precision", 0) if isinstance(a, dict) else 0
            pb = b.get("precision", 0) if isinstance(b, dict) else 0
            return avro_type("bigint", precision=max(pa, pb, BIGINT_MIN_PRECISION))
        if ka == kb == "decimal":
            if a["scale"] == b["scale"]:
                return avro_type("decimal", precision=max(a["precision"], b["precision"]), scale=a["scale"])
            return avro_type("decimal_text")  # mixed scales: only the text keeps each one
        if ka == kb == "record":
            names_a = [_original_name(f) for f in a["fields"]]
            names_b = [_original_name(f) for f in b["fields"]]
            if set(names_a) != set(names_b):
                raise ConversionError(
                    f"objects of different shapes ({sorted(names_a)} vs {sorted(names_b)}) cannot share one Avro type",
                    path=path,
                )
            by_name = {_original_name(f): f for f in b["fields"]}
            fields = []
            for f in a["fields"]:
                orig = _original_name(f)
                merged = dict(f, type=self.merge(f["type"], by_name[orig]["type"], f"{path}.{orig}"))
                fields.append(merged)
            self.names.discard(b["name"])
            return dict(a, fields=fields)
        if ka == kb == "array":
            return {"type": "array", "items": self.merge(a["items"], b["items"], path + "[]")}
        raise ConversionError(f"values of kinds {ka} and {kb} cannot be told apart in an Avro union", path=path)


def _decimal_type(value: Decimal) -> Any:
    sign, digits, exponent = value.as_tuple()
    if not value.is_finite() or exponent > 0 or (sign and not any(digits)):
        return avro_type("decimal_text")
    scale = -exponent
    return avro_type("decimal", precision=max(DECIMAL_MIN_PRECISION, len(digits), scale), scale=scale)


def _kind_name(t: Any) -> str:
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        return "union"
    marker = t.get(CDCFLOW_TYPE)
    if marker == "int":
        return "bigint"
    if marker == "time-micros":
        return "time"
    if marker == "decimal":
        return "decimal_text"
    logical = t.get("logicalType")
    if logical == "decimal":
        return "decimal"
    if logical == "date":
        return "date"
    if logical == "local-timestamp-micros":
        return "datetime"
    return t["type"] if isinstance(t["type"], str) else "union"


def _branch_key(t: Any) -> str:
    """What an Avro union tells branches apart by: the underlying type (records: all one key here)."""
    if isinstance(t, str):
        return t
    return t["type"]


def _is_int_kind(t: Any) -> bool:
    return _kind_name(t) in ("long", "bigint")


def _original_name(field: dict) -> str:
    return field.get(CDCFLOW_NAME, field["name"])


# ---------------------------------------------------------------------------
# Compiled codecs
# ---------------------------------------------------------------------------
class _Mismatch(Exception):
    """Internal: a value does not conform; the path is collected while unwinding."""

    def __init__(self, message: str, value: Any = None):
        self.message = message
        self.value = value
        self.path: list[str] = []


Enc = Callable[[Any], Any]
Dec = Callable[[Any], Any]
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class _Node:
    """Compiled form of one Avro type: a strict encoder and a decoder back to native values.

    ``enc`` checks the value and returns what fastavro writes; ``dec`` is None
    when fastavro's output already is the native value. ``py_types`` are the Python types fastavro returns for
    this type, used to pick a union branch on decode. Records keep ``fields``,
    arrays ``items``, maps ``values``, unions ``branches`` (for other walkers,
    such as the JSON form's type restoration).
    """

    def __init__(self, enc: Enc, dec: Dec | None, branch: str, py_types: tuple, kind: str, avro: Any):
        self.enc = enc
        self.dec = dec
        self.branch = branch  # the name fastavro selects a union branch by
        self.py_types = py_types
        self.kind = kind  # a value kind (KINDS) or an Avro type name for what cdcflow does not derive
        self.avro = avro


class Codec:
    """Avro encoder/decoder for one schema, compiled once (use :func:`codec_for`).

    ``encode`` raises ConversionError unless the value fits the schema exactly;
    ``decode`` returns native values (big ints, TIME, original field names). The strict
    check and the native conversions are cdcflow's (the node tree below); the Avro binary is
    read and written by fastavro (its compiled reader and writer), the one Avro implementation.
    """

    def __init__(self, schema: Any):
        if isinstance(schema, (str, bytes)):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise SchemaError(f"schema is not valid JSON: {e}") from None
        self.schema = schema
        self.text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        self.fingerprint = hashlib.sha256(self.text.encode()).hexdigest()
        self._named: dict[str, _Node] = {}
        self._named_avro: dict[str, Any] = {}
        self.root = self._compile(schema, None)
        try:
            self._parsed = parse_schema(_fastavro_schema(schema), _write_hint=False)
        except Exception as e:  # fastavro raises several exception types for a bad schema
            raise SchemaError(f"invalid Avro schema: {e}") from None

    # -- public ------------------------------------------------------------------
    def prepare(self, value: Any) -> Any:
        """The value in the form fastavro writes; ConversionError if it does not conform."""
        return _prepare(self.root, value)

    def conforms(self, value: Any) -> bool:
        try:
            self.root.enc(value)
            return True
        except _Mismatch:
            return False

    def encode(self, value: Any) -> bytes:
        return _fastavro_encode(self._parsed, self.root, value)

    def decode(self, data: bytes) -> Any:
        return _fastavro_decode(self._parsed, self.root, data)

    def encoder(self) -> Callable[[Any], bytes]:
        """The callable that encodes values of this schema (for callers encoding many)."""
        return self.encode

    def decoder(self) -> Callable[[bytes], Any]:
        """The callable that decodes data of this schema (for callers decoding many)."""
        return self.decode

    # -- compilation -------------------------------------------------------------
    def _compile(self, t: Any, namespace: str | None) -> _Node:
        if isinstance(t, list):
            return self._union([self._compile(b, namespace) for b in t], t)
        if isinstance(t, str):
            if t in _PRIMITIVES:
                return _primitive(t, t)
            full = t if "." in t or not namespace else f"{namespace}.{t}"
            for candidate in (full, t):
                if candidate in self._named:
                    return self._named[candidate]
            raise SchemaError(f"unknown Avro type name {t!r}")
        base = t.get("type")
        if isinstance(base, (dict, list)):
            return self._compile(base, namespace)
        marker = t.get(CDCFLOW_TYPE)
        logical = t.get("logicalType")
        if base == "bytes" and marker == "int":
            return _bigint_node(int(t.get("precision") or 0), t)
        if base == "long" and marker == "time-micros":
            return _time_node(t)
        if base == "string" and marker == "decimal":
            return _decimal_text_node(t)
        if base == "bytes" and logical == "decimal":
            return _decimal_node(int(t["precision"]), int(t.get("scale", 0)), t)
        if base == "int" and logical == "date":
            return _date_node(t)
        if base == "long" and logical == "local-timestamp-micros":
            return _datetime_node(t)
        if base in _PRIMITIVES:
            return _primitive(base, t, foreign_logical=logical)
        if base == "record" or base == "error":
            return self._record(t, namespace)
        if base == "array":
            return _array(self._compile(t["items"], namespace), t)
        if base == "map":
            return _map(self._compile(t["values"], namespace), t)
        if base == "enum":
            return self._register(t, namespace, _enum(t))
        if base == "fixed":
            return self._register(t, namespace, _fixed(t))
        raise SchemaError(f"unsupported Avro type {t!r}")

    def _fullname(self, t: dict, namespace: str | None) -> tuple[str, str | None]:
        name = t["name"]
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        ns = t.get("namespace", namespace) or None
        return (f"{ns}.{name}" if ns else name), ns

    def _register(self, t: dict, namespace: str | None, node: _Node) -> _Node:
        full, _ = self._fullname(t, namespace)
        node.branch = full
        self._named[full] = node
        return node

    def _record(self, t: dict, namespace: str | None) -> _Node:
        full, ns = self._fullname(t, namespace)
        # Registered before its fields compile so recursive types resolve.
        node = _Node(None, None, full, (tuple,), "record", t)  # type: ignore[arg-type]
        self._named[full] = node
        fields = []
        for f in t["fields"]:
            fields.append((_original_name(f), f["name"], self._compile(f["type"], ns)))
        _fill_record(node, fields)
        return node

    def _union(self, branches: list[_Node], t: list) -> _Node:
        return _union(branches, t)


def _prepare(root: _Node, value: Any) -> Any:
    """The value in the form fastavro writes; ConversionError (with the value's path) if it does not conform."""
    try:
        return root.enc(value)
    except _Mismatch as m:
        raise ConversionError(m.message, path="$" + "".join(reversed(m.path)), value=m.value) from None


def _fastavro_encode(parsed: Any, root: _Node, value: Any) -> bytes:
    """The strict check, then fastavro; a ConversionError naming the value that does not fit."""
    prepared = _prepare(root, value)
    buf = io.BytesIO()
    try:
        schemaless_writer(buf, parsed, prepared)
    except (ValueError, TypeError, OverflowError, UnicodeError, KeyError) as e:
        raise ConversionError(f"cannot encode value as Avro: {e}") from None
    return buf.getvalue()


def _fastavro_decode(parsed: Any, root: _Node, data: bytes) -> Any:
    """fastavro, then the native conversions; a ConversionError saying what does not match."""
    buf = io.BytesIO(data)
    try:
        value = schemaless_reader(buf, parsed, None, return_record_name=True)
    except (EOFError, ValueError, TypeError, OverflowError, UnicodeError, IndexError, KeyError) as e:
        raise ConversionError(f"data does not match its Avro schema: {type(e).__name__}: {e}") from None
    if buf.tell() != len(data):
        raise ConversionError(f"data does not match its Avro schema: {len(data) - buf.tell()} trailing bytes")
    dec = root.dec
    if dec is None:
        return value
    try:
        return dec(value)
    except (ValueError, ArithmeticError, TypeError, KeyError) as e:  # e.g. decimal text that is not a number
        raise ConversionError(f"data does not match its Avro schema: {type(e).__name__}: {e}") from None


def _fastavro_schema(t: Any) -> Any:
    """The schema fastavro sees: bigint nodes lose their decimal logical type (cdcflow converts them)."""
    if isinstance(t, list):
        return [_fastavro_schema(b) for b in t]
    if not isinstance(t, dict):
        return t
    if t.get(CDCFLOW_TYPE) == "int" and t.get("type") == "bytes":
        return "bytes"
    out = dict(t)
    if "fields" in out:
        out["fields"] = [dict(f, type=_fastavro_schema(f["type"])) for f in out["fields"]]
    if "items" in out:
        out["items"] = _fastavro_schema(out["items"])
    if "values" in out:
        out["values"] = _fastavro_schema(out["values"])
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _fastavro_schema(out["type"])
    return out


def _check(expected: type, what: str) -> Enc:
    def enc(v: Any) -> Any:
        if type(v) is not expected:
            raise _Mismatch(f"expected {what}, got {type(v).__name__}", v)
        return v

    return enc


def _enc_null(v: Any) -> Any:
    if v is not None:
        raise _Mismatch(f"expected null, got {type(v).__name__}", v)
    return None


def _enc_long(v: Any) -> Any:
    if type(v) is not int or not INT64_MIN <= v <= INT64_MAX:
        raise _Mismatch(f"expected a 64-bit int, got {type(v).__name__}", v)
    return v


def _enc_int32(v: Any) -> Any:
    if type(v) is not int or not -(1 << 31) <= v < (1 << 31):
        raise _Mismatch(f"expected a 32-bit int, got {type(v).__name__}", v)
    return v


def _enc_float32(v: Any) -> Any:
    import struct

    if type(v) is not float or (v == v and struct.unpack("<f", struct.pack("<f", v))[0] != v):
        raise _Mismatch("expected a float that fits 32 bits", v)
    return v


_PY_TYPES = {
    "null": (type(None),), "boolean": (bool,), "int": (int,), "long": (int,), "float": (float,),
    "double": (float,), "bytes": (bytes,), "string": (str,),
}


def _primitive(base: str, avro: Any, foreign_logical: str | None = None) -> _Node:
    if foreign_logical:
        # A logical type cdcflow does not model (timestamp-millis, uuid, ...): fastavro converts.
        return _Node(lambda v: v, None, base, (object,), "foreign", avro)
    enc = {
        "null": _enc_null, "boolean": _check(bool, "bool"), "int": _enc_int32, "long": _enc_long,
        "float": _enc_float32, "double": _check(float, "float"), "bytes": _check(bytes, "bytes"),
        "string": _check(str, "str"),
    }[base]
    return _Node(enc, None, base, _PY_TYPES[base], base, avro)


def _bigint_node(precision: int, avro: Any) -> _Node:
    limit = 10 ** precision if precision > 0 else None

    def enc(v: Any) -> Any:
        if type(v) is not int or (limit is not None and not -limit < v < limit):
            raise _Mismatch(f"expected an int of at most {precision} digits", v)
        return v.to_bytes((v + (v < 0)).bit_length() // 8 + 1, "big", signed=True)

    def dec(x: bytes) -> int:
        return int.from_bytes(x, "big", signed=True)

    return _Node(enc, dec, "bytes", (bytes,), "bigint", avro)


def _decimal_node(precision: int, scale: int, avro: Any) -> _Node:
    exponent = -scale

    def enc(v: Any) -> Any:
        if type(v) is not Decimal:
            raise _Mismatch(f"expected Decimal({precision},{scale}), got {type(v).__name__}", v)
        sign, digits, exp = v.as_tuple()
        if exp != exponent or len(digits) > precision or (sign and not any(digits)):
            raise _Mismatch(f"Decimal {v} does not fit decimal({precision},{scale}) exactly", v)
        return v

    return _Node(enc, None, "bytes", (Decimal,), "decimal", avro)


def _decimal_text_node(avro: Any) -> _Node:
    def enc(v: Any) -> Any:
        if type(v) is not Decimal:
            raise _Mismatch(f"expected Decimal, got {type(v).__name__}", v)
        return str(v)

    return _Node(enc, Decimal, "string", (str,), "decimal_text", avro)


def _date_node(avro: Any) -> _Node:
    return _Node(_check(_dt.date, "date"), None, "int", (_dt.date,), "date", avro)


def _datetime_node(avro: Any) -> _Node:
    def enc(v: Any) -> Any:
        if type(v) is not _dt.datetime or v.tzinfo is not None:
            raise _Mismatch(f"expected a naive datetime, got {v!r}", v)
        return v

    return _Node(enc, None, "long", (_dt.datetime,), "datetime", avro)


def _time_node(avro: Any) -> _Node:
    def enc(v: Any) -> Any:
        if type(v) is not _dt.timedelta:
            raise _Mismatch(f"expected timedelta, got {type(v).__name__}", v)
        us = v // _US
        if not INT64_MIN <= us <= INT64_MAX:
            raise _Mismatch("timedelta out of the 64-bit microsecond range", v)
        return us

    def dec(x: int) -> _dt.timedelta:
        return _dt.timedelta(microseconds=x)

    return _Node(enc, dec, "long", (int,), "time", avro)


def _enum(t: dict) -> _Node:
    symbols = frozenset(t["symbols"])

    def enc(v: Any) -> Any:
        if type(v) is not str or v not in symbols:
            raise _Mismatch(f"expected one of {sorted(symbols)}", v)
        return v

    return _Node(enc, None, t["name"], (str,), "enum", t)


def _fixed(t: dict) -> _Node:
    size = int(t["size"])

    def enc(v: Any) -> Any:
        if type(v) is not bytes or len(v) != size:
            raise _Mismatch(f"expected {size} bytes", v)
        return v

    return _Node(enc, None, t["name"], (bytes,), "fixed", t)


def _fill_record(node: _Node, fields: list[tuple[str, str, _Node]]) -> None:
    """Record encoder: exact key set, each field checked; renames/conversions only where needed."""
    n = len(fields)
    identity = all(orig == av and f.dec is None for orig, av, f in fields)
    names = [orig for orig, _, _ in fields]

    def enc(v: Any) -> Any:
        if type(v) is not dict:
            raise _Mismatch(f"expected a dict, got {type(v).__name__}", v)
        if len(v) != n:
            missing = [k for k in names if k not in v]
            extra = [k for k in v if k not in names]
            raise _Mismatch(f"dict keys do not match the schema (missing {missing}, extra {extra})", v)
        out = {}
        for orig, av, f in fields:
            try:
                out[av] = f.enc(v[orig])
            except KeyError:
                raise _Mismatch(f"missing field {orig!r}", v) from None
            except _Mismatch as m:
                m.path.append(f".{orig}")
                raise
        return out

    if identity:
        dec = None
    else:
        plan = [(orig, av, f.dec) for orig, av, f in fields]

        def dec(x: dict) -> dict:
            return {orig: (x[av] if d is None else d(x[av])) for orig, av, d in plan}

    node.enc = enc
    node.dec = dec
    node.py_types = (dict, tuple)
    node.fields = fields  # type: ignore[attr-defined]


def _array(items: _Node, avro: Any) -> _Node:
    item_enc, item_dec = items.enc, items.dec

    def enc(v: Any) -> Any:
        if type(v) is not list:
            raise _Mismatch(f"expected a list, got {type(v).__name__}", v)
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item_enc(x))
            except _Mismatch as m:
                m.path.append(f"[{i}]")
                raise
        return out

    dec = None if item_dec is None else (lambda x: [item_dec(e) for e in x])
    node = _Node(enc, dec, "array", (list,), "array", avro)
    node.items = items  # type: ignore[attr-defined]
    return node


def _map(values: _Node, avro: Any) -> _Node:
    value_enc, value_dec = values.enc, values.dec

    def enc(v: Any) -> Any:
        if type(v) is not dict:
            raise _Mismatch(f"expected a dict, got {type(v).__name__}", v)
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise _Mismatch(f"map key {k!r} is not a string", v)
            try:
                out[k] = value_enc(x)
            except _Mismatch as m:
                m.path.append(f".{k}")
                raise
        return out

    dec = None if value_dec is None else (lambda x: {k: value_dec(e) for k, e in x.items()})
    node = _Node(enc, dec, "map", (dict,), "map", avro)
    node.values = values  # type: ignore[attr-defined]
    return node


def _union(branches: list[_Node], avro: Any) -> _Node:
    """Encode picks the first branch that accepts the value and names it to fastavro (tuple notation)."""

    def enc(v: Any) -> Any:
        first: _Mismatch | None = None
        for b in branches:
            try:
                return (b.branch, b.enc(v))
            except _Mismatch as m:
                if first is None or (m.path and not first.path):
                    first = m
        assert first is not None
        if len(branches) > 1 and not first.path:
            first.message = f"{type(v).__name__} value fits none of {[b.branch for b in branches]}"
        raise first

    by_name = {b.branch: b for b in branches}
    by_type: dict[type, _Node] = {}
    for b in branches:
        for t in b.py_types:
            by_type.setdefault(t, b)
    # fastavro names record, enum and fixed branches (return_record_name): those need unwrapping
    # (a recursive record is still being compiled here, so its kind is asked, not its decoder)
    needs_dec = any(b.dec is not None or b.kind in ("record", "enum", "fixed") for b in branches)

    def dec(x: Any) -> Any:
        if type(x) is tuple:  # a record branch, named by fastavro (return_record_name)
            b = by_name[x[0]]
            return x[1] if b.dec is None else b.dec(x[1])
        b = by_type.get(type(x))
        return x if b is None or b.dec is None else b.dec(x)

    node = _Node(enc, dec if needs_dec else None, "union", tuple({t for b in branches for t in b.py_types}), "union", avro)
    node.branches = branches  # type: ignore[attr-defined]
    return node


# ---------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------
_CACHE_LIMIT = 4096
_cache: dict[str, Codec] = {}
_cache_lock = threading.Lock()


def codec_for(schema: Any) -> Codec:
    """The compiled codec for ``schema`` (dict or JSON text), cached by canonical text."""
    if isinstance(schema, (str, bytes)):
        hit = _cache.get(schema if isinstance(schema, str) else schema.decode())
        if hit is not None:
            return hit
        key = schema if isinstance(schema, str) else schema.decode()
    else:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        hit = _cache.get(key)
        if hit is not None:
            return hit
    codec = Codec(schema)
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = codec
        _cache.setdefault(codec.text, codec)
    return codec


def conforms(value: Any, schema: Any) -> bool:
    """True when ``value`` encodes under ``schema`` without any change."""
    return codec_for(schema).conforms(value)
