"""``split`` and ``clone``: one record in, several out (Conduit's processors).

The records a split or clone produces take the input's place in the batch and
share its position; the engine acknowledges the input once all of them are written.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result, Transform

from .base import KEY_OR_PAYLOAD, compile_ref, copy_data, copy_record

SPLIT_INDEX = "split.index"
CLONE_INDEX = "clone.index"


class Split(Transform):
    """Splits the list in ``field`` into one record per element (an empty list drops the record)."""

    name = "split"
    version = "v0.1.0"
    summary = "Split a record into multiple records based on a field."
    description = (
        "Turns the list in `field` (structured data under .Key or .Payload) into one record per element: each "
        "copy of the record holds one element in `field` and its index in metadata `split.index`. An empty "
        "list drops the record; a value that is not a list fails it."
    )
    author = "cdcflow"
    parameters = {
        "field": Parameter(
            ParamType.STRING, required=True, regex=KEY_OR_PAYLOAD,
            description="Field holding a list, e.g. .Payload.After.users.",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._field = compile_ref(self, "field", config["field"])

    def process_record(self, record: Record) -> Result:
        items = self._field.get(record)
        if type(items) is not list:
            raise ValueError(f"field {self._field.reference!r} is not a list (got {type(items).__name__})")
        set_ = self._field.set
        # the list itself is replaced in every copy: detach it before copying the rest
        self._field.set(record, None)
        out = []
        for i, item in enumerate(items):
            copy = copy_record(record)
            set_(copy, copy_data(item))
            copy.metadata[SPLIT_INDEX] = str(i)
            out.append(copy)
        return out


class Clone(Transform):
    """Emits each record ``count`` + 1 times, numbered in metadata ``clone.index``."""

    name = "clone"
    version = "v0.1.0"
    summary = "Clone records."
    description = (
        "Emits `count` + 1 copies of each record (the original and `count` clones), each with its index in "
        "metadata `clone.index` (0 for the first). Copies share nothing, so later processors may change one "
        "without touching the others."
    )
    author = "cdcflow"
    parameters = {
        "count": Parameter(
            ParamType.INT, required=True, greater_than=0,
            description="How many clones to add per record (2 gives 3 records for each input).",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self._count = int(config["count"])

    def process(self, records: Sequence[Record]) -> list[Result]:
        n = self._count
        out: list[Result] = []
        for r in records:
            copies = [r] + [copy_record(r) for _ in range(n)]
            for i, c in enumerate(copies):
                c.metadata[CLONE_INDEX] = str(i)
            out.append(copies)
        return out
