"""``json.decode`` and ``json.encode``: JSON text ⇄ structured data in one field (Conduit's processors)."""

from __future__ import annotations

from typing import Any

from cdcflow.params import Parameter, ParamType

from .base import KEY_OR_PAYLOAD, UNCHANGED, FieldValueTransform, parse_json, to_json


def _field_parameter(verb: str) -> Parameter:
    return Parameter(
        ParamType.STRING, required=True, regex=KEY_OR_PAYLOAD, exclusion=(".Payload",),
        description=f"Field to {verb}, under .Key or .Payload (e.g. .Key, .Payload.After, .Payload.Before.foo).",
    )


class JsonDecode(FieldValueTransform):
    """Parses the JSON text (raw data or a string) in ``field`` into structured data.

    Null stays null, structured data is left as is, empty text becomes null.
    Integers keep full precision (Conduit reads every number as a float).
    """

    name = "json.decode"
    version = "v0.1.0"
    summary = "Decode a field from JSON raw data (string) to structured data."
    description = (
        "Parses the JSON text in `field` (raw data or a string) into structured data. Null and already "
        "structured data are left alone; empty text becomes null. Setting .Key, .Payload.Before or "
        ".Payload.After to a JSON value that is not an object fails the record."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("decode")}

    def convert(self, value: Any) -> Any:
        t = type(value)
        if t is dict:
            return UNCHANGED
        if t is not bytes and t is not str:
            raise ValueError(f"unexpected data type {t.__name__} (expected raw data or a string)")
        decoded = parse_json(value) if value else None
        if decoded is not None and type(decoded) is not dict and not self._field.path:
            raise ValueError(f"JSON {type(decoded).__name__} cannot be {self._field.reference} (expected an object)")
        return decoded


class JsonEncode(FieldValueTransform):
    """Writes the value in ``field`` as compact JSON text with sorted keys; null stays null.

    A whole .Key / .Payload.Before / .Payload.After becomes raw data, a nested
    field becomes a string (Conduit's behaviour).
    """

    name = "json.encode"
    version = "v0.1.0"
    summary = "Encode a field as JSON."
    description = (
        "Encodes the value of `field` as compact JSON (keys sorted). A whole .Key or .Payload side becomes raw "
        "data, a nested field a string. Null is left alone."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("encode")}

    convert = staticmethod(to_json)
