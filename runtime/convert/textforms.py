"""TiDB's text forms of values JSON cannot hold: dates, times, decimals, bytes.

Shared by the JSON form and the Struct form so a value is written the same
way in both (the rules themselves are ``cdcflow.connectors.ticdc.tidb``'s): ``2020-02-20``, ``2020-02-20 02:20:20.123456`` (fraction only
when non-zero), TIME ``-838:59:59[.ffffff]``, Decimal keeping its scale,
bytes as standard base64.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
from typing import Any
from decimal import Decimal, InvalidOperation

from ..errors import ConversionError
from cdcflow.connectors.ticdc.tidb import format_date, format_datetime, format_time
from cdcflow.connectors.ticdc.tidb import parse_date as _parse_date
from cdcflow.connectors.ticdc.tidb import parse_datetime as _parse_datetime
from cdcflow.connectors.ticdc.tidb import parse_time as _parse_time


def b64(data: bytes) -> str:
    """Standard base64 with padding (what ``base64.b64encode`` writes, without its wrapper call)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def unb64(text: str, path: str = "") -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise ConversionError(f"invalid base64: {e}", path=path or None, value=text) from None


def date_text(value: _dt.date) -> str:
    return format_date(value)


def datetime_text(value: _dt.datetime) -> str:
    return format_datetime(value)


def time_text(value: _dt.timedelta) -> str:
    """TiDB TIME text; hours may exceed 24 and the value may be negative."""
    return format_time(value)


def decimal_text(value: Decimal) -> str:
    """Plain notation keeping the scale (``1.50``, ``0.0000001``); NaN/Infinity and positive exponents as ``str``."""
    if value.is_finite() and value.as_tuple().exponent <= 0:
        return format(value, "f")
    return str(value)


def parse_date(text: str, path: str = "") -> _dt.date:
    try:
        return _parse_date(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid date {text!r}", path=path or None, value=text) from None


def parse_datetime(text: str, path: str = "") -> _dt.datetime:
    try:
        return _parse_datetime(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid datetime {text!r}", path=path or None, value=text) from None


def parse_time(text: str, path: str = "") -> _dt.timedelta:
    try:
        return _parse_time(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid TIME {text!r}", path=path or None, value=text) from None


def parse_decimal(text: str, path: str = "") -> Decimal:
    try:
        return Decimal(text)
    except (InvalidOperation, TypeError, ValueError):
        raise ConversionError(f"invalid decimal {text!r}", path=path or None, value=text) from None


TEXT_FORMS: dict[type, Any] = {
    bytes: b64, Decimal: decimal_text, _dt.datetime: datetime_text, _dt.date: date_text, _dt.timedelta: time_text,
}
"""Native type -> its text writer, for the values JSON has no type for (exact type match)."""
