"""Restores the native values of a record's key or payload from its JSON form, with the Avro
schema its metadata names, when this run's schema store holds that schema.

Why: a JSON line holds plain JSON values (``cdcflow.convert.jsonform``): Decimal, dates and
times are text. A record a TiCDC source made names its column-type schema in its metadata
(``opencdc.payload.schema.subject`` / ``.version``); a run that has that schema (the run that
wrote the file, or one sharing its state directory) gets the TiDB-typed values back, so a
``file`` source can feed a TiCDC destination. Optional by design: a schema that is absent, or
values that do not fit it, leave the plain JSON values, never an error.

Per schema (cached by fingerprint) one generated reader checks the JSON value against the
schema and restores the native one (a record's object as a new dict in the schema's field
order; arrays and maps in place).
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

from ..errors import SchemaError
from .avro import Codec
from .schemaref import META_KEYS, refs_for
from ..errors import ConversionError
from .textforms import date_of, parse_date, parse_decimal, parse_rfc3339, parse_time, rfc3339_of, time_of, unb64

_NONFINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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
    "datetime": ("datetime", parse_rfc3339, "_pdatetime"),
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
    one: a record's object becomes a new dict in the schema's field order (the line has Go's sorted
    key order); arrays and maps of the freshly parsed JSON are changed in place. Raises ``_Bad``
    with the path when the value does not fit.

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
            "_pdate": date_of, "_pdatetime": rfc3339_of, "_ptime": time_of,
            "_tf_date": parse_date, "_tf_datetime": parse_rfc3339, "_tf_time": parse_time,
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
        values = []
        for orig, field, x in fields:
            s.emit(1, "try:")  # free unless raised (3.11 exception tables)
            mark = len(s.lines)
            values.append((orig, self.value(field, x, 2)))
            if len(s.lines) == mark:
                s.lines.pop()  # nothing to check: no try
                continue
            s.emit(1, "except _Bad as b:")
            s.emit(2, f"b.path.append({'.' + orig!r})")
            s.emit(2, "raise")
        # a new dict in the schema's field order (the line has Go's sorted key order)
        s.emit(1, "return {" + ", ".join(f"{orig!r}: {y}" for orig, y in values) + "}")

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
            y = s.var("y")
            s.emit(i, f"{y} = {self.record_function(node)}({x})")
            return y
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



_readers: dict[str, Callable[[Any], Any]] = {}


def _reader(codec: Codec) -> Callable[[Any], Any]:
    read = _readers.get(codec.fingerprint)
    if read is None:
        if len(_readers) > 4096:
            _readers.clear()
        read = _readers[codec.fingerprint] = _ReaderGen().build(codec.root)
    return read


class NotRestored(Exception):
    """The values do not fit the schema their metadata names: the caller keeps the plain JSON."""


class Restorer:
    """Restores the parts of one batch's records; caches the reader of each (subject, version)."""

    __slots__ = ("refs", "_named")

    def __init__(self, store: Any):
        self.refs = refs_for(store)
        self._named: dict[tuple[str, str], Callable | None] = {}

    def __call__(self, value: dict, metadata: dict, part: str) -> Any:
        """``value`` (freshly parsed JSON, changed in place) with its native values; ``value`` as
        it is when the metadata names no schema or this store does not hold it. NotRestored when
        the values do not fit: ``value`` may be half changed then, so the caller parses again."""
        subject_key, version_key = META_KEYS[part]
        subject, version = metadata.get(subject_key), metadata.get(version_key)
        if not subject or not version:
            return value
        read = self._named.get((subject, version), _MISS)
        if read is _MISS:
            try:
                read = _reader(self.refs.codec(subject, version))
            except SchemaError:
                read = None  # not in this run's store: the plain JSON values
            self._named[(subject, version)] = read
        if read is None:
            return value
        try:
            return read(value)
        except _Bad:
            raise NotRestored from None


_MISS = object()
