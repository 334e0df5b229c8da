"""``field.convert``: change the type of one field (Conduit's processor).

Conduit turns the value into text and parses the text as the target type; the
results here are the same (``"123"`` → 123, ``1`` → true, ``123.345`` →
``"123.345"``, a unix-nanosecond int → a time) without the text round trip for
values that are already numbers. A time keeps what Go's ``time.Time`` keeps: a naive UTC
``datetime`` (the record model's form) when that holds all of it, else a ``GoTime`` (the same
datetime plus the nanoseconds and the zone's offset), which the JSON form writes as Conduit
does (``2024-01-02T12:34:56.123456789Z``, ``2024-01-02T14:34:56+02:00``).
"""

from __future__ import annotations

import datetime as _dt
import re
from decimal import Decimal
from typing import Any, Callable, Mapping

from cdcflow.convert.textforms import GoTime
from cdcflow.expr import to_text
from cdcflow.params import Parameter, ParamType

from .base import KEY_OR_PAYLOAD, FieldValueTransform

TYPES = ("string", "int", "float", "bool", "time")
_INT_TEXT = re.compile(r"[+-]?\d+\Z")
_BOOL_TEXT = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}
_EPOCH = _dt.datetime(1970, 1, 1)
#: Go's time.RFC3339Nano layout as time.Parse reads it (a fraction of any length up to 9 digits)
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))\Z")


def _float_text(v: float) -> str:
    """Go's strconv.FormatFloat(v, 'f', -1, 64): shortest digits, never an exponent."""
    if v != v or v in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}[repr(v)]
    text = format(Decimal(repr(v)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _text(v: Any) -> str:
    if type(v) is float:
        return _float_text(v)
    return to_text(v)


def to_string(v: Any) -> str:
    return v if type(v) is str else _text(v)


def to_int(v: Any) -> int:
    t = type(v)
    if t is int:
        return v
    if t is bool:
        return int(v)
    text = _text(v).strip() if t is not str else v
    if not _INT_TEXT.match(text):
        raise ValueError(f"cannot convert {v!r} to int")
    return int(text)


def to_float(v: Any) -> float:
    t = type(v)
    if t is float:
        return v
    if t is bool or t is int or t is Decimal:
        return float(v)
    text = _text(v)
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"cannot convert {v!r} to float") from None


def to_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    try:
        return _BOOL_TEXT[_text(v)]
    except KeyError:
        raise ValueError(f"cannot convert {v!r} to bool (expected 1, t, true, 0, f, false, ...)") from None


def _time(utc: _dt.datetime, nanosecond: int, offset: int) -> _dt.datetime:
    return GoTime(utc, nanosecond, offset) if nanosecond or offset else utc


def to_time(v: Any) -> _dt.datetime:
    """Unix nanoseconds (Go: ``time.Unix(0, n).UTC()``) or RFC 3339 text with up to nine fraction
    digits and its zone (Go: ``time.Parse(time.RFC3339Nano, s)``); other ISO 8601 text is read too."""
    t = type(v)
    if t is _dt.datetime or t is GoTime:
        return v
    if t is int or (t is str and _INT_TEXT.match(v)):
        micros, nanos = divmod(int(v), 1000)
        return _time(_EPOCH + _dt.timedelta(microseconds=micros), nanos, 0)
    text = _text(v)
    m = _RFC3339.match(text)
    if m:
        fraction = (m.group(2) or "").ljust(9, "0")
        offset = (int(m.group(4)) * 60 + int(m.group(5))) * (-1 if m.group(3) == "-" else 1) if m.group(3) else 0
        try:
            local = _dt.datetime.fromisoformat(m.group(1))
        except ValueError:
            raise ValueError(f"cannot convert {v!r} to time: {text!r} is not a valid RFC 3339 time") from None
        utc = local.replace(microsecond=int(fraction[:6])) - _dt.timedelta(minutes=offset)
        return _time(utc, int(fraction[6:]), offset)
    try:
        parsed = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"cannot convert {v!r} to time (expected unix nanoseconds or RFC 3339)") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return parsed


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": to_string, "int": to_int, "float": to_float, "bool": to_bool, "time": to_time,
}


class FieldConvert(FieldValueTransform):
    """Converts ``field`` to ``type``; a value that does not convert fails only its record."""

    name = "field.convert"
    version = "v0.1.0"
    summary = "Convert the type of a field."
    description = (
        "Converts the value of `field` (structured data under .Key or .Payload) to `type`: string, int, float, "
        "bool or time (a unix-nanosecond number or an RFC 3339 text becomes a UTC time). A missing field is "
        "converted from null, as in Conduit: null → \"\" for string, an error for the other types."
    )
    author = "cdcflow"
    parameters = {
        "field": Parameter(
            ParamType.STRING, required=True, regex=KEY_OR_PAYLOAD,
            description="Field to convert, e.g. .Key.id or .Payload.After.done.",
        ),
        "type": Parameter(
            ParamType.STRING, required=True, inclusion=TYPES,
            description="Target type: string, int, float, bool or time.",
        ),
    }

    skip_null = False  # a missing field is converted from null, as in Conduit

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.convert = CONVERTERS[config["type"]]  # a plain function: the batch loop calls it directly
