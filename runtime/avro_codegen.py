"""Per-schema Avro binary encoders and decoders, generated as Python source once per schema.

Why: fastavro walks its parsed schema for every datum and cdcflow first walks
the value once more to check and convert it (big ints, TIME, decimals,
original field names). For the flat rows CDC moves, one generated function
per record type that checks, converts and writes each field inline is several
times faster than both walks together. The output is byte-for-byte what
fastavro writes for the prepared value (tests compare them); fastavro stays the
reference: :class:`cdcflow.avro_values.Codec` falls back to its strict
fastavro path whenever the generated code raises anything, so error messages
and edge cases (malformed input, foreign logical types) stay exactly as before.

Generated encoders append byte strings to a list (``b"".join`` at the end);
decoders read from ``bytes`` at an index and return ``(value, index)``.

:class:`Generator` (record functions, the strict value checks, compile) is shared
with the other per-schema generators: the JSON form's writer and reader
(``cdcflow.convert.jsonform``) and the TiCDC Avro row reader.
"""

from __future__ import annotations

import datetime as _dt
import struct
from decimal import Context, Decimal, MAX_EMAX, MAX_PREC, MIN_EMIN
from typing import Any, Callable

from .varint import TABLE as VARINT_TABLE, TABLE_SIZE as VARINT_TABLE_SIZE, read_uvarint, uvarint

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_EPOCH_DATE_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)  # scaleb never rounds


class Unsupported(Exception):
    """The schema holds a type the generator leaves to fastavro (foreign logical types)."""


class Mismatch(Exception):
    """Raised by generated code; the caller reruns the reference path for the precise error."""


_VT, _VARINT_TABLE_SIZE, _uvarint = VARINT_TABLE, VARINT_TABLE_SIZE, uvarint


def _f32_exact(v: float) -> bool:
    return v != v or struct.unpack("<f", struct.pack("<f", v))[0] == v


_BASE_NAMESPACE: dict[str, Any] = {
    "_M": Mismatch, "_VT": _VT, "_uv": _uvarint, "_rv": read_uvarint, "_Decimal": Decimal,
    "_date": _dt.date, "_datetime": _dt.datetime, "_timedelta": _dt.timedelta, "_td": _dt.timedelta,
    "_fromord": _dt.date.fromordinal, "_EPOCH": _EPOCH, "_US": _US, "_EXACT": _EXACT,
    "_pd": struct.Struct("<d").pack, "_pf": struct.Struct("<f").pack, "_ud": struct.Struct("<d").unpack_from,
    "_uf": struct.Struct("<f").unpack_from, "_f32ok": _f32_exact, "_from_bytes": int.from_bytes,
    "_I64MIN": INT64_MIN, "_I64MAX": INT64_MAX, "_I32MIN": INT32_MIN, "_I32MAX": INT32_MAX,
}

_SCALAR_KINDS = {
    "null", "boolean", "int", "long", "float", "double", "bytes", "string", "bigint", "decimal",
    "decimal_text", "date", "datetime", "time", "enum", "fixed",
}


class _Source:
    """Lines of generated code plus the constants they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(_BASE_NAMESPACE)
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


class Generator:
    """What the per-schema generators share (Avro encoder and decoder here, the JSON form's
    writer and reader in ``cdcflow.convert.jsonform``): one generated function per record
    node (named on first use, its body written after the caller's, so recursive schemas
    work), the strict value checks, and the final compile of the module text."""

    record_prefix = ""  # name prefix of the generated record functions
    label = ""  # file name the generated code reports in tracebacks

    def __init__(self) -> None:
        self.src = _Source()
        self.functions: dict[int, str] = {}
        self.pending: list[Any] = []

    def record_function(self, node: Any) -> str:
        name = self.functions.get(id(node))
        if name is None:
            name = self.functions[id(node)] = self.src.var(self.record_prefix)
            self.pending.append(node)
        return name

    def _record_body(self, node: Any) -> None:
        raise NotImplementedError

    def _finish(self, name: str) -> Callable:
        """Write the pending record bodies, compile everything, return the function ``name``."""
        while self.pending:
            self._record_body(self.pending.pop())
        namespace = self.src.ns
        exec(compile("\n".join(self.src.lines), self.label, "exec"), namespace)  # noqa: S102
        return namespace[name]

    # -- the strict checks (what ``avro_values._Node.enc`` accepts, inline) --------------------
    def condition(self, node: Any, x: str) -> str | None:
        """An expression true exactly when ``x`` is a valid value of a scalar ``node`` (None: not scalar)."""
        kind, s = node.kind, self.src
        if kind == "null":
            return f"{x} is None"
        if kind == "boolean":
            return f"type({x}) is bool"
        if kind == "int":
            return f"type({x}) is int and {INT32_MIN} <= {x} <= {INT32_MAX}"
        if kind == "long":
            return f"type({x}) is int and {INT64_MIN} <= {x} <= {INT64_MAX}"
        if kind == "float":
            return f"type({x}) is float and _f32ok({x})"
        if kind == "double":
            return f"type({x}) is float"
        if kind == "bytes":
            return f"type({x}) is bytes"
        if kind == "string":
            return f"type({x}) is str"
        if kind == "bigint":
            precision = int(node.avro.get("precision") or 0)
            if precision <= 0:
                return f"type({x}) is int"
            limit = s.const(10 ** precision, "_lim")
            return f"type({x}) is int and -{limit} < {x} < {limit}"
        if kind == "decimal":  # the scale exactly, at most ``precision`` digits, no negative zero
            precision, scale = int(node.avro["precision"]), int(node.avro.get("scale", 0))
            t = s.var("t")
            return (f"type({x}) is _Decimal and ({t} := {x}.as_tuple())[2] == {-scale} and len({t}[1]) <= {precision}"
                    f" and not ({t}[0] and not any({t}[1]))")
        if kind == "decimal_text":
            return f"type({x}) is _Decimal"
        if kind == "date":
            return f"type({x}) is _date"
        if kind == "datetime":
            return f"type({x}) is _datetime and {x}.tzinfo is None"
        if kind == "time":
            return f"type({x}) is _timedelta and _I64MIN <= {x} // _US <= _I64MAX"
        if kind == "enum":
            symbols = s.const(frozenset(node.avro["symbols"]), "_sym")
            return f"type({x}) is str and {x} in {symbols}"
        if kind == "fixed":
            return f"type({x}) is bytes and len({x}) == {int(node.avro['size'])}"
        return None

    def check(self, node: Any, x: str, i: int) -> bool:
        """Emit ``raise _M`` unless ``x`` is a valid value of scalar ``node``; False if ``node`` is not scalar."""
        cond = self.condition(node, x)
        if cond is None:
            return False
        self.src.emit(i, f"if not ({cond}):")
        self.src.emit(i + 1, "raise _M")
        return True

    @staticmethod
    def union_branches(node: Any, foreign_ok: bool = False) -> tuple[list, list, Any]:
        """(scalar branches, container branches, catch-all branch or None), each as (index, node).

        The reference picks the first branch that accepts a value. Scalar and container branches
        never accept the same value, so generated code tests scalars first (in order), then
        containers (in order). A foreign logical type accepts anything: it ends the union (the
        branches after it are never picked). Unsupported when ``foreign_ok`` is False.
        """
        scalars, containers, catch_all = [], [], None
        for index, branch in enumerate(node.branches):
            if branch.kind == "foreign":
                if not foreign_ok:
                    raise Unsupported("a logical type cdcflow does not model")
                catch_all = (index, branch)
                break
            (scalars if branch.kind in _SCALAR_KINDS else containers).append((index, branch))
        return scalars, containers, catch_all


# ---------------------------------------------------------------------------
# Encoders
# ---------------------------------------------------------------------------
class _EncoderGen(Generator):
    record_prefix = "_enc_rec"
    label = "<cdcflow avro encoder>"

    def build(self, root: Any) -> Callable[[Any, list], None]:
        name = self.record_function(root) if root.kind == "record" else None
        if name is None:  # a non-record root (a union of records, a scalar): wrap it
            name = self.src.var("_enc_root")
            self.src.emit(0, f"def {name}(v, out):")
            self.src.emit(1, "a = out.append")
            self.value(root, "v", 1)
        return self._finish(name)

    def _record_body(self, node: Any) -> None:
        s = self.src
        s.emit(0, f"def {self.functions[id(node)]}(v, out):")
        s.emit(1, "a = out.append")
        s.emit(1, f"if type(v) is not dict or len(v) != {len(node.fields)}:")
        s.emit(2, "raise _M")
        for orig, _, field in node.fields:
            x = s.var("x")
            s.emit(1, f"{x} = v[{orig!r}]")
            self.value(field, x, 1)
        s.emit(1, "return None")

    def _long(self, z: str, expr: str, i: int) -> None:
        """Write the zig-zag varint of the int expression ``expr``."""
        s = self.src
        s.emit(i, f"{z} = ({expr} << 1) ^ ({expr} >> 63)")
        s.emit(i, f"a(_VT[{z}] if {z} < {_VARINT_TABLE_SIZE} else _uv({z}))")

    def _bytes(self, b: str, i: int) -> None:
        """Write a length-prefixed byte string held in ``b``."""
        s = self.src
        n = s.var("n")
        s.emit(i, f"{n} = len({b}) << 1")
        s.emit(i, f"a(_VT[{n}] if {n} < {_VARINT_TABLE_SIZE} else _uv({n}))")
        s.emit(i, f"a({b})")

    def write_checked(self, node: Any, x: str, i: int) -> None:
        """Write ``x`` (a scalar already known to be valid)."""
        kind, s = node.kind, self.src
        if kind == "null":
            return
        if kind == "boolean":
            s.emit(i, f"a(b'\\x01' if {x} else b'\\x00')")
        elif kind in ("int", "long"):
            self._long(s.var("z"), x, i)
        elif kind == "float":
            s.emit(i, f"a(_pf({x}))")
        elif kind == "double":
            s.emit(i, f"a(_pd({x}))")
        elif kind == "bytes":
            self._bytes(x, i)
        elif kind == "string":
            b = s.var("b")
            s.emit(i, f"{b} = {x}.encode()")
            self._bytes(b, i)
        elif kind == "bigint":
            b = s.var("b")
            s.emit(i, f"{b} = {x}.to_bytes(({x} + ({x} < 0)).bit_length() // 8 + 1, 'big', signed=True)")
            self._bytes(b, i)
        elif kind == "decimal":
            scale = int(node.avro.get("scale", 0))
            u, b = s.var("u"), s.var("b")
            s.emit(i, f"{u} = int({x}.scaleb({scale}, _EXACT))")
            # the byte count fastavro uses: from the magnitude, one sign bit more
            s.emit(i, f"{b} = {u}.to_bytes(((-{u} if {u} < 0 else {u}).bit_length() + 8) // 8, 'big', signed=True)")
            self._bytes(b, i)
        elif kind == "decimal_text":
            b = s.var("b")
            s.emit(i, f"{b} = str({x}).encode()")
            self._bytes(b, i)
        elif kind == "date":
            self._long(s.var("z"), f"({x}.toordinal() - {_EPOCH_DATE_ORDINAL})", i)
        elif kind == "datetime":
            us = s.var("us")
            s.emit(i, f"{us} = ({x} - _EPOCH) // _US")
            self._long(s.var("z"), us, i)
        elif kind == "time":
            us = s.var("us")
            s.emit(i, f"{us} = {x} // _US")
            self._long(s.var("z"), us, i)
        elif kind == "enum":
            index = s.const({sym: _VT[k << 1] for k, sym in enumerate(node.avro["symbols"])}, "_sym")
            s.emit(i, f"a({index}[{x}])")
        elif kind == "fixed":
            s.emit(i, f"a({x})")
        else:  # pragma: no cover - guarded by condition()
            raise Unsupported(kind)

    def value(self, node: Any, x: str, i: int) -> None:
        """Check ``x`` against ``node`` and write it; raise _M (generated) when it does not fit."""
        kind, s = node.kind, self.src
        if kind == "foreign":
            raise Unsupported("a logical type cdcflow does not model")
        if self.check(node, x, i):
            self.write_checked(node, x, i)
            return
        if kind == "record":
            s.emit(i, f"{self.record_function(node)}({x}, out)")
        elif kind == "array":
            s.emit(i, f"if type({x}) is not list:")
            s.emit(i + 1, "raise _M")
            s.emit(i, f"if {x}:")
            self._long(s.var("z"), f"len({x})", i + 1)
            item = s.var("x")
            s.emit(i + 1, f"for {item} in {x}:")
            self.value(node.items, item, i + 2)
            s.emit(i, "a(b'\\x00')")
        elif kind == "map":
            s.emit(i, f"if type({x}) is not dict:")
            s.emit(i + 1, "raise _M")
            s.emit(i, f"if {x}:")
            self._long(s.var("z"), f"len({x})", i + 1)
            k, item = s.var("k"), s.var("x")
            s.emit(i + 1, f"for {k}, {item} in {x}.items():")
            s.emit(i + 2, f"if type({k}) is not str:")
            s.emit(i + 3, "raise _M")
            b = s.var("b")
            s.emit(i + 2, f"{b} = {k}.encode()")
            self._bytes(b, i + 2)
            self.value(node.values, item, i + 2)
            s.emit(i, "a(b'\\x00')")
        elif kind == "union":
            self._union(node, x, i)
        else:
            raise Unsupported(kind)

    def _union(self, node: Any, x: str, i: int) -> None:
        """First branch that accepts the value, as the reference does (see ``union_branches``)."""
        s = self.src
        scalars, containers, _ = self.union_branches(node)
        keyword = "if"
        for index, branch in scalars:
            s.emit(i, f"{keyword} {self.condition(branch, x)}:")
            s.emit(i + 1, f"a({_VT[index << 1]!r})")
            self.write_checked(branch, x, i + 1)
            keyword = "elif"
        inner = i
        if scalars:
            s.emit(i, "else:")
            inner = i + 1
        if not containers:
            s.emit(inner, "raise _M")
            return
        mark = s.var("m")
        s.emit(inner, f"{mark} = len(out)")
        for index, branch in containers:
            s.emit(inner, "try:")
            s.emit(inner + 1, f"a({_VT[index << 1]!r})")
            self.value(branch, x, inner + 1)
            s.emit(inner, "except (_M, KeyError):")
            s.emit(inner + 1, f"del out[{mark}:]")
            inner += 1
        s.emit(inner, "raise _M")


# ---------------------------------------------------------------------------
# Decoders
# ---------------------------------------------------------------------------
class _DecoderGen(Generator):
    record_prefix = "_dec_rec"
    label = "<cdcflow avro decoder>"

    def build(self, root: Any) -> Callable[[bytes, int], tuple[Any, int]]:
        if root.kind == "record":
            name = self.record_function(root)
        else:
            name = self.src.var("_dec_root")
            self.src.emit(0, f"def {name}(d, p):")
            v = self.value(root, 1)
            self.src.emit(1, f"return {v}, p")
        return self._finish(name)

    def _record_body(self, node: Any) -> None:
        s = self.src
        s.emit(0, f"def {self.functions[id(node)]}(d, p):")
        items = []
        for orig, _, field in node.fields:
            items.append(f"{orig!r}: {self.value(field, 1)}")
        s.emit(1, f"return {{{', '.join(items)}}}, p")

    def _varint(self, i: int) -> str:
        s = self.src
        z = s.var("z")
        s.emit(i, f"{z} = d[p]")
        s.emit(i, "p += 1")
        s.emit(i, f"if {z} > 127:")  # two bytes inline (values below 8192: string lengths, most ids)
        s.emit(i + 1, "if d[p] < 128:")
        s.emit(i + 2, f"{z} = {z} & 127 | d[p] << 7")
        s.emit(i + 2, "p += 1")
        s.emit(i + 1, "else:")
        s.emit(i + 2, f"{z}, p = _rv(d, p, {z} & 127, 7)")
        return z

    def _long(self, i: int) -> str:
        z = self._varint(i)
        v = self.src.var("v")
        self.src.emit(i, f"{v} = ({z} >> 1) ^ -({z} & 1)")
        return v

    def _raw(self, i: int, then: str = "") -> str:
        """Read a length-prefixed byte string; ``then`` is a method applied to the slice (``.decode()``)."""
        s = self.src
        z = self._varint(i)  # the zigzag length: odd is negative
        v, e = s.var("v"), s.var("e")
        s.emit(i, f"if {z} & 1:")
        s.emit(i + 1, "raise _M")
        s.emit(i, f"{e} = p + ({z} >> 1)")
        s.emit(i, f"{v} = d[p:{e}]{then}")
        s.emit(i, f"p = {e}")  # past the end: the caller's final length check sends it to fastavro
        return v

    def value(self, node: Any, i: int) -> str:
        """Emit code reading one ``node`` value at ``p``; return the variable holding it."""
        kind, s = node.kind, self.src
        if kind == "null":
            return "None"
        if kind == "boolean":
            v = s.var("v")
            s.emit(i, f"{v} = d[p]")
            s.emit(i, "p += 1")
            s.emit(i, f"if {v} > 1:")
            s.emit(i + 1, "raise _M")
            s.emit(i, f"{v} = {v} == 1")
            return v
        if kind in ("int", "long"):
            return self._long(i)
        if kind in ("float", "double"):
            v = s.var("v")
            fn, size = ("_uf", 4) if kind == "float" else ("_ud", 8)
            s.emit(i, f"{v} = {fn}(d, p)[0]")
            s.emit(i, f"p += {size}")
            return v
        if kind == "bytes":
            return self._raw(i)
        if kind == "string":
            return self._raw(i, ".decode()")
        if kind == "bigint":
            raw = self._raw(i)
            s.emit(i, f"{raw} = _from_bytes({raw}, 'big', signed=True)")
            return raw
        if kind == "decimal":
            precision, scale = int(node.avro["precision"]), int(node.avro.get("scale", 0))
            ctx = s.const(Context(prec=precision), "_ctx")
            raw = self._raw(i)
            s.emit(i, f"{raw} = {ctx}.create_decimal(_from_bytes({raw}, 'big', signed=True)).scaleb({-scale}, {ctx})")
            return raw
        if kind == "decimal_text":
            raw = self._raw(i)
            s.emit(i, f"{raw} = _Decimal({raw}.decode())")
            return raw
        if kind == "date":
            v = self._long(i)
            s.emit(i, f"{v} = _fromord({v} + {_EPOCH_DATE_ORDINAL})")
            return v
        if kind == "datetime":
            v = self._long(i)
            s.emit(i, f"{v} = _EPOCH + _td(0, 0, {v})")
            return v
        if kind == "time":
            v = self._long(i)
            s.emit(i, f"{v} = _td(0, 0, {v})")
            return v
        if kind == "enum":
            symbols = s.const(tuple(node.avro["symbols"]), "_sym")
            v = self._long(i)
            s.emit(i, f"if {v} < 0:")
            s.emit(i + 1, "raise _M")
            s.emit(i, f"{v} = {symbols}[{v}]")
            return v
        if kind == "fixed":
            size = int(node.avro["size"])
            v = s.var("v")
            s.emit(i, f"{v} = d[p:p + {size}]")
            s.emit(i, f"p += {size}")
            return v
        if kind == "record":
            v = s.var("v")
            s.emit(i, f"{v}, p = {self.record_function(node)}(d, p)")
            return v
        if kind in ("array", "map"):
            return self._blocks(node, i)
        if kind == "union":
            index = self._long(i)
            v = s.var("v")
            for k, branch in enumerate(node.branches):
                s.emit(i, f"{'if' if k == 0 else 'elif'} {index} == {k}:")
                got = self.value(branch, i + 1)
                s.emit(i + 1, f"{v} = {got}")
            s.emit(i, "else:")
            s.emit(i + 1, "raise _M")
            return v
        raise Unsupported(kind)

    def _blocks(self, node: Any, i: int) -> str:
        s = self.src
        v = s.var("v")
        is_map = node.kind == "map"
        s.emit(i, f"{v} = {{}}" if is_map else f"{v} = []")
        s.emit(i, "while True:")
        count = self._long(i + 1)
        s.emit(i + 1, f"if {count} == 0:")
        s.emit(i + 2, "break")
        s.emit(i + 1, f"if {count} < 0:")
        s.emit(i + 2, f"{count} = -{count}")
        self._long(i + 2)  # the block's byte size, not needed
        s.emit(i + 1, f"for _ in range({count}):")
        if is_map:
            key = self._raw(i + 2)
            item = self.value(node.values, i + 2)
            s.emit(i + 2, f"{v}[{key}.decode()] = {item}")
        else:
            item = self.value(node.items, i + 2)
            s.emit(i + 2, f"{v}.append({item})")
        return v


def generate(root: Any) -> tuple[Callable[[Any, list], None], Callable[[bytes, int], tuple[Any, int]]]:
    """(encoder, decoder) for a compiled schema node tree (``avro_values._Node``).

    ``encoder(value, out)`` appends the Avro bytes of ``value`` to ``out``;
    ``decoder(data, 0)`` returns ``(value, end)``. Both raise on anything
    unexpected; the caller then takes the reference path. Raises
    :class:`Unsupported` when a type is left to fastavro.
    """
    return _EncoderGen().build(root), _DecoderGen().build(root)
