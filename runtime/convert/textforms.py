"""Text forms of the values JSON has no type for: dates, times, decimals, bytes.

Shared by the JSON form and the Struct form so a value is written the same way in
both, except datetimes. Plain ISO-8601 text, nothing database-specific: ``2020-02-20``,
a duration (``datetime.timedelta``) as ``[-]HH:MM:SS[.ffffff]`` whose hours may pass 24,
Decimal keeping its scale, bytes as standard base64. Datetimes: the Struct form writes
``2020-02-20 02:20:20.123456`` (naive, the fraction only when non-zero); the JSON form writes
RFC 3339 as Go does (``rfc3339_text``: ``2020-02-20T02:20:20.123456Z``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import re
from typing import Any
from decimal import Decimal, InvalidOperation

from ..errors import ConversionError

_DATE, _DATETIME, _TIMEDELTA = _dt.date, _dt.datetime, _dt.timedelta
_DURATION = re.compile(r"(-?)(\d{2,}):([0-5]\d):([0-5]\d)(?:\.(\d{1,6}))?")


def b64(data: bytes) -> str:
    """Standard base64 with padding (what ``base64.b64encode`` writes, without its wrapper call)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def unb64(text: str, path: str = "") -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as e:
        raise ConversionError(f"invalid base64: {e}", path=path or None, value=text) from None


def date_text(value: _dt.date) -> str:
    return value.isoformat()


def datetime_text(value: _dt.datetime) -> str:
    if value.tzinfo is not None:
        raise ConversionError("datetime values are naive (no time zone)", value=value)
    return value.isoformat(" ")


def time_text(value: _dt.timedelta) -> str:
    """``[-]HH:MM:SS[.ffffff]``; hours may exceed 24 and the value may be negative."""
    total = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total < 0 else ""
    secs, us = divmod(abs(total), 1_000_000)
    mins, s = divmod(secs, 60)
    h, m = divmod(mins, 60)
    return f"{sign}{h:02d}:{m:02d}:{s:02d}.{us:06d}" if us else f"{sign}{h:02d}:{m:02d}:{s:02d}"


def decimal_text(value: Decimal) -> str:
    """Plain notation keeping the scale (``1.50``, ``0.0000001``); NaN/Infinity and positive exponents as ``str``."""
    if value.is_finite() and value.as_tuple().exponent <= 0:
        return format(value, "f")
    return str(value)


def date_of(text: str) -> _dt.date:
    """``YYYY-MM-DD`` only (no ISO week or basic forms); ValueError or TypeError otherwise."""
    if len(text) != 10 or text[4] != "-" or text[7] != "-" or not text[:4].isdigit():
        raise ValueError(f"not a date 'YYYY-MM-DD': {text!r}")
    return _DATE.fromisoformat(text)


class GoTime(_dt.datetime):
    """A time as Go's ``time.Time`` holds it where a datetime cannot: nanoseconds and a zone.

    The datetime itself is the naive UTC instant to the microsecond, which every encoder reads
    (a GoTime is a datetime to them); ``nanosecond`` is the 0-999 ns past it and ``offset`` the
    zone's offset east of UTC in minutes, which the JSON form writes as Conduit does
    (``2024-01-02T14:34:56.123456789+02:00``). Made by ``field.convert`` to ``time``, only when
    a plain naive datetime would lose something.
    """

    nanosecond: int
    offset: int

    def __new__(cls, utc: _dt.datetime, nanosecond: int = 0, offset: int = 0) -> "GoTime":
        self = super().__new__(cls, utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second,
                               utc.microsecond)
        self.nanosecond, self.offset = nanosecond, offset
        return self

    def __reduce_ex__(self, protocol):  # datetime's own pickling would drop the two attributes
        return (GoTime, (_dt.datetime(self.year, self.month, self.day, self.hour, self.minute, self.second,
                                      self.microsecond), self.nanosecond, self.offset))

    def __repr__(self) -> str:
        return f"GoTime({rfc3339_text(self)!r})"


def rfc3339_text(value: _dt.datetime) -> str:
    """A datetime as Go's ``time.Time`` writes it in JSON (RFC 3339, the fraction without trailing
    zeros, ``Z`` for a zero offset); a naive datetime is taken as UTC. The JSON form's datetimes."""
    if type(value) is GoTime:
        return _go_time_text(value)
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    offset = value.utcoffset()
    if not offset:
        return text + "Z"
    minutes = offset.days * 1440 + offset.seconds // 60
    hours, minutes = divmod(abs(minutes), 60)
    return f"{text}{'-' if offset.days < 0 else '+'}{hours:02d}:{minutes:02d}"


def _go_time_text(value: GoTime) -> str:
    offset = getattr(value, "offset", 0)
    local = _dt.datetime(value.year, value.month, value.day, value.hour, value.minute, value.second) \
        + _dt.timedelta(minutes=offset)
    text = local.isoformat()
    fraction = value.microsecond * 1000 + getattr(value, "nanosecond", 0)
    if fraction:
        text += f".{fraction:09d}".rstrip("0")
    if not offset:
        return text + "Z"
    hours, minutes = divmod(abs(offset), 60)
    return f"{text}{'-' if offset < 0 else '+'}{hours:02d}:{minutes:02d}"


def rfc3339_of(text: str) -> _dt.datetime:
    """A naive datetime from ``rfc3339_text``'s text of one (``YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z``, UTC
    only); ValueError or TypeError otherwise."""
    n = len(text)
    if (not (n == 20 or 22 <= n <= 27) or text[10] != "T" or text[-1] != "Z" or text[4] != "-" or text[7] != "-"
            or text[13] != ":" or text[16] != ":" or (n > 20 and (text[19] != "." or not text[20:-1].isdigit()))):
        raise ValueError(f"not an RFC 3339 UTC time 'YYYY-MM-DDTHH:MM:SS[.ffffff]Z': {text!r}")
    return _DATETIME.fromisoformat(text[:-1])


def time_of(text: str) -> _dt.timedelta:
    """``[-]HH:MM:SS[.f{1,6}]`` to a timedelta; ValueError or TypeError otherwise."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise ValueError(f"not a duration '[-]HH:MM:SS[.ffffff]': {text!r}")
    sign, h, mi, s, frac = m.groups()
    us = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    return _TIMEDELTA(microseconds=-us if sign else us)


def parse_date(text: str, path: str = "") -> _dt.date:
    try:
        return date_of(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid date {text!r}", path=path or None, value=text) from None


def parse_rfc3339(text: str, path: str = "") -> _dt.datetime:
    try:
        return rfc3339_of(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid datetime {text!r}", path=path or None, value=text) from None


def parse_time(text: str, path: str = "") -> _dt.timedelta:
    try:
        return time_of(text)
    except (ValueError, TypeError):
        raise ConversionError(f"invalid TIME {text!r}", path=path or None, value=text) from None


def parse_decimal(text: str, path: str = "") -> Decimal:
    try:
        return Decimal(text)
    except (InvalidOperation, TypeError, ValueError):
        raise ConversionError(f"invalid decimal {text!r}", path=path or None, value=text) from None


TEXT_FORMS: dict[type, Any] = {
    bytes: b64, Decimal: decimal_text, _dt.datetime: datetime_text, _dt.date: date_text, _dt.timedelta: time_text,
    GoTime: datetime_text,  # its naive UTC value (to the microsecond); the JSON form writes all of it
}
"""Native type -> its text writer, for the values JSON has no type for (exact type match)."""
