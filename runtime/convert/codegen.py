"""Per-schema code generation and kernel plans shared by the JSON form (``jsonform.py``).

Why here: what remains of the Avro generators once fastavro became the one Avro reader and
writer (issue 17); the JSON form's generated writer and reader still build on ``Generator``
(one function per record node, the strict checks of ``cdcflow.convert.avro``'s node tree) and
its kernel reads the node tree through ``flat_plan``. It goes with the JSON form's generators.
"""

from __future__ import annotations

import datetime as _dt
import struct
from decimal import Context, Decimal, MAX_EMAX, MAX_PREC, MIN_EMIN
from typing import Any, Callable

from ..varint import TABLE as VARINT_TABLE, TABLE_SIZE as VARINT_TABLE_SIZE, read_uvarint, uvarint

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_EPOCH_DATE_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)  # scaleb never rounds


class Unsupported(Exception):
    """The schema holds a type the generator leaves to the reference path (foreign logical types)."""


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
    """What the JSON form's generated writer and reader share: one generated function per record
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

    # -- the strict checks (what ``convert.avro._Node.enc`` accepts, inline) --------------------
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


def flat_plan(root: Any, entry: Callable[[Any, Callable[[Any], int]], tuple]) -> tuple[tuple, int]:
    """A kernel plan's node table: ``entry(node, visit)`` for every node under ``root``, children
    referred to by the index ``visit(child)`` returns, and the root's index.

    Why flat: a recursive record becomes plain data (no reference cycle through the kernel
    object), and every kernel (Avro decode and encode, the JSON form) reads the same shape.
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
