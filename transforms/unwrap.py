"""``unwrap.debezium``, ``unwrap.kafkaconnect``, ``unwrap.opencdc``: replace a record with
the record wrapped inside one of its fields (Conduit's processors).

The wrapped record may be structured data or JSON text (raw data or a string).
The outer record's position is kept, so acknowledgements still reach the source.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

from cdcflow.expr import to_text
from cdcflow.params import Parameter, ParamType
from cdcflow.record import META_READ_AT, Operation, Record
from cdcflow.sdk import Result, Transform

from .base import compile_ref, parse_json

_DEBEZIUM_OPS = {
    "c": Operation.CREATE,
    "u": Operation.UPDATE,
    "d": Operation.DELETE,
    "r": Operation.SNAPSHOT,
    "$unset": Operation.UPDATE,  # MongoDB's unset
}


def _structured(value: Any, what: str) -> dict:
    t = type(value)
    if t is dict:
        return value
    if t is bytes or t is str:
        try:
            parsed = parse_json(value)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        if type(parsed) is not dict:
            raise ValueError(f"{what}: JSON {type(parsed).__name__} is not an object")
        return parsed
    if value is None:
        raise ValueError(f"{what}: the field is null")
    raise ValueError(f"{what}: unexpected data type {t.__name__}")


def _unwrap_key(key: Any) -> Any:
    """A Kafka Connect / Debezium key ``{"schema": ..., "payload": ...}`` becomes its payload.

    Any other key is returned unchanged; a payload that is not a map becomes raw text.
    """
    structured = key
    if type(key) is bytes:
        try:
            structured = parse_json(key)
        except ValueError:
            return key
    if type(structured) is not dict or "payload" not in structured:
        return key
    payload = structured["payload"]
    if type(payload) is dict:
        return payload
    return to_text(payload).encode("utf-8")


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if type(value) is dict:
        dot = prefix + "." if prefix else ""
        for k, v in value.items():
            _flatten(dot + k, v, out)
    elif value is not None:
        out[prefix] = value if type(value) is str else to_text(value)


def _field_parameter(what: str, regex: str | None) -> Parameter:
    return Parameter(
        ParamType.STRING, default=".Payload.After", regex=regex,
        description=f"Field holding the {what} record (structured data or JSON text).",
    )


class _Unwrap(Transform):
    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"])


class UnwrapDebezium(_Unwrap):
    name = "unwrap.debezium"
    version = "v0.1.0"
    summary = "Unwraps a Debezium record from the input OpenCDC record."
    description = (
        "Replaces the record with the Debezium change event found in `field` (its `payload`: `before`, `after`, "
        "`op`, `source`, `ts_ms`). `op` c/u/d/r becomes create/update/delete/snapshot; `source` fields are merged "
        "into metadata (flattened with dots), other top-level fields under `debezium.`; `ts_ms` sets "
        "opencdc.readAt. A Kafka Connect key (`{schema, payload}`) becomes its payload."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("Debezium", r"^\.Payload.*")}

    def process_record(self, record: Record) -> Result:
        event = _structured(self._field.get(record), self._field.reference)
        change = event.get("payload")
        if type(change) is not dict:
            raise ValueError("data to be unwrapped doesn't contain a payload field")
        missing = [f for f in ("after", "source", "op") if f not in change]
        if missing:
            raise ValueError(f"invalid record: {', '.join(repr(m) for m in missing)} missing from the Debezium payload")
        before = self._data(change.get("before"), "before")
        after = self._data(change["after"], "after")
        op = change["op"]
        if type(op) is not str or op not in _DEBEZIUM_OPS:
            raise ValueError(f"{op!r} is an invalid operation (expected one of {', '.join(_DEBEZIUM_OPS)})")
        metadata = dict(record.metadata)
        source: dict[str, str] = {}
        for name, value in change.items():
            if name in ("before", "after", "op"):
                continue
            if name == "ts_ms":
                if value is not None:
                    if type(value) not in (int, float):
                        raise ValueError("ts_ms is not a number")
                    metadata[META_READ_AT] = str(int(value) * 1_000_000)
            elif name == "source":
                _flatten("", value, source)
            else:
                _flatten("debezium." + name, value, metadata)
        metadata.update(source)  # source wins, as in Conduit
        return Record(record.position, _DEBEZIUM_OPS[op], metadata, _unwrap_key(record.key), before, after)

    @staticmethod
    def _data(value: Any, name: str) -> Any:
        if value is None or type(value) is dict:
            return value
        if type(value) is str:
            return value.encode("utf-8")
        raise ValueError(f"failed to parse field {name}: expected a map or a string, got {type(value).__name__}")


class UnwrapKafkaConnect(_Unwrap):
    name = "unwrap.kafkaconnect"
    version = "v0.1.0"
    summary = "Unwraps a Kafka Connect record from an OpenCDC record."
    description = (
        "Replaces the payload with the `payload` of the Kafka Connect record (`{schema, payload}`) found in "
        "`field`; the operation becomes create, metadata and position stay. A Kafka Connect key becomes its payload."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("Kafka Connect", r"^\.Payload.*")}

    def process_record(self, record: Record) -> Result:
        wrapped = _structured(self._field.get(record), self._field.reference)
        payload = wrapped.get("payload")
        if type(payload) is not dict:
            raise ValueError("referenced record field doesn't contain a payload field")
        return Record(record.position, Operation.CREATE, record.metadata, _unwrap_key(record.key), None, payload)


class UnwrapOpenCDC(_Unwrap):
    name = "unwrap.opencdc"
    version = "v0.1.0"
    summary = "Unwraps an OpenCDC record saved in one of the record's fields."
    description = (
        "Replaces the record with the OpenCDC record found in `field` (structured data, or its JSON form as "
        "raw data or a string): operation, metadata, key and payload come from the wrapped record, the "
        "position stays. Raw key/payload values in the wrapped record are base64 text."
    )
    author = "cdcflow"
    parameters = {"field": _field_parameter("OpenCDC", None)}

    def process_record(self, record: Record) -> Result:
        wrapped = _structured(self._field.get(record), self._field.reference)
        if "operation" not in wrapped:
            raise ValueError("failed unmarshalling record: no operation")
        op = wrapped["operation"]
        if isinstance(op, Operation):
            operation = op
        else:
            try:
                operation = Operation.from_text(op if type(op) is str else to_text(op))
            except ValueError:
                raise ValueError(f"failed unmarshalling record: invalid operation {op!r}") from None
        if "metadata" not in wrapped:
            raise ValueError("failed unmarshalling record: no metadata")
        md = wrapped["metadata"]
        if md is None:
            md = {}
        if type(md) is not dict:
            raise ValueError(f"failed unmarshalling record: metadata must be a map, got {type(md).__name__}")
        metadata = {k: v if type(v) is str else to_text(v) for k, v in md.items()}
        if "payload" not in wrapped:
            raise ValueError("failed unmarshalling record: no payload")
        payload = wrapped["payload"]
        if payload is None:
            payload = {}
        if type(payload) is not dict:
            raise ValueError(f"failed unmarshalling record: payload must be a map, got {type(payload).__name__}")
        return Record(
            record.position,
            operation,
            metadata,
            self._data(wrapped.get("key"), "key"),
            self._data(payload.get("before"), "payload.before"),
            self._data(payload.get("after"), "payload.after"),
        )

    @staticmethod
    def _data(value: Any, name: str) -> Any:
        t = type(value)
        if value is None or t is dict or t is bytes:
            return value
        if t is str:
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as e:
                raise ValueError(f"failed unmarshalling {name}: invalid base64: {e}") from None
        raise ValueError(f"failed unmarshalling {name}: expected a map or base64 text, got {t.__name__}")
