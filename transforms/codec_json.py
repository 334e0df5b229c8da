"""``json.decode`` and ``json.encode``: JSON text ⇄ structured data in one field (Conduit's processors)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Failed, Result, Transform

from .base import KEY_OR_PAYLOAD, compile_ref, parse_json, to_json
from .field_set import SCHEMA_PARAMETERS


def _field_parameter(verb: str) -> Parameter:
    return Parameter(
        ParamType.STRING, required=True, regex=KEY_OR_PAYLOAD, exclusion=(".Payload",),
        description=f"Field to {verb}, under .Key or .Payload (e.g. .Key, .Payload.After, .Payload.Before.foo).",
    )


class JsonDecode(Transform):
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
    parameters = {"field": _field_parameter("decode"), **SCHEMA_PARAMETERS}

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"])

    def process(self, records: Sequence[Record]) -> list[Result]:
        get, set_ = self._field.get, self._field.set
        out: list[Result] = []
        for r in records:
            try:
                value = get(r)
                t = type(value)
                if t is bytes or t is str:
                    decoded = parse_json(value) if value else None
                    if decoded is not None and type(decoded) is not dict and not self._field.path:
                        raise ValueError(
                            f"JSON {type(decoded).__name__} cannot be {self._field.reference} (expected an object)"
                        )
                    set_(r, decoded)
                elif value is not None and t is not dict:
                    raise ValueError(f"unexpected data type {t.__name__} (expected raw data or a string)")
                out.append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(f"field {self._field.reference!r}: {e}"))
        return out

    def process_record(self, record: Record) -> Result:
        return self.process([record])[0]


class JsonEncode(Transform):
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
    parameters = {"field": _field_parameter("encode"), **SCHEMA_PARAMETERS}

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"])

    def process(self, records: Sequence[Record]) -> list[Result]:
        get, set_ = self._field.get, self._field.set
        out: list[Result] = []
        for r in records:
            try:
                value = get(r)
                if value is not None:
                    set_(r, to_json(value))
                out.append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(f"field {self._field.reference!r}: {e}"))
        return out

    def process_record(self, record: Record) -> Result:
        return self.process([record])[0]
