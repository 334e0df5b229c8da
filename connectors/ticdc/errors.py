"""Typed errors every TiCDC codec raises.

A codec never lets a library error (fastavro, orjson, struct, csv) escape: it
wraps it in one of these, naming the codec and where in the input the problem
is, so a pipeline can route the message to a DLQ with a useful reason.
"""

from __future__ import annotations

from typing import Any

from cdcflow.errors import CdcflowError

Position = int | str | None
"""Byte offset (binary formats), ``line N`` / ``line N, column C`` (text formats)
or a field path (``data[0].price``); None when the whole message is at fault."""


class CodecError(CdcflowError):
    """A message could not be decoded or an event could not be encoded."""

    def __init__(self, codec: str, position: Position, message: str):
        self.codec = codec
        self.position = position
        self.message = message
        where = f" at {position}" if isinstance(position, str) else (
            f" at byte {position}" if position is not None else "")
        super().__init__(f"{codec}{where}: {message}")


class MalformedMessage(CodecError):
    """The bytes are not a well-formed message of this format (wrong magic byte,
    truncated, bad lengths, not JSON, a body that does not match its schema)."""


class UnknownSchema(CodecError):
    """The message names a schema (registry id, subject) the registry does not have."""

    def __init__(self, codec: str, position: Position, message: str, *, schema_id: int | None = None,
                 subject: str | None = None):
        self.schema_id = schema_id
        self.subject = subject
        super().__init__(codec, position, message)


class UnsupportedEvent(CodecError):
    """The format cannot carry this kind of event with the given options
    (e.g. a DDL event for Avro without ``avro-enable-watermark``)."""


class UnrepresentableValue(CodecError):
    """A value cannot be written in the target format without changing it.

    Names table, column and value: values never change silently.
    """

    def __init__(self, codec: str, table: str, column: str, value: Any, message: str,
                 position: Position = None):
        self.table = table
        self.column = column
        self.value = value
        shown = repr(value)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(codec, position if position is not None else f"{table}.{column}",
                         f"{message} (table {table}, column {column}, value {shown})")
