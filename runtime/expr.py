"""The one expression core for processor conditions and templates.

cdcflow's own (older) expression syntax: pipeline text is parsed with ``ast`` and checked
against a safe subset of Python expressions (simpleeval's: unknown names, unknown functions and
unsupported syntax are rejected with a clear message and column). The checked tree is then translated
once, node by node, into a small Python function (``_Compiler``), the only way an
expression is evaluated: every field read becomes a null-safe accessor, every
size-guarded operator a guarded function (see "Limits" in docs/expressions.md), and
every literal a bound value, so the generated code holds no text of the pipeline.

Conduit's Go templates (``cdcflow.gotemplate``) are parsed by their own parser and translated
into ``_Compiler``'s input too (the node classes ``Bound``, ``Local``, ``Assign``, ``RecordAttr``,
``MapGet``, ``Function`` below): one compiler, one way of evaluating. ``Condition.compile`` and
``Template.compile`` pick the syntax (docs/expressions.md, "Which syntax").

Entry points (all a caller needs):

- ``Expression.compile(text)`` → ``.evaluate(record)``, ``.evaluate_many(records)``
- ``Condition.compile(text)`` → ``.evaluate(record)`` (a bool), ``.evaluate_many(records)``
  (bools, or the ``ExpressionError`` of each failing record)
- ``Template.compile(text)`` → ``.render(record)`` (text), ``.render_many(records)``, ``.evaluate(record)``

In the older syntax the record is reachable as:

- ``Position`` (bytes), ``Operation`` (``"create"``, ``"update"``, ``"delete"``,
  ``"snapshot"``), ``Metadata`` (dict of str), ``Key``, ``Payload.Before``,
  ``Payload.After`` (dict, raw bytes or null).
- ``a.b`` and ``a["b"]`` both read key ``b`` of a mapping; reading a missing key,
  or anything of null, gives null (so conditions on deletes, whose ``After`` is
  null, are simply false instead of failing).
- Attribute access on anything but a mapping is limited to a fixed list of
  string methods, so an expression can never reach Python internals or mutate
  the record (``dict.pop``, ``list.append`` are not reachable).

See docs/expressions.md for the language and the function list.
"""

from __future__ import annotations

import ast
import base64
import datetime as _dt
import decimal
import functools
import math
import re
from typing import Any, Callable

import orjson
import re2
import simpleeval

from .errors import CdcflowError
from .record import Record


class ExpressionError(CdcflowError):
    """An expression does not compile, or failed for one record."""

    def __init__(self, text: str, message: str, *, column: int | None = None):
        self.text = text
        self.column = column
        self.reason = message
        where = f" at column {column}" if column is not None else ""
        super().__init__(f"expression {text!r}{where}: {message}")


# -- limits ---------------------------------------------------------------------
# One record's evaluation must stay cheap whatever the record holds: pipeline text
# and record content could otherwise ask for a 4000000**4000000 or a 70M-character
# string. Past a limit the record fails with an ExpressionError (it is nacked, and
# goes to the DLQ: its content is what asked for the work). docs/expressions.md, "Limits".

#: longest string or list an operator or text function builds (simpleeval's own limit for ``+`` and ``*``)
MAX_TEXT = simpleeval.MAX_STRING_LENGTH
#: most decimal digits of an integer an expression builds (Python's limit for int <-> text)
MAX_INT_DIGITS = 4300
_MAX_INT_BITS = int(MAX_INT_DIGITS * math.log2(10))
#: largest decimal exponent ``decimal()`` accepts and ``int()``/``round()`` turn into an integer
MAX_DECIMAL_EXPONENT = MAX_INT_DIGITS


class EvaluationError(Exception):
    """A function of the language failed for one record with a message meant for the user (Go's
    ``error calling eq: ...``); reported as the record's ExpressionError as it is."""


class LimitExceeded(ArithmeticError):
    """One operation of an expression would pass a limit; reported as the record's ExpressionError."""


def _int_bits(value: Any) -> float:
    """Bits of ``value`` when it is an int (bools too), else 0: only integers grow without bound."""
    return abs(value).bit_length() if isinstance(value, int) else 0


def _too_long(what: str, size: int) -> LimitExceeded:
    return LimitExceeded(f"{what} would be {size:,} long; an expression builds at most {MAX_TEXT:,} "
                         "characters or items (MAX_TEXT)")


def _too_big(what: str) -> LimitExceeded:
    return LimitExceeded(f"{what} would have more than {MAX_INT_DIGITS} digits (MAX_INT_DIGITS)")


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and b * math.log2(abs(a)) > _MAX_INT_BITS:
        raise _too_big(f"{a} ** {b}")
    return simpleeval.safe_power(a, b)


def _mult(a: Any, b: Any) -> Any:
    if _int_bits(a) + _int_bits(b) > _MAX_INT_BITS:
        raise _too_big("a product")
    for seq, n in ((a, b), (b, a)):
        if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)) and n > 0:
            if isinstance(seq, (list, tuple)):
                if n > 1 and any(isinstance(e, (list, tuple, dict, set)) for e in seq):
                    # n references to one container multiply every later walk (toJson, str)
                    raise LimitExceeded("a list holding lists or maps cannot be repeated with *")
                weight = sum(1 + len(e) if isinstance(e, (str, bytes)) else 1 for e in seq)  # items and their text
            else:
                weight = len(seq)
            if weight * n > MAX_TEXT:
                raise _too_long(f"a {type(seq).__name__} repeated {n} times", weight * n)
    return a * b


def _lshift(a: Any, b: Any) -> Any:
    if isinstance(b, int) and _int_bits(a) + b > _MAX_INT_BITS:
        raise _too_big(f"{a} << {b}")
    return simpleeval.safe_lshift(a, b)


# widths and precisions of printf-style formats ('%09999999d'), and '*' taking one from the arguments
_FORMAT_SIZE = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _mod(a: Any, b: Any) -> Any:
    if type(a) is str:
        for m in _FORMAT_SIZE.finditer(a):
            for size in m.groups():
                if size == "*" or (size is not None and int(size) > MAX_TEXT):
                    raise LimitExceeded(f"format widths and precisions are limited to {MAX_TEXT:,} (MAX_TEXT)")
    return a % b


#: the guarded operators, for the translator and the interpreter alike
OPERATORS = {**simpleeval.DEFAULT_OPERATORS, ast.Pow: _pow, ast.Mult: _mult, ast.LShift: _lshift, ast.Mod: _mod}


# -- functions ----------------------------------------------------------------


def _str_of(value: Any) -> str:
    """Text form used by templates and ``toString``: Conduit-like (true/false, JSON for maps)."""
    if value is None:
        return ""
    t = type(value)
    if t is str:
        return value
    if t is bool:
        return "true" if value else "false"
    if t is bytes or t is bytearray:
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, (dict, list, tuple)):
        return _to_json(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _to_json(value: Any) -> str:
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")


def _contains(container: Any, item: Any) -> bool:
    if container is None:
        return False
    return item in container


def _has_prefix(s: Any, prefix: str) -> bool:
    return isinstance(s, str) and s.startswith(prefix)


def _has_suffix(s: Any, suffix: str) -> bool:
    return isinstance(s, str) and s.endswith(suffix)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is reported as the expression's error, not on stderr


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    """RE2 matches in time linear in the text: no pattern can backtrack catastrophically."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        raise ValueError(f"regular expression {pattern!r} is not valid RE2 syntax ({_re2_reason(e)}); "
                         "RE2 has no backreferences or lookaround") from None


def _re2_reason(e: Exception) -> str:
    arg = e.args[0] if e.args else e
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def _matches(s: Any, pattern: str) -> bool:
    return isinstance(s, str) and _regex(pattern).search(s) is not None


def _replace(s: str, old: str, new: str, count: int = -1) -> str:
    grow = len(new) - len(old)
    if grow > 0 and len(s) + (len(s) // max(len(old), 1) + 1) * grow > MAX_TEXT:  # could pass: count exactly
        n = s.count(old) if count < 0 else min(count, s.count(old))
        size = len(s) + n * grow
        if size > MAX_TEXT:  # a replace that leaves a long text no longer is always fine
            raise _too_long("replace's result", size)
    return s.replace(old, new, count)


def _int(value: Any = 0, *base: int) -> int:
    if isinstance(value, decimal.Decimal) and value.is_finite() and value.adjusted() >= MAX_INT_DIGITS:
        raise _too_big(f"int({value})")
    return int(value, *base)


def _round(value: Any, *ndigits: int) -> Any:
    if not ndigits and isinstance(value, decimal.Decimal):
        return _int(value.to_integral_value(decimal.ROUND_HALF_EVEN) if value.is_finite() else value)
    return round(value, *ndigits)


def _decimal_checked(value: decimal.Decimal) -> decimal.Decimal:
    if value.is_finite() and abs(value.adjusted()) > MAX_DECIMAL_EXPONENT:
        raise LimitExceeded(f"decimal {value} has an exponent beyond ±{MAX_DECIMAL_EXPONENT} (MAX_DECIMAL_EXPONENT)")
    return value


def _decimal(value: Any) -> decimal.Decimal:
    return _decimal_checked(decimal.Decimal(str(value)))


def _empty(value: Any) -> bool:
    if value is None or value is False:
        return True
    if isinstance(value, (str, bytes, list, tuple, dict, set)):
        return len(value) == 0
    if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        return value == 0
    return False


def _coalesce(*values: Any) -> Any:
    for v in values:
        if not _empty(v):
            return v
    return None


def _b64enc(value: Any) -> str:
    raw = value if isinstance(value, (bytes, bytearray)) else _str_of(value).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def _b64dec(value: str) -> str:
    return base64.b64decode(value).decode("utf-8")


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _unix_nano() -> int:
    return int(_now().timestamp() * 1_000_000_000)


def _split(s: str, sep: str | None = None) -> list[str]:
    return s.split(sep)


def _join(items: Any, sep: str = "") -> str:
    parts = [_str_of(i) for i in items]
    size = sum(map(len, parts)) + len(sep) * max(len(parts) - 1, 0)
    if size > MAX_TEXT:
        raise _too_long("join's result", size)
    return sep.join(parts)


#: every function an expression may call; nothing else is reachable
FUNCTIONS: dict[str, Callable[..., Any]] = {
    # text
    "upper": lambda s: s.upper(),
    "lower": lambda s: s.lower(),
    "trim": lambda s, chars=None: s.strip(chars),
    "replace": _replace,
    "split": _split,
    "join": _join,
    "contains": _contains,
    "hasPrefix": _has_prefix,
    "hasSuffix": _has_suffix,
    "matches": _matches,
    "toString": _str_of,
    "toJson": _to_json,
    "b64enc": _b64enc,
    "b64dec": _b64dec,
    # values
    "len": len,
    "int": _int,
    "float": float,
    "str": _str_of,
    "bool": bool,
    "decimal": _decimal,
    "abs": abs,
    "min": min,
    "max": max,
    "round": _round,
    "empty": _empty,
    "coalesce": _coalesce,
    "isNull": lambda v: v is None,
    # time
    "now": _now,
    "unixNano": _unix_nano,
}

#: string methods reachable with ``text.method(...)``; every other attribute is a field lookup
STRING_METHODS = frozenset(
    {
        "startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "split", "replace",
        "find", "count", "isdigit", "isalpha", "isalnum", "title", "removeprefix", "removesuffix",
    }
)

#: names bound to the record (per evaluation) and constants
RECORD_NAMES = ("Position", "Operation", "Metadata", "Key", "Payload")
CONSTANTS: dict[str, Any] = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}

_SKIP_NODES = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Expression, ast.keyword)
_REJECTED = {
    ast.ListComp: "comprehensions are not supported",
    ast.SetComp: "comprehensions are not supported",
    ast.DictComp: "comprehensions are not supported",
    ast.GeneratorExp: "comprehensions are not supported",
    ast.Lambda: "lambda is not supported",
    ast.NamedExpr: "assignment is not supported",
    ast.Starred: "* unpacking is not supported",
}


def _field(obj: Any, name: str, text: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    if obj is None:
        return None
    if type(obj) is str and name in STRING_METHODS:
        if name == "replace":
            return functools.partial(_replace, obj)
        return getattr(obj, name)
    if isinstance(obj, (bytes, bytearray)):
        raise ExpressionError(text, f"cannot read field {name!r} of raw data (decode it into structured data first)")
    raise ExpressionError(text, f"{type(obj).__name__} value has no field {name!r}")


def _column(node: ast.AST) -> int | None:
    """1-based column like SyntaxError's, or None for nodes without a position."""
    offset = getattr(node, "col_offset", None)
    return None if offset is None else offset + 1


#: the syntax an expression may use: exactly what ``_Compiler`` translates
_SUPPORTED = frozenset({
    ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Call, ast.BinOp, ast.UnaryOp,
    ast.BoolOp, ast.Compare, ast.IfExp, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.JoinedStr, ast.FormattedValue,
})


def _check(text: str, tree: ast.Expression) -> None:
    """Reject at compile time what would fail for every record."""
    nodes = list(ast.walk(tree))
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}

    def rank(n: ast.AST) -> int:
        # unsupported syntax first, then unknown names ("os.system()" is best explained
        # by "unknown name 'os'"), then the rest; a called name is checked as a function
        if type(n) in _REJECTED:
            return 0
        return 1 if isinstance(n, ast.Name) and id(n) not in called else 2

    nodes.sort(key=rank)
    for node in nodes:
        t = type(node)
        if t in _REJECTED:
            raise ExpressionError(text, _REJECTED[t], column=_column(node))
        if isinstance(node, _SKIP_NODES):
            if isinstance(node, (ast.operator, ast.unaryop, ast.cmpop)) and t not in simpleeval.DEFAULT_OPERATORS:
                raise ExpressionError(text, f"operator {t.__name__} is not supported")
            continue
        if t not in _SUPPORTED:
            raise ExpressionError(text, f"{t.__name__} is not supported", column=_column(node))
        if t is ast.Constant and hasattr(node.value, "__len__") and len(node.value) > MAX_TEXT:  # type: ignore[attr-defined]
            raise ExpressionError(text, f"a literal is limited to {MAX_TEXT:,} characters (MAX_TEXT)", column=_column(node))
        if t is ast.Dict and None in node.keys:  # type: ignore[attr-defined]
            raise ExpressionError(text, "** unpacking is not supported", column=_column(node))
        if t is ast.Name and id(node) not in called:
            if node.id not in RECORD_NAMES and node.id not in CONSTANTS and node.id not in FUNCTIONS:  # type: ignore[attr-defined]
                raise ExpressionError(
                    text,
                    f"unknown name {node.id!r}; the record is {', '.join(RECORD_NAMES)}",  # type: ignore[attr-defined]
                    column=_column(node),
                )
        elif t is ast.Attribute and node.attr.startswith("_"):  # type: ignore[attr-defined]
            raise ExpressionError(text, f"field names starting with '_' need item access: [\"{node.attr}\"]")  # type: ignore[attr-defined]
        elif t is ast.Call:
            func = node.func  # type: ignore[attr-defined]
            if isinstance(func, ast.Name):
                if func.id not in FUNCTIONS:
                    raise ExpressionError(
                        text, f"unknown function {func.id!r} (known: {', '.join(sorted(FUNCTIONS))})", column=_column(func)
                    )
                pattern = node.args[1] if func.id == "matches" and len(node.args) == 2 else None  # type: ignore[attr-defined]
                if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str):
                    try:
                        _regex(pattern.value)
                    except ValueError as e:
                        raise ExpressionError(text, str(e), column=_column(pattern)) from None
            elif isinstance(func, ast.Attribute):
                if func.attr not in STRING_METHODS:
                    raise ExpressionError(
                        text, f"unknown method {func.attr!r} (string methods: {', '.join(sorted(STRING_METHODS))})",
                        column=_column(func),
                    )
            else:
                raise ExpressionError(text, "only named functions can be called", column=_column(node))
            if any(k.arg is None for k in node.keywords):  # type: ignore[attr-defined]
                raise ExpressionError(text, "** unpacking is not supported", column=_column(node))


# -- compilation into Python functions -------------------------------------------------

#: operators that guard sizes (huge strings, numbers, formats: OPERATORS); the others are plain Python
_GUARDED_OPERATORS = (ast.Add, ast.Mult, ast.Pow, ast.LShift, ast.RShift, ast.Mod)
#: functions whose result is always a bool, so a condition built from them needs no bool check
_BOOL_FUNCTIONS = frozenset({"contains", "hasPrefix", "hasSuffix", "matches", "empty", "isNull", "bool"})
_PAYLOAD_PARTS = {"Before": "before", "After": "after"}
_DIGITS = re.compile(r"\d+")


def _item(container: Any, key: Any, text: str) -> Any:
    """``a[b]``: maps give null for a missing key, null gives null, other misses fail the record."""
    if container is None:
        return None
    if isinstance(container, dict):
        return container.get(key)
    try:
        return container[key]
    except (IndexError, KeyError, TypeError) as e:
        raise ExpressionError(text, f"cannot index {type(container).__name__} with {key!r}: {e}") from None


def _formatted(value: Any, spec: str) -> Any:
    """``{value:spec}`` in an f-string; a width or precision past MAX_TEXT is refused before formatting."""
    if any(int(d) > MAX_TEXT for d in _DIGITS.findall(spec)):
        raise LimitExceeded(f"format widths and precisions are limited to {MAX_TEXT:,} (MAX_TEXT)")
    return format(value, spec)


def _joined(parts: list[Any]) -> str:
    """An f-string's text: each part as ``str``, at most MAX_TEXT long."""
    texts = [p if type(p) is str else str(p) for p in parts]
    size = sum(map(len, texts))
    if size > MAX_TEXT:
        raise _too_long("the f-string", size)
    return "".join(texts)


# -- nodes another syntax's translator hands to _Compiler (Go templates: cdcflow.gotemplate) ----------


class Bound(ast.expr):
    """A value (function, constant) the generated code reaches through a bound name."""

    _fields = ("value",)


class Local(ast.expr):
    """A local name of the generated code: the record ``r``, a template variable, a range element."""

    _fields = ("id",)


class Assign(ast.expr):
    """``(name := value)``: a template variable declared or assigned inside the expression."""

    _fields = ("id", "value")


class RecordAttr(ast.expr):
    """``r.<attr>``: one part of the record (``after``, ``metadata``...), read directly."""

    _fields = ("attr",)


class MapGet(ast.expr):
    """``t.get(key, default) if type(t := value) is dict else fallback(t, key)``: a field read whose
    miss and non-map behaviour the other syntax chooses (Go: ``<no value>``, errors on null)."""

    _fields = ("value", "key", "default", "fallback")


class Function(ast.expr):
    """``lambda params: body`` (a Go ``range`` body, evaluated once per element)."""

    _fields = ("params", "body")


class _Compiler:
    """Translates a checked expression tree into a Python expression tree over one record.

    The output uses only names this class binds (record variable, temporaries,
    accessor helpers, functions of ``FUNCTIONS``, literal values): user text never
    becomes an identifier, an attribute or source code. Field access is
    ``v.get(name) if type(v) is dict else _field(v, name, text)`` so maps, the
    common case, cost one inline ``dict.get``. It handles every node of ``_SUPPORTED``.
    """

    def __init__(self, text: str):
        self.text = text
        self.bindings: dict[str, Any] = {}
        self._temps = 0
        self._bound_ids: dict[int, str] = {}

    # names -----------------------------------------------------------------
    def bind(self, value: Any) -> ast.Name:
        name = self._bound_ids.get(id(value))
        if name is None:
            name = f"_k{len(self.bindings)}"
            self.bindings[name] = value
            self._bound_ids[id(value)] = name
        return ast.Name(name, ast.Load())

    def temp(self) -> str:
        self._temps += 1
        return f"_t{self._temps}"

    @staticmethod
    def attr_of_record(attr: str) -> ast.expr:
        return ast.Attribute(ast.Name("r", ast.Load()), attr, ast.Load())

    # nodes -----------------------------------------------------------------
    def expr(self, node: ast.AST) -> ast.expr:
        return getattr(self, f"_{type(node).__name__}")(node)

    def _Constant(self, node: ast.Constant) -> ast.expr:
        value = node.value
        if value is None or type(value) in (bool, int, float):
            return ast.Constant(value)
        return self.bind(value)

    def _Bound(self, node: Bound) -> ast.expr:
        return self.bind(node.value)

    def _Local(self, node: Local) -> ast.expr:
        return ast.Name(node.id, ast.Load())

    def _RecordAttr(self, node: RecordAttr) -> ast.expr:
        return self.attr_of_record(node.attr)

    def _Assign(self, node: Assign) -> ast.expr:
        return ast.NamedExpr(ast.Name(node.id, ast.Store()), self.expr(node.value))

    def _MapGet(self, node: MapGet) -> ast.expr:
        t = self.temp()
        test = ast.Compare(
            ast.Call(self.bind(type), [ast.NamedExpr(ast.Name(t, ast.Store()), self.expr(node.value))], []),
            [ast.Is()], [self.bind(dict)],
        )
        key = self.expr(node.key)
        get = ast.Call(ast.Attribute(ast.Name(t, ast.Load()), "get", ast.Load()), [key, self.expr(node.default)], [])
        return ast.IfExp(test, get, ast.Call(self.expr(node.fallback), [ast.Name(t, ast.Load()), key], []))

    def _Function(self, node: Function) -> ast.expr:
        params = [ast.arg(p) for p in node.params]
        args = ast.arguments(posonlyargs=[], args=params, kwonlyargs=[], kw_defaults=[], defaults=[])
        return ast.Lambda(args, self.expr(node.body))

    def _Name(self, node: ast.Name) -> ast.expr:
        name = node.id
        if name == "Payload":
            return ast.Dict(
                [ast.Constant("Before"), ast.Constant("After")],
                [self.attr_of_record("before"), self.attr_of_record("after")],
            )
        if name == "Metadata":
            return self.attr_of_record("metadata")
        if name == "Key":
            return self.attr_of_record("key")
        if name == "Position":
            return self.attr_of_record("position")
        if name == "Operation":
            return ast.Attribute(self.attr_of_record("operation"), "text", ast.Load())
        if name in CONSTANTS:
            return ast.Constant(CONSTANTS[name])
        return self.bind(FUNCTIONS[name])  # _check let no other name through

    def _payload_part(self, node: ast.AST, part: Any) -> ast.expr | None:
        """``Payload.After`` / ``Payload["After"]`` read the record's attribute directly."""
        if isinstance(node, ast.Name) and node.id == "Payload" and part in _PAYLOAD_PARTS:
            return self.attr_of_record(_PAYLOAD_PARTS[part])
        return None

    def _map_get(self, value: ast.expr, key: ast.expr, fallback: ast.expr, fallback_args: list[ast.expr]) -> ast.expr:
        """``t.get(key) if type(t := value) is dict else fallback(t, key, *args)``."""
        t = self.temp()
        test = ast.Compare(
            ast.Call(self.bind(type), [ast.NamedExpr(ast.Name(t, ast.Store()), value)], []),
            [ast.Is()], [self.bind(dict)],
        )
        get = ast.Call(ast.Attribute(ast.Name(t, ast.Load()), "get", ast.Load()), [key], [])
        slow = ast.Call(fallback, [ast.Name(t, ast.Load()), key, *fallback_args], [])
        return ast.IfExp(test, get, slow)

    def _Attribute(self, node: ast.Attribute) -> ast.expr:
        direct = self._payload_part(node.value, node.attr)
        if direct is not None:
            return direct
        key = ast.Constant(node.attr)  # an identifier checked by _check, not free text
        return self._map_get(self.expr(node.value), key, self.bind(_field), [self.bind(self.text)])

    def _Subscript(self, node: ast.Subscript) -> ast.expr:
        if isinstance(node.slice, ast.Constant):
            direct = self._payload_part(node.value, node.slice.value)
            if direct is not None:
                return direct
        if isinstance(node.slice, ast.Slice):  # x[a:b] of text or a list; never a map key
            return ast.Call(self.bind(_item), [self.expr(node.value), self.expr(node.slice), self.bind(self.text)], [])
        # the test evaluates the container, then exactly one branch evaluates the key
        return self._map_get(self.expr(node.value), self.expr(node.slice), self.bind(_item), [self.bind(self.text)])

    def _Slice(self, node: ast.Slice) -> ast.expr:
        bounds = [ast.Constant(None) if b is None else self.expr(b) for b in (node.lower, node.upper, node.step)]
        return ast.Call(self.bind(slice), bounds, [])

    def _JoinedStr(self, node: ast.JoinedStr) -> ast.expr:
        return ast.Call(self.bind(_joined), [ast.List([self.expr(v) for v in node.values], ast.Load())], [])

    def _FormattedValue(self, node: ast.FormattedValue) -> ast.expr:
        # like simpleeval, a conversion (!r, !s) is not applied: every part becomes str()
        value = self.expr(node.value)
        if node.format_spec is None:
            return value
        return ast.Call(self.bind(_formatted), [value, self.expr(node.format_spec)], [])

    def _Call(self, node: ast.Call) -> ast.expr:
        if isinstance(node.func, ast.Name):
            func = self.bind(FUNCTIONS[node.func.id])
        else:
            func = self.expr(node.func)  # a string method, read like any field
        args = [self.expr(a) for a in node.args]
        keywords = [ast.keyword(k.arg, self.expr(k.value)) for k in node.keywords]
        return ast.Call(func, args, keywords)

    def _BinOp(self, node: ast.BinOp) -> ast.expr:
        left, right = self.expr(node.left), self.expr(node.right)
        if isinstance(node.op, _GUARDED_OPERATORS):
            return ast.Call(self.bind(OPERATORS[type(node.op)]), [left, right], [])
        return ast.BinOp(left, type(node.op)(), right)

    def _UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        return ast.UnaryOp(type(node.op)(), self.expr(node.operand))

    def _BoolOp(self, node: ast.BoolOp) -> ast.expr:
        return ast.BoolOp(type(node.op)(), [self.expr(v) for v in node.values])

    def _Compare(self, node: ast.Compare) -> ast.expr:
        return ast.Compare(self.expr(node.left), [type(o)() for o in node.ops], [self.expr(c) for c in node.comparators])

    def _IfExp(self, node: ast.IfExp) -> ast.expr:
        return ast.IfExp(self.expr(node.test), self.expr(node.body), self.expr(node.orelse))

    def _List(self, node: ast.List) -> ast.expr:
        return ast.List([self.expr(e) for e in node.elts], ast.Load())

    def _Tuple(self, node: ast.Tuple) -> ast.expr:
        return ast.Tuple([self.expr(e) for e in node.elts], ast.Load())

    def _Set(self, node: ast.Set) -> ast.expr:
        return ast.Set([self.expr(e) for e in node.elts])

    def _Dict(self, node: ast.Dict) -> ast.expr:
        return ast.Dict([self.expr(k) for k in node.keys], [self.expr(v) for v in node.values])  # type: ignore[arg-type]


def _always_bool(node: ast.AST) -> bool:
    """True when the expression can only give a bool (so a condition needs no per-record check)."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.Not)
    if isinstance(node, ast.BoolOp):
        return all(_always_bool(v) for v in node.values)
    if isinstance(node, ast.IfExp):
        return _always_bool(node.body) and _always_bool(node.orelse)
    if isinstance(node, ast.Constant):
        return type(node.value) is bool
    if isinstance(node, ast.Name):
        return node.id in CONSTANTS and type(CONSTANTS[node.id]) is bool
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in _BOOL_FUNCTIONS
    return False


def _build_function(text: str, tree: ast.AST, many: bool) -> Callable[..., Any]:
    """``def expression(r): return <tree>`` (or, ``many``, ``def expression_many(records): return
    [<tree> for r in records]``) compiled once; its globals are the compiler's bindings and nothing else."""
    compiler = _Compiler(text)
    value = compiler.expr(tree)
    if many:
        loop = ast.comprehension(ast.Name("r", ast.Store()), ast.Name("records", ast.Load()), [], 0)
        name, arg, value = "expression_many", "records", ast.ListComp(value, [loop])
    else:
        name, arg = "expression", "r"
    fn = ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg)], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[ast.Return(value)],
        decorator_list=[],
        returns=None,
    )
    module = ast.fix_missing_locations(ast.Module([fn], type_ignores=[]))
    namespace: dict[str, Any] = {"__builtins__": {}, **compiler.bindings}
    exec(compile(module, f"<cdcflow {name}>", "exec"), namespace)  # noqa: S102 - tree generated by _Compiler
    return namespace[name]


class Expression:
    """A compiled expression: ``evaluate(record)`` gives its value for one record,
    ``evaluate_many(records)`` the values for a batch in one call."""

    __slots__ = ("text", "_tree", "_fn", "_many")

    def __init__(self, text: str, tree: ast.AST):
        self.text = text
        self._tree = tree
        self._fn: Callable[[Record], Any] = _build_function(text, tree, many=False)
        self._many: Callable[[list[Record]], list[Any]] | None = None  # built on first use

    @classmethod
    def compile(cls, text: str) -> "Expression":
        """Parse and check ``text``; an ``ExpressionError`` (with the column) when it is not valid."""
        source = text.strip()
        if not source:
            raise ExpressionError(text, "empty expression")
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as e:
            # CPython reports offset 0 when the expression ends too early
            raise ExpressionError(text, f"syntax error: {e.msg}", column=e.offset or len(source) + 1) from None
        _check(text, tree)
        return cls(text, tree.body)

    def error(self, e: BaseException) -> ExpressionError:
        """The ExpressionError one record's failure ``e`` is reported as."""
        if isinstance(e, ExpressionError):
            return e
        if isinstance(e, EvaluationError):
            return ExpressionError(self.text, str(e))
        if isinstance(e, LimitExceeded):
            return ExpressionError(self.text, f"limit exceeded: {e}")
        if isinstance(e, simpleeval.InvalidExpression):
            return ExpressionError(self.text, str(e))
        return ExpressionError(self.text, f"{type(e).__name__}: {e}")

    def evaluate(self, record: Record) -> Any:
        try:
            return self._fn(record)
        except Exception as e:  # noqa: BLE001 - any failure is this record's failure, with context
            raise self.error(e) from None

    def evaluate_many(self, records: list[Record]) -> list[Any]:
        """Values for a batch in one call; raises the first record's failure like ``evaluate``."""
        many = self._many
        if many is None:
            many = self._many = _build_function(self.text, self._tree, many=True)
        try:
            return many(records)
        except Exception as e:  # noqa: BLE001
            raise self.error(e) from None

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


class Condition:
    """A processor condition: an expression that must give a bool for each record.

    Conduit renders its condition template and parses the text as a bool; here the
    expression itself must be a bool (``Metadata.table == "users"``), anything else
    is an error for that record (which is nacked).
    """

    __slots__ = ("text", "_expr", "_always_bool")

    def __init__(self, expr: Expression, always_bool: bool | None = None):
        self._expr = expr
        self.text = expr.text
        self._always_bool = _always_bool(expr._tree) if always_bool is None else always_bool

    @classmethod
    def compile(cls, text: str) -> "Condition":
        """A condition holding ``{{`` is Conduit's Go template, rendered and read as a bool (Go's
        ``strconv.ParseBool``); otherwise it is a cdcflow expression that must give a bool."""
        if "{{" in text:
            from . import gofuncs, gotemplate

            body, boolean = gotemplate.translate(text)
            if boolean is None:  # render, then read the text as Conduit does
                boolean = ast.Call(Bound(gofuncs.parse_bool), [body], [])
            return cls(Expression(text, boolean), always_bool=True)
        return cls(Expression.compile(text))

    @property
    def expression(self) -> Expression:
        return self._expr

    def evaluate(self, record: Record) -> bool:
        value = self._expr.evaluate(record)
        if value is True or value is False:
            return value
        raise self.not_bool(value)

    def not_bool(self, value: Any) -> ExpressionError:
        return ExpressionError(self.text, f"condition must be true or false, got {type(value).__name__} {value!r}")

    def evaluate_many(self, records: list[Record]) -> list[bool | ExpressionError]:
        """The condition for a whole batch: one entry per record, ``True``/``False``, or the
        ``ExpressionError`` it gave for that record (the caller nacks those records).

        One call evaluates the batch; only a batch with a failing record is evaluated
        again record by record, to find which records failed.
        """
        try:
            values = self._expr.evaluate_many(records)
        except ExpressionError:
            values = None
        if values is not None and (self._always_bool or _only_bools(values)):
            return values
        return _one_by_one(self.evaluate, records)

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"


def _one_by_one(fn: Callable[[Record], Any], records: list[Record]) -> list[Any]:
    """``fn`` for each record, a failing record's ``ExpressionError`` in its place (after a batch
    call failed, to find which records fail)."""
    out: list[Any] = []
    for r in records:
        try:
            out.append(fn(r))
        except ExpressionError as e:
            out.append(e)
    return out


def _only_bools(values: list[Any]) -> bool:
    return set(map(type, values)) <= {bool}


def _placeholder_end(text: str, i: int) -> int:
    """Index of the ``}}`` closing a placeholder whose expression starts at ``i``;
    braces inside string literals do not count. -1 when there is none."""
    quote = ""
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "}" and text.startswith("}}", i):
            return i
        i += 1
    return -1


class Template:
    """Text with ``{{ expression }}`` placeholders; text outside them is literal.

    ``render`` always gives a string (Conduit's templates produce text): null → "",
    bools → true/false, maps/lists → JSON, bytes → UTF-8 text. ``evaluate`` gives the
    native value when the template is exactly one placeholder, for callers that keep types.
    """

    __slots__ = ("text", "_parts", "_single", "_gives_text")

    def __init__(self, text: str, parts: list[str | Expression], gives_text: bool = False):
        self.text = text
        self._parts = parts
        self._single: Expression | None = parts[0] if len(parts) == 1 and isinstance(parts[0], Expression) else None
        self._gives_text = gives_text  # the expression already gives the text (a Go template)

    @classmethod
    def compile(cls, text: str) -> "Template":
        """Conduit's Go ``text/template`` when ``gotemplate.is_go_template`` says so (docs/expressions.md,
        "Which syntax"), else cdcflow's ``{{ expression }}`` placeholders."""
        from . import gotemplate

        if gotemplate.is_go_template(text):
            body, _ = gotemplate.translate(text)
            if isinstance(body, ast.Constant):  # only text (and comments): a constant
                return cls(text, [body.value] if body.value else [])
            return cls(text, [Expression(text, body)], gives_text=True)
        parts: list[str | Expression] = []
        pos = 0
        while True:
            start = text.find("{{", pos)
            if start < 0:
                break
            end = _placeholder_end(text, start + 2)
            if end < 0:
                raise ExpressionError(text, "unbalanced '{{' / '}}' (write a literal brace pair as {{ \"{{\" }})")
            if start > pos:
                parts.append(text[pos:start])
            inner = text[start + 2 : end]
            try:
                parts.append(Expression.compile(inner))
            except ExpressionError as e:
                column = None
                if e.column is not None:
                    column = start + 2 + len(inner) - len(inner.lstrip()) + e.column
                raise ExpressionError(text, f"in {text[start:end + 2]!r}: {e.reason}", column=column) from None
            pos = end + 2
        if pos < len(text):
            parts.append(text[pos:])
        return cls(text, parts)

    @property
    def is_literal(self) -> bool:
        return not any(isinstance(p, Expression) for p in self._parts)

    @property
    def constant(self) -> str:
        """The text of a literal template (Go's trim markers and comments already applied)."""
        return "".join(p for p in self._parts if type(p) is str)

    def render(self, record: Record) -> str:
        single = self._single
        if single is not None:
            return self._text(single.evaluate(record))
        out = []
        for p in self._parts:
            out.append(p if type(p) is str else self._text(p.evaluate(record)))  # type: ignore[union-attr]
        return "".join(out)

    def _text(self, value: Any) -> str:
        """A placeholder's value as text; a value with no text form fails the record, not the batch."""
        try:
            return _str_of(value)
        except (TypeError, ValueError) as e:
            raise ExpressionError(self.text, f"the value has no text form: {e}") from None

    def render_many(self, records: list[Record]) -> list[str | ExpressionError]:
        """Texts for a batch: one call when the template is one expression (every Go template is),
        else record by record. A record that fails has its ``ExpressionError`` in its place."""
        single = self._single
        if single is not None:
            try:
                values = single.evaluate_many(records)
            except ExpressionError:
                values = None  # some record failed: find which, one by one
            if values is not None:
                if self._gives_text:
                    return values
                try:
                    return [v if type(v) is str else _str_of(v) for v in values]
                except (TypeError, ValueError):
                    pass  # a value with no text form: that record's failure, found one by one
        return _one_by_one(self.render, records)

    def evaluate(self, record: Record) -> Any:
        if self._single is not None:
            return self._single.evaluate(record)
        return self.render(record)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"


def to_text(value: Any) -> str:
    """The text a template gives for ``value`` (shared with transforms that stringify)."""
    return _str_of(value)
