"""Small pieces the built-in transforms share: compiling field settings, JSON text,
deep copies of record data, and the Conduit ``field`` parameter shapes.

Kept here so each transform module holds only its own behaviour.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

import orjson

from cdcflow.errors import ConfigError
from cdcflow.record import Record
from cdcflow.sdk import Failed, Result, Transform

from .paths import FieldRef, FieldRefError

#: Conduit's validation for settings that may only name structured data under .Key or .Payload
KEY_OR_PAYLOAD = r"^\.(Payload|Key).*"

_BIG_INT = re.compile(rb"\d{19}")  # orjson reads integers past 64 bits as floats; such texts use json


def plugin_name(transform: Any) -> str:
    """The name errors carry: the processor id when the chain set one, else the plugin name."""
    return getattr(transform, "id", "") or transform.name


def compile_ref(transform: Any, parameter: str, text: str) -> FieldRef:
    """Compile a field reference setting; a bad one is a ConfigError naming the parameter."""
    try:
        return FieldRef.compile(text)
    except FieldRefError as e:
        raise ConfigError(plugin_name(transform), parameter, "reference", str(e)) from None


def failed(e: BaseException) -> Failed:
    """The per-record failure for ``e``: its message, or its type name when it has none."""
    return Failed(str(e) or type(e).__name__)


def apply_each(records: Sequence[Record], steps: Iterable[Callable[[Record], Any]]) -> list[Result]:
    """Run in-place record edits (``steps``, in order) on every record; a record whose
    edit raises becomes ``Failed`` and the others go on (field.exclude, field.rename)."""
    steps = tuple(steps)
    out: list[Result] = []
    append = out.append
    if len(steps) == 1:  # the common case, without the inner loop
        step = steps[0]
        for r in records:
            try:
                step(r)
                append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                append(failed(e))
        return out
    for r in records:
        try:
            for step in steps:
                step(r)
            append(r)
        except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
            append(failed(e))
    return out


#: what ``FieldValueTransform.convert`` returns to leave the field as it is
UNCHANGED: Any = object()


class FieldValueTransform(Transform):
    """A transform that replaces the value of one ``field`` with ``convert(value)``
    (base64/json/avro encode and decode, field.convert).

    Subclasses declare the ``field`` parameter and implement ``convert``; the batch
    loop, the null rule and the failure text (``field '<ref>': <prefix><error>``,
    failing only that record) live here once.
    """

    #: null values are left alone without calling ``convert`` (False: ``convert`` sees None too)
    skip_null: ClassVar[bool] = True
    #: text put before the error in a failure, e.g. "failed encoding data: "
    failure_prefix: ClassVar[str] = ""

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"])

    def convert(self, value: Any) -> Any:
        """The field's new value, or ``UNCHANGED``; raise to fail the record."""
        raise NotImplementedError

    def process(self, records: Sequence[Record]) -> list[Result]:
        get, set_, convert = self._field.get, self._field.set, self.convert
        skip_null, unchanged = self.skip_null, UNCHANGED
        prefix = f"field {self._field.reference!r}: {self.failure_prefix}"
        out: list[Result] = []
        append = out.append
        for r in records:
            try:
                value = get(r)
                if value is None and skip_null:
                    append(r)
                    continue
                value = convert(value)
                if value is not unchanged:
                    set_(r, value)
                append(r)
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                append(Failed(f"{prefix}{e}"))
        return out


def parse_json(data: bytes | str) -> Any:
    """JSON text to native values. Integers stay ints of any size (Conduit reads every
    number as float64; cdcflow keeps TiDB's BIGINT UNSIGNED and DECIMAL-as-int exact)."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        if _BIG_INT.search(raw):
            return json.loads(raw)
        return orjson.loads(raw)
    except ValueError as e:
        raise ValueError(f"invalid JSON: {e}") from None


def to_json(value: Any) -> str:
    """Native value to compact JSON text with sorted keys (what Go's encoding/json writes).

    Values JSON has no type for use the JSON record form's text (bytes → base64,
    Decimal keeps its scale, dates/times as TiDB text).
    """
    from cdcflow.convert.jsonform import jsonable

    return orjson.dumps(jsonable(value), option=orjson.OPT_SORT_KEYS).decode("utf-8")


def copy_data(value: Any) -> Any:
    """Deep copy of record data (dicts and lists; scalars are immutable and shared)."""
    t = type(value)
    if t is dict:
        return {k: copy_data(v) for k, v in value.items()}
    if t is list:
        return [copy_data(v) for v in value]
    return value


def copy_record(record: Record) -> Record:
    """A record that shares nothing mutable with ``record`` (for clone and split)."""
    return Record(
        record.position,
        record.operation,
        dict(record.metadata),
        copy_data(record.key),
        copy_data(record.before),
        copy_data(record.after),
    )
