"""TiDB's text forms of values JSON cannot hold: dates, times, decimals, bytes.

Shared by the JSON form and the Struct form so a value is written the same
way in both: ``2020-02-20``, ``2020-02-20 02:20:20.123456`` (fraction only
when non-zero), TIME ``-838:59:59[.ffffff]``, Decimal keeping its scale,
bytes as standard base64.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import re
from decimal import Decimal, InvalidOperation

from ..errors import ConversionError

_US = _dt.timedelta(microseconds=1)
_TIME = re.compile(r"(-)?(\d+):([0-5]\d):([0-5]\d)(?:\.(\d{1,6}))?\Z")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, path: str = "") -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise ConversionError(f"invalid base64: {e}", path=path or None, value=text) from None


def date_text(value: _dt.date) -> str:
    return value.isoformat()


def datetime_text(value: _dt.datetime) -> str:
    return value.isoformat(sep=" ")


def time_text(value: _dt.timedelta) -> str:
    """TiDB TIME text; hours may exceed 24 and the value may be negative."""
    us = value // _US
    sign = "-" if us < 0 else ""
    us = abs(us)
    seconds, fraction = divmod(us, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def decimal_text(value: Decimal) -> str:
    """Plain notation keeping the scale (``1.50``, ``0.0000001``); NaN/Infinity and positive exponents as ``str``."""
    if value.is_finite() and value.as_tuple().exponent <= 0:
        return format(value, "f")
    return str(value)


def parse_date(text: str, path: str = "") -> _dt.date:
    try:
        return _dt.date.fromisoformat(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid date {text!r}", path=path or None, value=text) from None


def parse_datetime(text: str, path: str = "") -> _dt.datetime:
    try:
        return _dt.datetime.fromisoformat(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid datetime {text!r}", path=path or None, value=text) from None


def parse_time(text: str, path: str = "") -> _dt.timedelta:
    m = _TIME.match(text) if isinstance(text, str) else None
    if m is None:
        raise ConversionError(f"invalid TIME {text!r}", path=path or None, value=text)
    sign, h, mi, s, frac = m.groups()
    us = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    return _dt.timedelta(microseconds=-us if sign else us)


def parse_decimal(text: str, path: str = "") -> Decimal:
    try:
        return Decimal(text)
    except (InvalidOperation, TypeError, ValueError):
        raise ConversionError(f"invalid decimal {text!r}", path=path or None, value=text) from None
