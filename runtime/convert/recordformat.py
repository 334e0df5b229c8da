"""Conduit's record formats (``sdk.record.format``): the bytes a destination writes for a record.

Conduit's connector SDK lets every destination choose how a whole record becomes bytes
(github.com/ConduitIO/conduit-connector-sdk, record_serializer.go); destinations that write whole
records (the file destination, for one) write those bytes. The formats:

- ``opencdc/json`` (the default): the JSON form (``cdcflow.convert.jsonform``).
- ``debezium/json``: a Kafka Connect envelope ``{"schema": ..., "payload": ...}`` whose payload is
  Debezium's change event (``before``, ``after``, ``source`` = the metadata, ``op`` c/u/d/r,
  ``ts_ms`` = ``opencdc.readAt`` in milliseconds, ``transaction`` null) and whose schema is
  reflected from the values as the SDK's ``kafkaconnect.Reflect`` does. Raw data is parsed as a
  JSON object (numbers become doubles, as Go decodes them); other raw data is put under the
  ``debezium.rawData.key`` option (default ``opencdc.rawData``) as bytes. ``debezium.schema.name``
  names the envelope's schema.
- ``template``: the options are a template rendered with the record (``cdcflow.expr.Template``).

Options of the generic formats are ``k=v`` pairs separated by commas, as Conduit parses them.

Conduit falls back to the JSON form when a record does not serialize; here that record fails on
its own (it goes to the dead-letter queue with the reason), so no line silently changes format.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import orjson

from ..errors import CdcflowError, ConfigError, InfrastructureError
from ..record import META_READ_AT, Operation, Record
from . import jsonform

OPENCDC_JSON, DEBEZIUM_JSON, TEMPLATE = "opencdc/json", "debezium/json", "template"
FORMATS = (OPENCDC_JSON, DEBEZIUM_JSON, TEMPLATE)
DEBEZIUM_RAW_DATA_KEY = "opencdc.rawData"


def parse_options(text: str) -> dict[str, str]:
    """``opt1=v1,opt2=v2`` as Conduit's generic formats read it (a pair without ``=`` has value "")."""
    text = text.strip()
    if not text:
        return {}
    out: dict[str, str] = {}
    for pair in text.split(","):
        k, _, v = pair.partition("=")
        out[k] = v
    return out


class RecordFormat:
    """One configured format: ``lines`` gives the bytes of a batch, one line per record."""

    name = OPENCDC_JSON

    def lines(self, records: Sequence[Record]) -> tuple[bytes, list[str | None] | None]:
        """The records' bytes, each followed by a newline, and the per-record errors (None when
        every record serialized; a failed record has no line)."""
        out: list[bytes] = []
        errors: list[str | None] = []
        failed = False
        for r in records:
            try:
                out.append(self.serialize(r))
                out.append(b"\n")
                errors.append(None)
            except InfrastructureError:
                raise
            except (CdcflowError, ValueError, TypeError, KeyError, UnicodeError) as e:
                failed = True
                errors.append(f"sdk.record.format {self.name}: {e}")
        return b"".join(out), (errors if failed else None)

    def serialize(self, record: Record) -> bytes:
        return jsonform.dumps_record(record)


class _OpenCDCJSON(RecordFormat):
    def lines(self, records: Sequence[Record]) -> tuple[bytes, list[str | None] | None]:
        return jsonform.dumps_lines(records), None  # the batch kernel; a record it cannot write raises


class _Template(RecordFormat):
    name = TEMPLATE

    def __init__(self, text: str):
        from ..expr import ExpressionError, Template

        try:
            self._render: Callable[[Record], str] = Template.compile(text).render
        except ExpressionError as e:
            raise ConfigError("sdk.record.format", "sdk.record.format.options", "template",
                              f"failed to parse template: {e}") from None

    def serialize(self, record: Record) -> bytes:
        return self._render(record).encode()


class _DebeziumJSON(RecordFormat):
    name = DEBEZIUM_JSON
    _OPS = {Operation.CREATE: "c", Operation.UPDATE: "u", Operation.DELETE: "d", Operation.SNAPSHOT: "r"}

    def __init__(self, options: dict[str, str]):
        self.schema_name = options.get("debezium.schema.name", "")
        self.raw_data_key = options.get("debezium.rawData.key") or DEBEZIUM_RAW_DATA_KEY

    def _structured(self, data: Any) -> dict | None:
        if data is None or type(data) is dict:
            return data
        raw = bytes(data)
        if not raw:
            return None
        try:  # Go decodes JSON numbers into float64
            value = json.loads(raw, parse_int=float, parse_constant=_refuse)
        except (ValueError, UnicodeDecodeError):
            value = _NOT_AN_OBJECT
        if value is None or type(value) is dict:
            return value
        return {self.raw_data_key: raw}

    def serialize(self, record: Record) -> bytes:
        before, after = self._structured(record.before), self._structured(record.after)
        try:
            read_at_ms = int(record.metadata.get(META_READ_AT, "")) // 1_000_000
        except ValueError:
            read_at_ms = 0
        metadata = record.metadata
        schema: dict[str, Any] = {"type": "struct"}
        if self.schema_name:
            schema["name"] = self.schema_name
        schema["fields"] = [
            _side_schema(before if before is not None else after, "before"),
            _side_schema(after if after is not None else before, "after"),
            {**_reflect(metadata), "field": "source"},
            {"type": "string", "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            _TRANSACTION_SCHEMA,
        ]
        payload: dict[str, Any] = {"before": before, "after": after, "source": metadata,
                                   "op": self._OPS.get(record.operation, "")}
        if read_at_ms:
            payload["ts_ms"] = read_at_ms
        payload["transaction"] = None
        return _go_json({"schema": schema, "payload": payload})


_NOT_AN_OBJECT = object()
_TRANSACTION_SCHEMA = {"type": "struct", "optional": True, "fields": [
    {"type": "string", "field": "id"}, {"type": "int64", "field": "total_order"},
    {"type": "int64", "field": "data_collection_order"}], "field": "transaction"}


def _refuse(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _side_schema(value: dict | None, field: str) -> dict:
    """``before``/``after``: the value's reflected schema (a map: an optional struct; no value: an
    empty optional struct), always optional."""
    s = _reflect(value if value is not None else {})
    s["optional"] = True
    return _with_field(s, field)


def _with_field(schema: dict, field: str) -> dict:
    return {**schema, "field": field}


def _reflect(value: Any) -> dict:
    """The Kafka Connect schema ``kafkaconnect.Reflect`` gives a value Conduit would hold
    (map fields in sorted order: Go's map order is random). Keys in the JSON order of Go's
    ``Schema`` struct: type, optional, ..., items, fields, field."""
    t = type(value)
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "int64"}
    if t is float:
        return {"type": "double"}
    if t is bytes or t is bytearray:
        return {"type": "bytes", "optional": True}
    if t is dict:
        fields = []
        for k in sorted(value):
            v = value[k]
            fields.append(_with_field(_reflect(v) if v is not None else {"type": "string", "optional": True}, k))
        return {"type": "struct", "optional": True, **({"fields": fields} if fields else {})}
    if t is list or t is tuple:
        first = value[0] if value else None
        items = _reflect(first) if first is not None else {"type": "string", "optional": True}
        return {"type": "array", "optional": True, "items": items}
    return {"type": "string"}  # str, and values JSON writes as text (Decimal, dates, times)


def _go_json(envelope: dict) -> bytes:
    """JSON as Go's encoder writes it (Go's escaping and number texts): the dicts built above keep
    the order of Go's struct fields; data and metadata are maps, their keys sorted (``jsonable``)."""
    payload = envelope["payload"]
    for side in ("before", "after", "source"):
        payload[side] = jsonform.jsonable(payload[side], side)
    return jsonform._go_escaped(orjson.dumps(envelope))


def record_format(name: str, options: str = "") -> RecordFormat:
    """The configured format ``name``; ConfigError for an unknown one or options it cannot take."""
    if name == OPENCDC_JSON:
        return _OpenCDCJSON()
    if name == DEBEZIUM_JSON:
        return _DebeziumJSON(parse_options(options))
    if name == TEMPLATE:
        return _Template(options)
    raise ConfigError("sdk.record.format", "sdk.record.format", "inclusion",
                      f"{name!r} is not a record format (known: {', '.join(FORMATS)})")
