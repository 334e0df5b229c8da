"""Go template values and functions: how Conduit's templates see a record, print, compare and call.

``cdcflow.gotemplate`` parses Go ``text/template`` text and translates it for the one
expression compiler (``cdcflow.expr._Compiler``); the generated code calls the helpers here.
They follow Go's ``text/template`` and sprig where Conduit's users can see the difference
(what a missing map key prints, which comparisons fail, how ``printf`` verbs format) and
keep ``cdcflow.expr``'s limits (``MAX_TEXT``, RE2). docs/expressions.md lists them and the
few places cdcflow differs.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import re
import urllib.parse
from typing import Any, Callable, NamedTuple

import orjson

from .expr import MAX_TEXT, EvaluationError, LimitExceeded, _coalesce, _empty, _regex, _replace, _to_json, _too_long
from .expr import _join as _join_texts
from .record import Operation, Record


class GoExecError(EvaluationError):
    """A template failed for one record the way Go's ``Execute`` fails (reported as its ExpressionError)."""


class _NoValue:
    """Go's invalid value: what a missing map key gives. It prints ``<no value>``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no value>"

    def __bool__(self) -> bool:
        return False


#: a missing map key (Go's invalid reflect.Value with the default ``missingkey`` option)
MISSING = _NoValue()


class Change(NamedTuple):
    """``.Payload`` as a value (``opencdc.Change``): printed ``{before after}``."""

    before: Any
    after: Any


class Position(bytes):
    """``.Position``: bytes that print as text (``opencdc.Position`` has a ``String`` method)."""

    __slots__ = ()


# -- type names and printing (fmt's %v) --------------------------------------------------------


def type_name(value: Any) -> str:
    """The Go type a value has in Conduit's record (for errors, ``%T`` and ``typeIs``)."""
    t = type(value)
    if value is MISSING or value is None:
        return "<nil>"
    if t is str:
        return "string"
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is float or t is decimal.Decimal:
        return "float64"
    if t is Position:
        return "opencdc.Position"
    if isinstance(value, Operation):
        return "opencdc.Operation"
    if t is bytes or t is bytearray:
        return "opencdc.RawData"
    if t is dict:
        return "opencdc.StructuredData"
    if t is list or t is tuple:
        return "[]interface {}"
    if t is Change:
        return "opencdc.Change"
    if t is Record:
        return "opencdc.Record"
    if isinstance(value, _dt.datetime):
        return "time.Time"
    return t.__name__


def go_float(x: float) -> str:
    """``strconv.FormatFloat(x, 'g', -1, 64)``: shortest digits, exponent form below 1e-4 or from 1e6 (fmt's %v)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "+Inf" if x > 0 else "-Inf"
    d = decimal.Decimal(repr(x))
    sign, digits, exp = d.as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exp  # position of the decimal point in the digit string
    e = point - 1
    if text == "0":
        return "-0" if sign else "0"
    if e < -4 or e >= 6:  # with the shortest digits Go decides at precision 6
        mant = text[0] + ("." + text[1:] if len(text) > 1 else "")
        out = f"{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    elif point <= 0:
        out = "0." + "0" * (-point) + text
    elif point >= len(text):
        out = text + "0" * (point - len(text))
    else:
        out = text[:point] + "." + text[point:]
    return "-" + out if sign else out


def go_time(t: _dt.datetime) -> str:
    """``time.Time``'s ``String``: ``2006-01-02 15:04:05.999999999 -0700 MST``."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond:06d}".rstrip("0")
    offset = t.strftime("%z")
    zone = "UTC" if offset == "+0000" else t.tzname() or offset
    return f"{text} {offset} {zone}"


def sprint(value: Any) -> str:
    """fmt's ``%v`` of one value, as ``{{ value }}`` prints it."""
    t = type(value)
    if t is str:
        return value
    if value is MISSING:
        return "<no value>"
    if value is None:
        return "<nil>"
    if t is bool:
        return "true" if value else "false"
    if t is int:
        return str(value)
    if t is float:
        return go_float(value)
    if t is Position:
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Operation):
        return value.text if value else "Operation(0)"
    if t is bytes or t is bytearray:
        return "[" + " ".join(map(str, value)) + "]"
    if t is dict:
        return "map[" + " ".join(f"{sprint(k)}:{sprint(value[k])}" for k in sorted(value, key=_sort_key)) + "]"
    if t is list or t is tuple:
        return "[" + " ".join(map(sprint, value)) + "]"
    if t is Change:
        return "{" + sprint(value.before) + " " + sprint(value.after) + "}"
    if t is Record:
        return "{" + " ".join(sprint(v) for v in (Position(value.position), value.operation, value.metadata,
                                                    value.key, Change(value.before, value.after))) + "}"
    if isinstance(value, _dt.datetime):
        return go_time(value)
    return str(value)


def _sort_key(k: Any) -> tuple[str, Any]:
    return (type(k).__name__, k)


def text_of(value: Any) -> str:
    """One action's output; refuses text past MAX_TEXT like every other builder."""
    out = sprint(value)
    if len(out) > MAX_TEXT:
        raise _too_long("an action's output", len(out))
    return out


def strval(value: Any) -> str:
    """sprig's ``strval``: strings as they are, ``[]byte`` as text, anything else as ``%v``."""
    if type(value) is str:
        return value
    if type(value) is Position:  # a Stringer; RawData is not []byte to sprig, so it prints as %v
        return bytes(value).decode("utf-8", "replace")
    if value is MISSING:
        return "<nil>"
    return sprint(value)


# -- truth, fields, comparison ---------------------------------------------------------------


def truth(value: Any) -> bool:
    """Go's ``if``/``with``/``and``/``or``/``not`` truth: the zero value and empty things are false."""
    if value is None or value is MISSING:
        return False
    t = type(value)
    if t is bool:
        return value
    if t in (str, bytes, bytearray, list, tuple, dict, Position):
        return len(value) > 0
    if t in (int, float, decimal.Decimal) or isinstance(value, Operation):
        return value != 0
    return True


def field(value: Any, name: str) -> Any:
    """``value.name`` for a value only known when the record is there (inside ``with``/``range``, variables)."""
    t = type(value)
    if t is dict:
        return value.get(name, MISSING)
    if value is MISSING:
        return MISSING
    if t is Record:
        return record_field(value, name)
    if t is Change:
        if name == "Before":
            return value.before
        if name == "After":
            return value.after
    elif isinstance(value, Operation) and name == "String":
        return sprint(value)
    elif t is Position and name == "String":
        return sprint(value)
    elif value is None:
        raise GoExecError(f"nil pointer evaluating opencdc.Data.{name}")
    raise GoExecError(f"can't evaluate field {name} in type {type_name(value)}")


def record_field(r: Record, name: str) -> Any:
    if name == "Payload":
        return Change(r.before, r.after)
    if name == "Metadata":
        return r.metadata
    if name == "Key":
        return r.key
    if name == "Operation":
        return r.operation
    if name == "Position":
        return Position(r.position)
    raise GoExecError(f"can't evaluate field {name} in type opencdc.Record")


def data_field(value: Any, name: str) -> Any:
    """``.Key.x``, ``.Payload.After.x`` when the data is not a map: raw data and null fail as in Conduit."""
    if value is None:
        raise GoExecError(f"nil pointer evaluating opencdc.Data.{name}")
    return field(value, name)


_INT, _FLOAT, _STRING, _BOOL = 1, 2, 3, 4


def _kind(v: Any) -> int:
    t = type(v)
    if t is str:
        return _STRING
    if t is bool:
        return _BOOL
    if t is int or isinstance(v, Operation):
        return _INT
    if t is float or t is decimal.Decimal:
        return _FLOAT
    return 0


def eq(a: Any, *others: Any) -> bool:
    """Go's ``eq``: true when ``a`` equals any of ``others``; different basic kinds fail (numbers excepted)."""
    if not others:
        raise GoExecError("error calling eq: missing argument for comparison")
    ka = _kind(a)
    for b in others:
        kb = _kind(b)
        if ka != kb:
            if ka in (_INT, _FLOAT) and kb in (_INT, _FLOAT):
                # cdcflow keeps integer fields as integers where Conduit's JSON has float64: compare the numbers
                if a == b:
                    return True
                continue
            if a is MISSING or b is MISSING or a is None or b is None:
                if (a is None or a is MISSING) and (b is None or b is MISSING):
                    return True
                continue
            raise GoExecError("error calling eq: incompatible types for comparison")
        if ka == 0:
            if not _comparable(a) or not _comparable(b):
                raise GoExecError(f"error calling eq: non-comparable types {type_name(a)}, {type_name(b)}")
        if a == b:
            return True
    return False


def _comparable(v: Any) -> bool:
    return type(v) not in (dict, list, tuple, bytes, bytearray)


def ne(a: Any, b: Any) -> bool:
    return not eq(a, b)


def _ordered(name: str, a: Any, b: Any) -> tuple[Any, Any]:
    ka, kb = _kind(a), _kind(b)
    if ka == 0 or kb == 0 or ka == _BOOL or kb == _BOOL:
        raise GoExecError(f"error calling {name}: invalid type for comparison")
    if ka != kb and not (ka in (_INT, _FLOAT) and kb in (_INT, _FLOAT)):
        raise GoExecError(f"error calling {name}: incompatible types for comparison")
    return a, b


def lt(a: Any, b: Any) -> bool:
    a, b = _ordered("lt", a, b)
    return a < b


def le(a: Any, b: Any) -> bool:
    a, b = _ordered("le", a, b)
    return a <= b


def gt(a: Any, b: Any) -> bool:
    a, b = _ordered("gt", a, b)
    return a > b


def ge(a: Any, b: Any) -> bool:
    a, b = _ordered("ge", a, b)
    return a >= b


def not_(value: Any) -> bool:
    return not truth(value)


# -- argument checks ---------------------------------------------------------------------------


def _s(name: str, value: Any) -> str:
    """A ``string`` parameter: Go refuses anything else when it calls the function."""
    if type(value) is str:
        return value
    if value is MISSING:
        raise GoExecError(f"error calling {name}: invalid value; expected string")
    raise GoExecError(f"error calling {name}: wrong type for value; expected string; got {type_name(value)}")


def _nil(value: Any) -> Any:
    """An ``interface{}`` parameter: a missing key arrives as nil."""
    return None if value is MISSING else value


def _int(name: str, value: Any) -> int:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    raise GoExecError(f"error calling {name}: wrong type for value; expected int; got {type_name(value)}")


def _checked(name: str, text: str) -> str:
    if len(text) > MAX_TEXT:
        raise _too_long(f"{name}'s result", len(text))
    return text


# -- Go's built-in template functions ----------------------------------------------------------


def index(item: Any, *keys: Any) -> Any:
    for key in keys:
        key = _nil(key)
        if item is None or item is MISSING:
            raise GoExecError("error calling index: index of untyped nil")
        t = type(item)
        if t is dict:
            item = item.get(key)
        elif t in (list, tuple, str, bytes, bytearray, Position):
            if type(key) is not int:
                raise GoExecError(f"error calling index: cannot index slice/array with type {type_name(key)}")
            if not 0 <= key < len(item):
                raise GoExecError(f"error calling index: index out of range: {key}")
            item = item[key]
        else:
            raise GoExecError(f"error calling index: can't index item of type {type_name(item)}")
    return item


def metadata_index(metadata: Any, key: Any) -> str:
    """``index .Metadata "k"``: a missing key is the map's zero value, ""."""
    return metadata.get(_s("index", key), "")


def length(value: Any) -> int:
    if value is None or value is MISSING:
        raise GoExecError("error calling len: len of nil pointer")
    if type(value) in (str, bytes, bytearray, list, tuple, dict, Position):
        return len(value)
    raise GoExecError(f"error calling len: len of type {type_name(value)}")


def go_print(*args: Any) -> str:
    """``print`` (fmt.Sprint): a space between operands when neither is a string."""
    out: list[str] = []
    prev_string = True
    for i, a in enumerate(args):
        a = _nil(a)
        is_string = type(a) is str
        if i and not is_string and not prev_string:
            out.append(" ")
        out.append(sprint(a))
        prev_string = is_string
    return _checked("print", "".join(out))


def go_println(*args: Any) -> str:
    return _checked("println", " ".join(sprint(_nil(a)) for a in args) + "\n")


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+))?(.)", re.S)


def _quote(s: str) -> str:
    """``strconv.Quote``: double-quoted with Go's escapes (printable Unicode kept)."""
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x80 else (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"))
    out.append('"')
    return "".join(out)


def _bad_verb(verb: str, value: Any) -> str:
    if value is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({type_name(value)}={sprint(value)})"


def _format_one(flags: str, width: str | None, prec: str | None, verb: str, value: Any) -> str:
    t = type(value)
    if verb in "vs":
        if verb == "s" and t in (bytes, bytearray, Position):
            text = bytes(value).decode("utf-8", "replace")
        elif verb == "s" and t not in (str,) and (t in (int, float, bool) or value is None):
            return _pad(flags, width, _bad_verb(verb, value))
        else:
            text = sprint(value)
        if prec is not None:
            text = text[: int(prec)]
    elif verb == "d":
        if t is int or isinstance(value, Operation):
            text = format(int(value), "+d" if "+" in flags else "d")
            if "0" in flags and width and "-" not in flags:
                return format(int(value), ("+" if "+" in flags else "") + "0" + width + "d")
        else:
            return _pad(flags, width, _bad_verb(verb, value))
    elif verb in "feEgG":
        if t in (float, int, decimal.Decimal) and t is not bool:
            p = 6 if prec is None else int(prec)
            if verb in "gG" and prec is None:
                text = go_float(float(value))
            else:
                text = format(float(value), ("+" if "+" in flags else "") + f".{p}{verb}")
            if "0" in flags and width and "-" not in flags:
                return text.rjust(int(width), "0") if text[0] not in "+-" else text[0] + text[1:].rjust(int(width) - 1, "0")
        else:
            return _pad(flags, width, _bad_verb(verb, value))
    elif verb == "q":
        if t is str:
            text = _quote(value)
        elif t in (bytes, bytearray, Position):
            text = _quote(bytes(value).decode("utf-8", "replace"))
        elif t is int:
            text = "'" + chr(value) + "'"
        else:
            return _pad(flags, width, _bad_verb(verb, value))
    elif verb == "t":
        if t is not bool:
            return _pad(flags, width, _bad_verb(verb, value))
        text = "true" if value else "false"
    elif verb in "xX":
        if t is int:
            text = format(value, verb)
        elif t is str:
            text = value.encode("utf-8").hex()
        elif t in (bytes, bytearray, Position):
            text = bytes(value).hex()
        else:
            return _pad(flags, width, _bad_verb(verb, value))
        if verb == "X":
            text = text.upper()
    elif verb == "T":
        text = type_name(value) if value is not None else "<nil>"
    else:
        return f"%!{verb}({type_name(value)}={sprint(value)})"
    return _pad(flags, width, text)


def _pad(flags: str, width: str | None, text: str) -> str:
    if not width:
        return text
    return text.ljust(int(width)) if "-" in flags else text.rjust(int(width))


def printf(fmt: Any, *args: Any) -> str:
    """``printf`` (fmt.Sprintf) with the verbs templates use: %v %s %d %q %f %e %g %t %x %X %T %%."""
    fmt = _s("printf", fmt)
    out: list[str] = []
    pos = 0
    arg = 0
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, verb = m.groups()
        for size in (width, prec):
            if size is not None and int(size) > MAX_TEXT:
                raise LimitExceeded(f"format widths and precisions are limited to {MAX_TEXT:,} (MAX_TEXT)")
        if verb == "%":
            out.append("%")
            continue
        if arg >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(_format_one(flags, width, prec, verb, _nil(args[arg])))
        arg += 1
    out.append(fmt[pos:])
    if arg < len(args):
        extra = ", ".join(f"{type_name(_nil(a))}={sprint(_nil(a))}" for a in args[arg:])
        out.append(f"%!(EXTRA {extra})")
    return _checked("printf", "".join(out))


def _escape(text: str, table: dict[str, str]) -> str:
    return "".join(table.get(c, c) for c in text)


_HTML = {"<": "&lt;", ">": "&gt;", "&": "&amp;", "'": "&#39;", '"': "&#34;", "\x00": "\ufffd"}
_JS = {"\\": "\\\\", "'": "\\'", '"': "\\\"", "<": "\\u003C", ">": "\\u003E", "&": "\\u0026", "=": "\\u003D",
       "\n": "\\u000A", "\r": "\\u000D", "\t": "\\u0009"}


def html(*args: Any) -> str:
    return _checked("html", _escape(go_print(*args), _HTML))


def js(*args: Any) -> str:
    return _checked("js", _escape(go_print(*args), _JS))


def urlquery(*args: Any) -> str:
    return _checked("urlquery", urllib.parse.quote_plus(go_print(*args), safe=""))


def and_(*args: Any) -> Any:
    # the generated code short-circuits; this is the function form (e.g. at the end of a pipeline)
    for a in args[:-1]:
        if not truth(a):
            return a
    return args[-1]


def or_(*args: Any) -> Any:
    for a in args[:-1]:
        if truth(a):
            return a
    return args[-1]


# -- sprig (the subset Conduit's docs and examples use) ---------------------------------------


def empty(value: Any) -> bool:
    return _empty(_nil(value))


def default(default_value: Any, *given: Any) -> Any:
    if not given or empty(given[0]):
        return default_value
    return given[0]


def to_json(value: Any) -> str:
    """sprig's ``toJson`` (encoding/json: sorted keys, HTML characters escaped); a record as Conduit's JSON form."""
    value = _nil(value)
    if type(value) is Record:
        from .convert.jsonform import dumps_record  # the record's one JSON form

        text = dumps_record(value).decode("utf-8")
    else:
        if type(value) is Change:
            value = {"before": value.before, "after": value.after}
        elif type(value) is Position or isinstance(value, Operation):
            value = sprint(value)
        text = orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS).decode()
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _checked("toJson", text)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return float(value)
    return orjson.loads(_to_json(value))


def from_json(text: Any) -> Any:
    try:
        return orjson.loads(_s("fromJson", text))
    except orjson.JSONDecodeError:
        return {}


def title(s: Any) -> str:
    """``strings.Title``: the first letter of each word upper-cased, the rest left alone."""
    s = _s("title", s)
    return re.sub(r"(^|[^\w'])(\w)", lambda m: m.group(1) + m.group(2).upper(), s)


def _sprig_replace(old: Any, new: Any, s: Any) -> str:
    return _replace(_s("replace", s), _s("replace", old), _s("replace", new))


def _split_map(sep: Any, s: Any) -> dict[str, str]:
    return {f"_{i}": part for i, part in enumerate(_s("split", s).split(_s("split", sep)))}


def _join(sep: Any, items: Any) -> str:
    if type(items) is str:
        return items
    if type(items) not in (list, tuple):
        return strval(items)
    return _join_texts([strval(i) for i in items], _s("join", sep))


def _b64dec(s: Any) -> str:
    try:
        return base64.b64decode(_s("b64dec", s), validate=True).decode("utf-8", "replace")
    except (ValueError, TypeError) as e:
        return str(e)


def _b64enc(s: Any) -> str:
    return _checked("b64enc", base64.b64encode(_s("b64enc", s).encode("utf-8")).decode("ascii"))


def _atoi(s: Any) -> int:
    try:
        return int(_s("atoi", s))
    except ValueError:
        return 0


def _to_int(value: Any) -> int:
    """sprig's ``int``/``int64`` (cast.ToInt): numbers truncated, numeric text parsed, anything else 0."""
    value = _nil(value)
    t = type(value)
    if t is bool:
        return int(value)
    if t in (int, float, decimal.Decimal):
        return int(value)
    if t is str:
        try:
            return int(value, 0) if not value.lstrip("-+").startswith("0") or value.strip("-+") == "0" else int(value)
        except ValueError:
            return 0
    return 0


def _to_float(value: Any) -> float:
    value = _nil(value)
    if type(value) in (int, float, decimal.Decimal, bool):
        return float(value)
    if type(value) is str:
        try:
            return float(value)
        except ValueError:
            return 0.0
    return 0.0


def _regex_match(pattern: Any, s: Any) -> bool:
    try:
        return _regex(_s("regexMatch", pattern)).search(_s("regexMatch", s)) is not None
    except ValueError as e:
        raise GoExecError(f"error calling regexMatch: {e}") from None


def _regex_replace_all(pattern: Any, s: Any, repl: Any) -> str:
    try:
        rx = _regex(_s("regexReplaceAll", pattern))
    except ValueError as e:
        raise GoExecError(f"error calling regexReplaceAll: {e}") from None
    repl = re.sub(r"\$\{?(\w+)\}?", lambda m: "\\g<" + m.group(1) + ">", _s("regexReplaceAll", repl))
    return _checked("regexReplaceAll", rx.sub(repl, _s("regexReplaceAll", s)))


def _quote_all(*args: Any) -> str:
    return " ".join(_quote(strval(a)) for a in args if _nil(a) is not None)


def _squote_all(*args: Any) -> str:
    return " ".join("'" + strval(a) + "'" for a in args if _nil(a) is not None)


def _cat(*args: Any) -> str:
    return _checked("cat", " ".join(strval(a) for a in args if _nil(a) is not None))


def _substr(start: Any, end: Any, s: Any) -> str:
    start, end, s = _int("substr", start), _int("substr", end), _s("substr", s)
    if start < 0:
        return s[:end]
    if end < 0 or end > len(s):
        return s[start:]
    return s[start:end]


def _trunc(n: Any, s: Any) -> str:
    n, s = _int("trunc", n), _s("trunc", s)
    if n < 0:
        return s[max(len(s) + n, 0):] if -n < len(s) else s
    return s[:n]


def _repeat(count: Any, s: Any) -> str:
    count, s = _int("repeat", count), _s("repeat", s)
    if count * len(s) > MAX_TEXT:
        raise _too_long(f"repeat {count}", count * len(s))
    return s * max(count, 0)


def _dict(*pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(0, len(pairs), 2):
        out[strval(pairs[i])] = _nil(pairs[i + 1]) if i + 1 < len(pairs) else ""
    return out


def _get(d: Any, key: Any) -> Any:
    if type(d) is not dict:
        raise GoExecError(f"error calling get: wrong type for value; expected map[string]interface {{}}; got {type_name(d)}")
    return d.get(_s("get", key), "")


def _set(d: Any, key: Any, value: Any) -> Any:
    if type(d) is not dict:
        raise GoExecError(f"error calling set: wrong type for value; expected map[string]interface {{}}; got {type_name(d)}")
    d[_s("set", key)] = _nil(value)
    return d


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


#: Go reference-time layout elements → strftime (longest first)
_LAYOUT = [
    ("2006", "%Y"), ("January", "%B"), ("Monday", "%A"), ("MST", "%Z"), ("-07:00", "%:z"), ("-0700", "%z"),
    ("Z07:00", "Z%:z"), ("Jan", "%b"), ("Mon", "%a"), ("01", "%m"), ("02", "%d"), ("15", "%H"), ("03", "%I"),
    ("04", "%M"), ("05", "%S"), ("06", "%y"), ("PM", "%p"), ("_2", "%e"), (".000000000", ".%f000"),
    (".000000", ".%f"), (".000", ".%f"),
]


def _as_time(value: Any) -> _dt.datetime:
    value = _nil(value)
    if isinstance(value, _dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
    if type(value) in (int, float):
        return _dt.datetime.fromtimestamp(value, _dt.timezone.utc)
    return _now()


def _date(layout: Any, value: Any) -> str:
    """sprig's ``date``: format a time with a Go reference layout (``2006-01-02``)."""
    t = _as_time(value)
    layout = _s("date", layout)
    out, i = [], 0
    while i < len(layout):
        for go, py in _LAYOUT:
            if layout.startswith(go, i):
                if go == "Z07:00":
                    text = "Z" if t.utcoffset() == _dt.timedelta(0) else t.strftime("%:z")
                elif go.startswith(".000"):
                    text = "." + f"{t.microsecond:06d}000"[: len(go) - 1]
                else:
                    text = t.strftime(py)
                out.append(text)
                i += len(go)
                break
        else:
            out.append(layout[i])
            i += 1
    return "".join(out)


def _unix_epoch(value: Any) -> str:
    return str(int(_as_time(value).timestamp()))


def _type_is(name: Any, value: Any) -> bool:
    return _s("typeIs", name) == type_name(_nil(value))


def _split_list(sep: Any, s: Any) -> list[str]:
    return _s("splitList", s).split(_s("splitList", sep))


def _nospace(s: Any) -> str:
    return "".join(_s("nospace", s).split())


def _contains(sub: Any, s: Any) -> bool:
    return _s("contains", sub) in _s("contains", s)


def _has_prefix(prefix: Any, s: Any) -> bool:
    return _s("hasPrefix", s).startswith(_s("hasPrefix", prefix))


def _has_suffix(suffix: Any, s: Any) -> bool:
    return _s("hasSuffix", s).endswith(_s("hasSuffix", suffix))


def _arith(name: str, op: Callable[[int, int], int]) -> Callable[..., int]:
    """sprig's integer arithmetic (``add``, ``mod``...): arguments converted like ``int``, int64 results."""

    def fn(*args: Any) -> int:
        values = [_to_int(a) for a in args]
        out = values[0]
        for v in values[1:]:
            if name in ("div", "mod") and v == 0:
                raise GoExecError(f"error calling {name}: integer divide by zero")
            out = op(out, v)
        if out.bit_length() > 64:
            raise LimitExceeded(f"{name}'s result passes int64")
        return out

    return fn


def _go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)  # Go truncates toward zero
    return q if (a >= 0) == (b >= 0) else -q


def _go_mod(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def _list(*items: Any) -> list[Any]:
    return [_nil(i) for i in items]


class GoFunc(NamedTuple):
    """A template function: its Python form and how many arguments it takes (``None``: any number)."""

    fn: Callable[..., Any]
    min_args: int
    max_args: int | None
    returns_bool: bool = False


def _f(fn: Callable[..., Any], lo: int, hi: int | None = -1, returns_bool: bool = False) -> GoFunc:
    return GoFunc(fn, lo, lo if hi == -1 else hi, returns_bool)


#: every function a Go template may call (Go's built-ins and sprig's subset); nothing else is reachable
FUNCTIONS: dict[str, GoFunc] = {
    # Go text/template built-ins
    "and": _f(and_, 1, None), "or": _f(or_, 1, None), "not": _f(not_, 1, returns_bool=True),
    "eq": _f(eq, 1, None, True), "ne": _f(ne, 2, returns_bool=True), "lt": _f(lt, 2, returns_bool=True),
    "le": _f(le, 2, returns_bool=True), "gt": _f(gt, 2, returns_bool=True), "ge": _f(ge, 2, returns_bool=True),
    "len": _f(length, 1), "index": _f(index, 1, None), "print": _f(go_print, 0, None),
    "printf": _f(printf, 1, None), "println": _f(go_println, 0, None), "html": _f(html, 0, None),
    "js": _f(js, 0, None), "urlquery": _f(urlquery, 0, None),
    # sprig: text
    "upper": _f(lambda s: s.upper() if type(s) is str else _s("upper", s), 1),
    "lower": _f(lambda s: s.lower() if type(s) is str else _s("lower", s), 1),
    "title": _f(title, 1), "trim": _f(lambda s: _s("trim", s).strip(), 1),
    "trimPrefix": _f(lambda p, s: _s("trimPrefix", s).removeprefix(_s("trimPrefix", p)), 2),
    "trimSuffix": _f(lambda p, s: _s("trimSuffix", s).removesuffix(_s("trimSuffix", p)), 2),
    "trimAll": _f(lambda c, s: _s("trimAll", s).strip(_s("trimAll", c)), 2),
    "replace": _f(_sprig_replace, 3), "contains": _f(_contains, 2, returns_bool=True),
    "hasPrefix": _f(_has_prefix, 2, returns_bool=True), "hasSuffix": _f(_has_suffix, 2, returns_bool=True),
    "quote": _f(_quote_all, 0, None), "squote": _f(_squote_all, 0, None), "cat": _f(_cat, 0, None),
    "nospace": _f(_nospace, 1), "substr": _f(_substr, 3), "trunc": _f(_trunc, 2), "repeat": _f(_repeat, 2),
    "split": _f(_split_map, 2), "splitList": _f(_split_list, 2), "join": _f(_join, 2),
    "regexMatch": _f(_regex_match, 2, returns_bool=True), "regexReplaceAll": _f(_regex_replace_all, 3),
    "b64enc": _f(_b64enc, 1), "b64dec": _f(_b64dec, 1),
    # sprig: values
    "default": _f(default, 1, 2), "empty": _f(empty, 1, returns_bool=True), "coalesce": _f(lambda *values: _coalesce(*map(_nil, values)), 0, None),
    "toString": _f(strval, 1), "toJson": _f(to_json, 1), "fromJson": _f(from_json, 1),
    "atoi": _f(_atoi, 1), "int": _f(_to_int, 1), "int64": _f(_to_int, 1), "float64": _f(_to_float, 1),
    "list": _f(_list, 0, None), "dict": _f(_dict, 0, None), "get": _f(_get, 2), "set": _f(_set, 3),
    "typeIs": _f(_type_is, 2, returns_bool=True), "typeOf": _f(lambda v: type_name(_nil(v)), 1),
    # sprig: integer math
    "add": _f(_arith("add", lambda a, b: a + b), 1, None), "sub": _f(_arith("sub", lambda a, b: a - b), 2),
    "mul": _f(_arith("mul", lambda a, b: a * b), 1, None), "div": _f(_arith("div", _go_div), 2),
    "mod": _f(_arith("mod", _go_mod), 2), "add1": _f(lambda a: _to_int(a) + 1, 1),
    "max": _f(_arith("max", max), 1, None), "min": _f(_arith("min", min), 1, None),
    # sprig: time
    "now": _f(_now, 0), "date": _f(_date, 2), "unixEpoch": _f(_unix_epoch, 1),
}

#: functions whose result is always a str (printed as it is)
TEXT_FUNCTIONS = frozenset({
    "print", "printf", "println", "html", "js", "urlquery", "upper", "lower", "title", "trim", "trimAll",
    "trimPrefix", "trimSuffix", "replace", "quote", "squote", "cat", "nospace", "substr", "trunc", "repeat",
    "join", "regexReplaceAll", "b64enc", "b64dec", "toString", "toJson", "date", "unixEpoch", "typeOf",
})


def concat(parts: list[str]) -> str:
    """A template's text: its parts (all text already), at most MAX_TEXT long."""
    text = "".join(parts)
    if len(text) > MAX_TEXT:
        raise _too_long("the template's text", len(text))
    return text


_PARSE_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
               "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def parse_bool(text: str) -> bool:
    """A condition's output read as Conduit does (Go's ``strconv.ParseBool``)."""
    value = _PARSE_BOOL.get(text)
    if value is None:
        raise GoExecError("error converting the condition go-template output to boolean, "
                          f"strconv.ParseBool: parsing {_quote(text)}: invalid syntax")
    return value


def discard(_: Any) -> str:
    """A variable declaration's action prints nothing."""
    return ""


def range_items(value: Any) -> list[tuple[Any, Any]]:
    """``range``'s (index or key, element) pairs: lists in order, maps by sorted key, an int counts."""
    value = _nil(value)
    t = type(value)
    if t in (list, tuple):
        return list(enumerate(value))
    if t is dict:
        return [(k, value[k]) for k in sorted(value, key=_sort_key)]
    if t is int:
        if value > MAX_TEXT:
            raise _too_long(f"range {value}", value)
        return [(i, i) for i in range(value)]
    if value is None:
        return []
    raise GoExecError(f"range can't iterate over {sprint(value)}")


def range_text(items: list[tuple[Any, Any]], body: Callable[[Any, Any], str]) -> str:
    parts = [body(k, v) for k, v in items]
    size = sum(map(len, parts))
    if size > MAX_TEXT:
        raise _too_long("range's output", size)
    return "".join(parts)
