"""The OpenCDC record as a Python object.

Structured data is a plain ``dict`` of native Python values (ints of any size,
``Decimal``, ``bytes``, ``str``, ``float``, ``bool``, ``None``, lists, dicts,
``datetime.date``, ``datetime.datetime``, ``datetime.timedelta`` for TiDB TIME,
which may be negative or longer than a day). Raw data is ``bytes``. Plain
attributes and ``__slots__`` keep per-record cost low on hot paths.
"""

from __future__ import annotations

import enum
from typing import Any, Union

Data = Union[None, bytes, dict[str, Any]]

# Standard metadata keys (opencdc.v1 FileOptions extensions 10000-10013).
META_VERSION = "opencdc.version"
META_CREATED_AT = "opencdc.createdAt"
META_READ_AT = "opencdc.readAt"
META_COLLECTION = "opencdc.collection"
META_KEY_SCHEMA_SUBJECT = "opencdc.key.schema.subject"
META_KEY_SCHEMA_VERSION = "opencdc.key.schema.version"
META_PAYLOAD_SCHEMA_SUBJECT = "opencdc.payload.schema.subject"
META_PAYLOAD_SCHEMA_VERSION = "opencdc.payload.schema.version"
META_FILE_NAME = "opencdc.file.name"
META_FILE_SIZE = "opencdc.file.size"
META_FILE_HASH = "opencdc.file.hash"
META_FILE_CHUNKED = "opencdc.file.chunked"
META_FILE_CHUNK_INDEX = "opencdc.file.chunk.index"
META_FILE_CHUNK_COUNT = "opencdc.file.chunk.count"
OPENCDC_VERSION = "v1"

# Keys Conduit sets; cdcflow sets the same ones so DLQ records look alike.
META_SOURCE_PLUGIN_NAME = "conduit.source.plugin.name"
META_SOURCE_PLUGIN_VERSION = "conduit.source.plugin.version"
META_DESTINATION_PLUGIN_NAME = "conduit.destination.plugin.name"
META_DESTINATION_PLUGIN_VERSION = "conduit.destination.plugin.version"
META_SOURCE_CONNECTOR_ID = "conduit.source.connector.id"
META_DLQ_NACK_ERROR = "conduit.dlq.nack.error"
META_DLQ_NACK_NODE_ID = "conduit.dlq.nack.node.id"

# Control records (DDL, resolved/watermark events) carry this key; see docs/records.md.
META_CONTROL = "cdcflow.control"


class Operation(enum.IntEnum):
    """Same numbers as ``opencdc.v1.Operation``."""

    UNSPECIFIED = 0
    CREATE = 1
    UPDATE = 2
    DELETE = 3
    SNAPSHOT = 4

    @property
    def text(self) -> str:
        """Name in Conduit's JSON form (``create``, ``update``, ...)."""
        return _OP_TEXT[self]

    @classmethod
    def from_text(cls, text: str) -> "Operation":
        try:
            return _TEXT_OP[text]
        except KeyError:
            raise ValueError(f"unknown operation {text!r}; expected one of {sorted(_TEXT_OP)}") from None


_OP_TEXT = {
    Operation.UNSPECIFIED: "unspecified",
    Operation.CREATE: "create",
    Operation.UPDATE: "update",
    Operation.DELETE: "delete",
    Operation.SNAPSHOT: "snapshot",
}
_TEXT_OP = {v: k for k, v in _OP_TEXT.items()}


class Record:
    """One change. ``key``, ``before`` and ``after`` are None, raw bytes or a dict."""

    __slots__ = ("position", "operation", "metadata", "key", "before", "after")

    def __init__(
        self,
        position: bytes = b"",
        operation: Operation = Operation.CREATE,
        metadata: dict[str, str] | None = None,
        key: Data = None,
        before: Data = None,
        after: Data = None,
    ):
        self.position = position
        self.operation = operation
        self.metadata = {} if metadata is None else metadata
        self.key = key
        self.before = before
        self.after = after

    @property
    def collection(self) -> str | None:
        return self.metadata.get(META_COLLECTION)

    @property
    def control(self) -> str | None:
        """``ddl``/``resolved`` for control records, None for data records."""
        return self.metadata.get(META_CONTROL)

    def copy(self) -> "Record":
        """Shallow copy with its own metadata dict and own top-level data dicts."""
        return Record(
            self.position,
            self.operation,
            dict(self.metadata),
            _copy_data(self.key),
            _copy_data(self.before),
            _copy_data(self.after),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.position == other.position
            and self.operation == other.operation
            and self.metadata == other.metadata
            and _data_eq(self.key, other.key)
            and _data_eq(self.before, other.before)
            and _data_eq(self.after, other.after)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Record(position={self.position!r}, operation={self.operation.text}, "
            f"metadata={self.metadata!r}, key={self.key!r}, before={self.before!r}, after={self.after!r})"
        )


def _copy_data(d: Data) -> Data:
    return dict(d) if isinstance(d, dict) else d


def _data_eq(a: Any, b: Any) -> bool:
    """Equality that tells values of different types apart (1 != 1.0 != True != Decimal(1))."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_data_eq(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_data_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    if hasattr(a, "as_tuple"):  # Decimal: 1.0 and 1.00 differ in scale, which TiDB keeps
        return a.as_tuple() == b.as_tuple()
    return a == b
