"""The one expression language for processor conditions and templates.

Built on ``simpleeval``: pipeline text is parsed with ``ast`` and walked by an
interpreter that only knows a safe subset of Python expressions; nothing is ever
passed to ``eval``. Expressions are compiled once (parse + static checks that
reject unknown names, unknown functions and unsupported syntax with a clear
message), then evaluated per record against a light view of it:

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
import re
from typing import Any, Callable

import orjson
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


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _matches(s: Any, pattern: str) -> bool:
    return isinstance(s, str) and _regex(pattern).search(s) is not None


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
    return sep.join(_str_of(i) for i in items)


#: every function an expression may call; nothing else is reachable
FUNCTIONS: dict[str, Callable[..., Any]] = {
    # text
    "upper": lambda s: s.upper(),
    "lower": lambda s: s.lower(),
    "trim": lambda s, chars=None: s.strip(chars),
    "replace": lambda s, old, new: s.replace(old, new),
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
    "int": int,
    "float": float,
    "str": _str_of,
    "bool": bool,
    "decimal": lambda v: decimal.Decimal(str(v)),
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
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


class _RecordNames:
    """What names resolve to while one record is evaluated; swapped per record, no copies."""

    __slots__ = ("record",)

    def __init__(self) -> None:
        self.record: Record | None = None

    def __getitem__(self, name: str) -> Any:
        r = self.record
        if name == "Payload":
            return {"Before": r.before, "After": r.after}  # type: ignore[union-attr]
        if name == "Metadata":
            return r.metadata  # type: ignore[union-attr]
        if name == "Key":
            return r.key  # type: ignore[union-attr]
        if name == "Operation":
            return r.operation.text  # type: ignore[union-attr]
        if name == "Position":
            return r.position  # type: ignore[union-attr]
        return CONSTANTS[name]


class _Evaluator(simpleeval.EvalWithCompoundTypes):
    """simpleeval with record-friendly, side-effect-free field access."""

    def __init__(self) -> None:
        super().__init__(functions=dict(FUNCTIONS), names=_RecordNames())
        # comprehensions are rejected at compile time; keep the interpreter from knowing them at all
        for node_type in (ast.ListComp, ast.GeneratorExp, ast.DictComp):
            self.nodes.pop(node_type, None)

    def _check_disallowed_items(self, item: Any) -> None:
        # Values come only from record data (plain data types), literals and FUNCTIONS;
        # attribute access below cannot reach modules or callables other than
        # whitelisted string methods, so simpleeval's recursive scan of every
        # intermediate result (costly for wide rows) has nothing to find.
        return None

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        obj = self._eval(node.value)
        return _field(obj, node.attr, self.expr)

    def _eval_subscript(self, node: ast.Subscript) -> Any:
        container = self._eval(node.value)
        key = self._eval(node.slice)
        if container is None:
            return None
        if isinstance(container, dict):
            return container.get(key)
        try:
            return container[key]
        except (IndexError, KeyError, TypeError) as e:
            raise ExpressionError(self.expr, f"cannot index {type(container).__name__} with {key!r}: {e}") from None


def _field(obj: Any, name: str, text: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    if obj is None:
        return None
    if type(obj) is str and name in STRING_METHODS:
        return getattr(obj, name)
    if isinstance(obj, (bytes, bytearray)):
        raise ExpressionError(text, f"cannot read field {name!r} of raw data (decode it into structured data first)")
    raise ExpressionError(text, f"{type(obj).__name__} value has no field {name!r}")


def _column(node: ast.AST) -> int | None:
    """1-based column like SyntaxError's, or None for nodes without a position."""
    offset = getattr(node, "col_offset", None)
    return None if offset is None else offset + 1


def _check(text: str, tree: ast.Expression, known_nodes: set[type]) -> None:
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
        if t not in known_nodes:
            raise ExpressionError(text, f"{t.__name__} is not supported", column=_column(node))
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
            elif isinstance(func, ast.Attribute):
                if func.attr not in STRING_METHODS:
                    raise ExpressionError(
                        text, f"unknown method {func.attr!r} (string methods: {', '.join(sorted(STRING_METHODS))})",
                        column=_column(func),
                    )
            else:
                raise ExpressionError(text, "only named functions can be called", column=_column(node))


class Expression:
    """A compiled expression. ``evaluate(record)`` returns its value for that record."""

    __slots__ = ("text", "_tree", "_ev", "_names")

    def __init__(self, text: str, tree: ast.AST):
        self.text = text
        self._tree = tree
        self._ev = _Evaluator()
        self._names: _RecordNames = self._ev.names

    @classmethod
    def compile(cls, text: str) -> "Expression":
        source = text.strip()
        if not source:
            raise ExpressionError(text, "empty expression")
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as e:
            # CPython reports offset 0 when the expression ends too early
            raise ExpressionError(text, f"syntax error: {e.msg}", column=e.offset or len(source) + 1) from None
        probe = _Evaluator()
        _check(text, tree, set(probe.nodes))
        return cls(text, tree.body)

    def evaluate(self, record: Record) -> Any:
        self._names.record = record
        try:
            return self._ev.eval(self.text, previously_parsed=self._tree)
        except ExpressionError:
            raise
        except simpleeval.InvalidExpression as e:
            raise ExpressionError(self.text, str(e)) from None
        except Exception as e:  # noqa: BLE001 - any failure is this record's failure, with context
            raise ExpressionError(self.text, f"{type(e).__name__}: {e}") from None
        finally:
            self._names.record = None

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


class Condition:
    """A processor condition: an expression that must give a bool for each record.

    Conduit renders its condition template and parses the text as a bool; here the
    expression itself must be a bool (``Metadata.table == "users"``), anything else
    is an error for that record (which is nacked).
    """

    __slots__ = ("text", "_expr")

    def __init__(self, expr: Expression):
        self._expr = expr
        self.text = expr.text

    @classmethod
    def compile(cls, text: str) -> "Condition":
        return cls(Expression.compile(text))

    def evaluate(self, record: Record) -> bool:
        value = self._expr.evaluate(record)
        if value is True or value is False:
            return value
        raise ExpressionError(self.text, f"condition must be true or false, got {type(value).__name__} {value!r}")

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"


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

    __slots__ = ("text", "_parts", "_single")

    def __init__(self, text: str, parts: list[str | Expression]):
        self.text = text
        self._parts = parts
        self._single: Expression | None = parts[0] if len(parts) == 1 and isinstance(parts[0], Expression) else None

    @classmethod
    def compile(cls, text: str) -> "Template":
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

    def render(self, record: Record) -> str:
        single = self._single
        if single is not None:
            return _str_of(single.evaluate(record))
        out = []
        for p in self._parts:
            out.append(p if type(p) is str else _str_of(p.evaluate(record)))  # type: ignore[union-attr]
        return "".join(out)

    def evaluate(self, record: Record) -> Any:
        if self._single is not None:
            return self._single.evaluate(record)
        return self.render(record)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"


def to_text(value: Any) -> str:
    """The text a template gives for ``value`` (shared with transforms that stringify)."""
    return _str_of(value)
