"""``base64.decode`` and ``base64.encode``: standard base64 in one field (Conduit's processors)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cdcflow.params import Parameter, ParamType

from .base import FieldValueTransform

_SCALARS = (int, float, bool)


def _field_parameter(verb: str) -> Parameter:
    return Parameter(
        ParamType.STRING, required=True, exclusion=(".Position",),
        description=f"Field to {verb} (any reference but .Position), e.g. .Key or .Payload.After.foo.",
    )


class Base64Decode(FieldValueTransform):
    """Decodes the base64 text in ``field``. The result is a string when it is UTF-8 text,
    raw bytes otherwise (Go keeps arbitrary bytes in a string; Python cannot)."""

    name = "base64.decode"
    version = "v0.1.0"
    summary = "Decode a field from base64."
    description = (
        "Decodes the standard base64 text (raw data or a string) in `field`. The result is text when it is "
        "valid UTF-8, raw bytes otherwise; a whole .Key or .Payload side becomes raw data. Null is left alone."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("decode")}

    def convert(self, value: Any) -> Any:
        t = type(value)
        if t is not str and t is not bytes:
            raise ValueError(f"unexpected data type {t.__name__}")
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"failed to decode the value: {e}") from None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw


class Base64Encode(FieldValueTransform):
    """Encodes raw data, text, numbers or booleans in ``field`` as a base64 string."""

    name = "base64.encode"
    version = "v0.1.0"
    summary = "Encode a field to base64."
    description = (
        "Encodes the value of `field` (raw data, a string, a number or a boolean) as standard base64 text. "
        "A whole .Key or .Payload side becomes raw data. Null is left alone; maps and lists fail the record "
        "(encode them with json.encode first)."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("encode")}

    def convert(self, value: Any) -> Any:
        t = type(value)
        if t is bytes:
            raw = value
        elif t is str:
            raw = value.encode("utf-8")
        elif t is bool:
            raw = b"true" if value else b"false"
        elif isinstance(value, _SCALARS):
            raw = str(value).encode("ascii")
        else:
            raise ValueError(f"unexpected data type {t.__name__}")
        return base64.b64encode(raw).decode("ascii")
