"""The one column-type model for TiDB tables.

Every TiCDC decoder fills it as far as its format carries the information, every
encoder reads it, and it travels with records as a schema referenced from
metadata (see ``cdcflow.connectors.ticdc.schema``), so a later hop can encode
another format.

Native value per type (what ``Record`` dicts hold):
  integer types, YEAR, BIT -> int (BIGINT UNSIGNED up to 2**64-1)
  FLOAT, DOUBLE -> float; DECIMAL -> decimal.Decimal (scale kept)
  CHAR/VARCHAR/TEXT family, ENUM (element name), SET (comma-joined names), JSON (TiDB text) -> str
  BINARY/VARBINARY/BLOB family (binary charset) -> bytes
  DATE -> datetime.date; DATETIME/TIMESTAMP -> datetime.datetime (naive)
  TIME -> datetime.timedelta (may be negative or over 24 h)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT"})
FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
TEXT_TYPES = frozenset({"CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"})
BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})
TIME_TYPES = frozenset({"DATE", "DATETIME", "TIMESTAMP", "TIME"})
ALL_TYPES = INTEGER_TYPES | FLOAT_TYPES | TEXT_TYPES | BINARY_TYPES | TIME_TYPES | {
    "DECIMAL", "BIT", "YEAR", "ENUM", "SET", "JSON",
}


@dataclass(frozen=True)
class Column:
    """One column. ``type`` is the MySQL base type in upper case (``INT``, ``VARCHAR``).

    Text types with a binary charset are stored as their binary twins
    (``VARCHAR`` + binary -> ``VARBINARY``) with ``binary=True``.
    """

    name: str
    type: str
    unsigned: bool = False
    length: int | None = None  # CHAR/VARCHAR/BINARY length, BIT(M) width, display width
    precision: int | None = None  # DECIMAL(M, D): M
    scale: int | None = None  # DECIMAL(M, D): D
    fsp: int | None = None  # fractional seconds precision of TIME/DATETIME/TIMESTAMP
    nullable: bool = True
    default: Any = None
    has_default: bool = False
    primary_key: bool = False
    handle_key: bool = False  # primary key, else a NOT NULL unique key
    unique_key: bool = False
    multiple_key: bool = False
    elements: tuple[str, ...] = ()  # ENUM/SET members in definition order
    binary: bool = False
    generated: bool = False


@dataclass(frozen=True)
class TableSchema:
    """Columns of one table version. ``version`` is TiCDC's table version (a TSO)."""

    schema: str
    table: str
    columns: tuple[Column, ...]
    version: int = 0
    partition: int | None = None
    index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.index.update({c.name: i for i, c in enumerate(self.columns)})

    @property
    def collection(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def handle_key(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.handle_key)

    def column(self, name: str) -> Column:
        return self.columns[self.index[name]]


# ---------------------------------------------------------------------------
# TiDB text forms, shared by every text-carrying codec (canal-json, CSV, Avro's
# DATE/DATETIME/TIME strings, open protocol) and the JSON record form: one
# implementation of each rule. Formatters check the value's type and that it
# fits the column (fsp, scale) and raise ``ValueMismatch``; parsers accept only
# TiDB's own shapes and raise ``ValueError``.
# ---------------------------------------------------------------------------
import binascii as _binascii  # noqa: E402
import datetime as _dt  # noqa: E402
import decimal as _decimal  # noqa: E402
import math as _math  # noqa: E402
import re as _re  # noqa: E402
import sys as _sys  # noqa: E402

_DATE = _dt.date
_DATETIME = _dt.datetime

if _sys.version_info >= (3, 11):
    datetime_from_text = _DATETIME.fromisoformat

    def b64decode_strict(text: str) -> bytes:
        """Base64 with nothing but the alphabet and correct padding (``binascii.Error`` is a ValueError)."""
        return _binascii.a2b_base64(text, strict_mode=True)
else:
    # Python 3.10's a2b_base64 has no strict_mode: the same rules as a shape check first
    _B64_STRICT = _re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")

    def b64decode_strict(text: str) -> bytes:
        """Base64 with nothing but the alphabet and correct padding (``binascii.Error`` is a ValueError)."""
        if _B64_STRICT.fullmatch(text) is None:
            raise _binascii.Error(f"not strict base64: {text[:40]!r}")
        return _binascii.a2b_base64(text)

    def datetime_from_text(text: str) -> _dt.datetime:
        """``datetime.fromisoformat`` of 3.11 for TiDB's DATETIME text: Python 3.10's takes
        only 0, 3 or 6 fraction digits, so 1 to 5 are padded to 6 (same value)."""
        return _DATETIME.fromisoformat(text if len(text) in (19, 26) else text.ljust(26, "0"))
_TIMEDELTA = _dt.timedelta
_DECIMAL = _decimal.Decimal
_DEC_CTX = _decimal.Context(prec=200)  # DECIMAL(65,30) needs more than the default 28 digits
_SCALE_EXP: dict[int, _decimal.Decimal] = {}
TIME_MAX_US = ((838 * 60 + 59) * 60 + 59) * 1_000_000
"""TiDB's TIME range is -838:59:59 .. 838:59:59."""


class ValueMismatch(ValueError):
    """A native value does not fit its column's text form; callers add table/column context."""


def format_date(v: _dt.date) -> str:
    """``YYYY-MM-DD``."""
    if type(v) is not _DATE:
        raise ValueMismatch("DATE needs a datetime.date")
    return v.isoformat()


def format_datetime(v: _dt.datetime, fsp: int | None = None) -> str:
    """``2020-02-20 02:20:20[.fff]``: the fraction padded to the column's fsp; with fsp None,
    six digits when non-zero. A fraction finer than fsp raises (it would be lost)."""
    if type(v) is not _DATETIME:
        raise ValueMismatch("DATETIME/TIMESTAMP needs a datetime.datetime")
    if v.tzinfo is not None:
        raise ValueMismatch("DATETIME/TIMESTAMP values are naive (no time zone)")
    text = v.isoformat(" ")
    if fsp is None:
        return text
    us = v.microsecond
    if fsp <= 0:
        if us:
            raise ValueMismatch("has fractional seconds but the column's fsp is 0")
        return text
    if us and us % 10 ** (6 - fsp):
        raise ValueMismatch(f"has more fractional digits than the column's fsp {fsp}")
    return text[: 20 + fsp] if us else f"{text}.{'0' * fsp}"


def format_time(v: _dt.timedelta, fsp: int | None = None) -> str:
    """TiDB TIME text ``[-]HH:MM:SS[.fff]``; hours may exceed 24 (up to 838)."""
    if type(v) is not _TIMEDELTA:
        raise ValueMismatch("TIME needs a datetime.timedelta")
    total = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    sign = "-" if total < 0 else ""
    if total < 0:
        total = -total
    secs, us = divmod(total, 1_000_000)
    mins, s = divmod(secs, 60)
    h, m = divmod(mins, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    if fsp is None:
        return f"{text}.{us:06d}" if us else text
    if fsp <= 0:
        if us:
            raise ValueMismatch("has fractional seconds but the column's fsp is 0")
        return text
    if us % 10 ** (6 - fsp):
        raise ValueMismatch(f"has more fractional digits than the column's fsp {fsp}")
    return f"{text}.{us:06d}"[: len(text) + 1 + fsp]


def format_decimal(v: _decimal.Decimal, scale: int | None = None) -> str:
    """Plain digits, never exponent notation (``0E-30`` -> ``0.000...``), padded to the column's
    ``scale`` when given; more fractional digits than ``scale`` raise."""
    if type(v) is not _DECIMAL:
        raise ValueMismatch("DECIMAL needs a decimal.Decimal")
    if not v.is_finite():
        raise ValueMismatch("DECIMAL cannot be NaN or infinite")
    if scale is not None and v.as_tuple().exponent != -scale:
        exp = _SCALE_EXP.get(scale)
        if exp is None:
            exp = _SCALE_EXP[scale] = _decimal.Decimal(1).scaleb(-scale)
        quantized = v.quantize(exp, context=_DEC_CTX)
        if quantized != v:
            raise ValueMismatch(f"has more fractional digits than the column's scale {scale}")
        v = quantized
    return format(v, "f")


def format_float(v: float) -> str:
    """Shortest round-trip digits without exponent (Go's ``FormatFloat(v, 'f', -1, 64)``).

    FLOAT columns are written with float64 digits too, so a float32 value read
    back is the same float.
    """
    if type(v) is not float:
        raise ValueMismatch("FLOAT/DOUBLE needs a float")
    text = repr(v)
    if "e" in text or "n" in text:
        if not _math.isfinite(v):
            raise ValueMismatch("MySQL floats cannot be NaN or infinite")
        return format(_decimal.Decimal(text), "f")
    return text[:-2] if text.endswith(".0") else text


def format_go_float(v: float) -> str:
    """Go's ``%v`` for a float64, as TiCDC's CSV writes floats: shortest round-trip digits, in
    exponent form (``1e+06``, ``1.5e-05``) when the decimal exponent is < -4 or >= 6."""
    if type(v) is not float:
        raise ValueMismatch("FLOAT/DOUBLE needs a float")
    if not _math.isfinite(v):
        raise ValueMismatch("MySQL floats cannot be NaN or infinite")
    text = repr(v)
    a = abs(v)
    if "e" not in text and (a == 0.0 or 1e-4 <= a < 1e6):
        return text[:-2] if text.endswith(".0") else text
    sign, digits, exp = _decimal.Decimal(text).as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exp += 1
    x = len(digits) - 1 + exp  # decimal exponent of the leading digit
    if -4 <= x < 6:
        return format(_decimal.Decimal((sign, tuple(digits), exp)), "f")
    mant = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"


def parse_date(text: str) -> _dt.date:
    """``YYYY-MM-DD`` only (no ISO week or basic forms)."""
    if len(text) != 10 or text[4] != "-" or text[7] != "-" or not text[:4].isdigit():
        raise ValueError(f"not a DATE 'YYYY-MM-DD': {text!r}")
    return _DATE.fromisoformat(text)


def parse_datetime(text: str) -> _dt.datetime:
    """``YYYY-MM-DD HH:MM:SS[.f{1,6}]`` only (no ``T``, no zone)."""
    n = len(text)
    if (not (n == 19 or 21 <= n <= 26) or text[10] != " " or text[4] != "-" or text[7] != "-"
            or text[13] != ":" or text[16] != ":" or (n > 19 and (text[19] != "." or not text[20:].isdigit()))):
        raise ValueError(f"not a DATETIME 'YYYY-MM-DD HH:MM:SS[.ffffff]': {text!r}")
    return datetime_from_text(text)


_TIME_RE = _re.compile(r"(-?)(\d{2,3}):([0-5]\d):([0-5]\d)(?:\.(\d{1,6}))?")


def parse_time(text: str, max_us: int | None = None) -> _dt.timedelta:
    """``[-]HH:MM:SS[.f{1,6}]`` (hours 2-3 digits) to a timedelta; with ``max_us``
    (e.g. ``TIME_MAX_US``) a magnitude beyond it raises."""
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a TIME '[-]HH:MM:SS[.ffffff]': {text!r}")
    sign, h, mi, s, frac = m.groups()
    us = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    if max_us is not None and us > max_us:
        raise ValueError(f"TIME out of range -838:59:59..838:59:59: {text!r}")
    return _TIMEDELTA(microseconds=-us if sign else us)


def set_to_bitmask(value: str, elements: tuple[str, ...]) -> int:
    """SET text (comma-joined names) -> bitmask; bit i = elements[i]."""
    if not value:
        return 0
    mask = 0
    for name in value.split(","):
        try:
            mask |= 1 << elements.index(name)
        except ValueError:
            raise ValueError(f"{name!r} is not a member of SET{elements!r}") from None
    return mask


def bitmask_to_set(mask: int, elements: tuple[str, ...]) -> str:
    if mask >> len(elements):
        raise ValueError(f"bitmask {mask} has bits beyond the {len(elements)} SET members")
    return ",".join(e for i, e in enumerate(elements) if mask >> i & 1)


def enum_index(value: str, elements: tuple[str, ...]) -> int:
    """1-based ENUM index of a name (0 is TiDB's invalid-value index for '')."""
    try:
        return elements.index(value) + 1
    except ValueError:
        if value == "":
            return 0
        raise ValueError(f"{value!r} is not a member of ENUM{elements!r}") from None


def enum_name(index: int, elements: tuple[str, ...]) -> str:
    if index == 0:
        return ""
    if not 0 < index <= len(elements):
        raise ValueError(f"ENUM index {index} out of range 1..{len(elements)}")
    return elements[index - 1]


# ---------------------------------------------------------------------------
# Inline forms of the formatters, for codecs that generate one function per table
# (one C call per value instead of a Python call plus checks). Each expression gives
# exactly the formatter's text for the common case and evaluates ``slow`` (a call of
# the formatter, which then formats or raises) for every other value.
# ---------------------------------------------------------------------------

DATE_MEMO_SIZE = 4096
"""Distinct DATE texts a generated parser remembers per column (dates repeat; ``date`` is immutable)."""


def remember(memo: dict, text: str, value: Any) -> Any:
    """Store ``value`` under ``text`` while the memo has room; return ``value``."""
    if len(memo) < DATE_MEMO_SIZE:
        memo[text] = value
    return value


INLINE_NAMES = {"Decimal": _DECIMAL, "datetime": _DATETIME, "date": _DATE, "remember": remember,
                "datetime_from_text": datetime_from_text}
"""Names the inline expressions use; put them in the generated code's namespace."""


def inline_text_expr(col: Column, v: str, slow: str) -> str | None:
    """Python expression for ``col``'s text form of the value in variable ``v`` (``format_decimal``
    with the column's scale, ``format_datetime`` with its fsp, ``format_date``, ``format_float``),
    or None when the type has no inline form. Uses the variable ``x`` as scratch."""
    t = col.type
    if t == "DECIMAL":
        s = col.scale
        if s is None:
            return None
        # str(d) has exactly s fractional digits and no exponent iff d's exponent is -s, and
        # then it equals format(d, "f"); NaN/Infinity never pass
        if s == 0:
            ok = f"(x := str({v})).isdigit() or (x[0] == '-' and x[1:].isdigit())"
        else:
            ok = f"(x := str({v}))[{-s - 1}:{-s}] == '.' and 'E' not in x"
        return f"(x if type({v}) is Decimal and ({ok}) else {slow})"
    if t in ("DATETIME", "TIMESTAMP"):
        fsp = col.fsp
        guard = f"type({v}) is datetime and {v}.tzinfo is None"
        if fsp is None:
            return f"({v}.isoformat(' ') if {guard} else {slow})"
        if fsp == 0:
            return f"({v}.isoformat(' ') if {guard} and not {v}.microsecond else {slow})"
        if fsp == 3:
            return f"({v}.isoformat(' ', 'milliseconds') if {guard} and not {v}.microsecond % 1000 else {slow})"
        if fsp == 6:
            return f"({v}.isoformat(' ', 'microseconds') if {guard} else {slow})"
        if 0 < fsp < 6:
            return (f"({v}.isoformat(' ', 'microseconds')[:{20 + fsp}] if {guard} "
                    f"and not {v}.microsecond % {10 ** (6 - fsp)} else {slow})")
        return None
    if t == "DATE":
        return f"({v}.isoformat() if type({v}) is date else {slow})"
    if t in FLOAT_TYPES:
        # repr without exponent or nan/inf is the text once a trailing ".0" is dropped
        return (f"({slow} if type({v}) is not float or 'e' in (x := repr({v})) or 'n' in x "
                f"else x[:-2] if x.endswith('.0') else x)")
    return None


def inline_parse_expr(type_name: str, v: str, bad: str, memo: str | None = None) -> str | None:
    """Python expression parsing the text in variable ``v`` as ``parse_date`` / ``parse_datetime``
    do (same checks, same result), evaluating ``bad`` when ``v`` is not a str of that shape, or
    None for other types. Uses the variable ``n`` as scratch; names from ``INLINE_NAMES``. With
    ``memo`` (the name of a dict in the generated code's namespace) a DATE is looked up by its
    text first and remembered after parsing (only values that parsed are stored)."""
    if type_name == "DATE":
        parse = (f"(date.fromisoformat({v}) if type({v}) is str and len({v}) == 10 and {v}[4] == '-' "
                 f"and {v}[7] == '-' and {v}[:4].isdigit() else {bad})")
        if memo is None:
            return parse
        return f"(x if (x := {memo}.get({v})) is not None else remember({memo}, {v}, {parse}))"
    if type_name in ("DATETIME", "TIMESTAMP"):
        return (f"(datetime_from_text({v}) if type({v}) is str and ((n := len({v})) == 19 or 21 <= n <= 26) "
                f"and {v}[10] == ' ' and {v}[4] == '-' and {v}[7] == '-' and {v}[13] == ':' and {v}[16] == ':' "
                f"and (n == 19 or ({v}[19] == '.' and {v}[20:].isdigit())) else {bad})")
    return None


def inline_go_float_expr(v: str, slow: str) -> str:
    """Python expression for ``format_go_float`` of the value in variable ``v`` (TiCDC's CSV
    float text): ``repr`` minus a trailing ``.0`` where Go prints no exponent and ``repr`` none
    either (1e-4 <= |v| < 1e6), ``slow`` for every other value (zero, exponent forms, non-floats)."""
    return (f"((x if not (x := repr({v})).endswith('.0') else x[:-2]) if type({v}) is float "
            f"and (1e-4 <= {v} < 1e6 or -1e6 < {v} <= -1e-4) else {slow})")
