"""``base64.decode`` and ``base64.encode``: standard base64 in one field (Conduit's processors)."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping, Sequence

from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Failed, Result, Transform

from .base import compile_ref
from .field_set import SCHEMA_PARAMETERS

_SCALARS = (int, float, bool)


def _field_parameter(verb: str) -> Parameter:
    return Parameter(
        ParamType.STRING, required=True, exclusion=(".Position",),
        description=f"Field to {verb} (any reference but .Position), e.g. .Key or .Payload.After.foo.",
    )


class Base64Decode(Transform):
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
                if t is str or t is bytes:
                    try:
                        raw = base64.b64decode(value, validate=True)
                    except (binascii.Error, ValueError) as e:
                        raise ValueError(f"failed to decode the value: {e}") from None
                    try:
                        set_(r, raw.decode("utf-8"))
                    except UnicodeDecodeError:
                        set_(r, raw)
                elif value is not None:
                    raise ValueError(f"unexpected data type {t.__name__}")
                out.append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(f"field {self._field.reference!r}: {e}"))
        return out

    def process_record(self, record: Record) -> Result:
        return self.process([record])[0]


class Base64Encode(Transform):
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
                t = type(value)
                if t is bytes:
                    raw = value
                elif t is str:
                    raw = value.encode("utf-8")
                elif t is bool:
                    raw = b"true" if value else b"false"
                elif isinstance(value, _SCALARS):
                    raw = str(value).encode("ascii")
                elif value is None:
                    out.append(r)
                    continue
                else:
                    raise ValueError(f"unexpected data type {t.__name__}")
                set_(r, base64.b64encode(raw).decode("ascii"))
                out.append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(f"field {self._field.reference!r}: {e}"))
        return out

    def process_record(self, record: Record) -> Result:
        return self.process([record])[0]
