"""``field.convert``: change the type of one field (Conduit's processor).

Conduit turns the value into text and parses the text as the target type; the
results here are the same (``"123"`` → 123, ``1`` → true, ``123.345`` →
``"123.345"``, a unix-nanosecond int → a time) without the text round trip for
values that are already numbers. Times are naive UTC ``datetime`` values, the
record model's form, so nanoseconds are truncated to microseconds.
"""

from __future__ import annotations

import datetime as _dt
import re
from decimal import Decimal
from typing import Any, Callable, Mapping

from cdcflow.expr import to_text
from cdcflow.params import Parameter, ParamType

from .base import KEY_OR_PAYLOAD, FieldValueTransform
from .field_set import SCHEMA_PARAMETERS

TYPES = ("string", "int", "float", "bool", "time")
_INT_TEXT = re.compile(r"[+-]?\d+\Z")
_BOOL_TEXT = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}
_EPOCH = _dt.datetime(1970, 1, 1)


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


def to_time(v: Any) -> _dt.datetime:
    t = type(v)
    if t is _dt.datetime:
        return v
    if t is int or (t is str and _INT_TEXT.match(v)):
        return _EPOCH + _dt.timedelta(microseconds=int(v) // 1000)
    text = _text(v)
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
        **SCHEMA_PARAMETERS,
    }

    skip_null = False  # a missing field is converted from null, as in Conduit

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.convert = CONVERTERS[config["type"]]  # a plain function: the batch loop calls it directly
