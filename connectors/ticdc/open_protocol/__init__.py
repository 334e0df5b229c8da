"""TiCDC's open protocol (Kafka): ``schema`` (wire constants, Go quoting, type codes and flags
<-> column model), ``decode`` (batch-framed key/value pairs -> events), ``encode`` (events or
records -> key/value pairs); ``_open_protocol_decode`` / ``_open_protocol_encode`` are the
optional compiled twins of the hot paths (``cdcflow.accel``)."""

from .decode import OpenProtocolDecoder
from .encode import DEFAULT_OPTIONS, OpenProtocolEncoder
from .schema import (BATCH_VERSION, CODEC, TYPE_CODES, TYPE_DDL, TYPE_RESOLVED, TYPE_ROW, MessageTooLarge,
                     UnknownTypeCode, VersionMismatch, column_flags, column_from_wire, go_quote, go_unquote,
                     type_code)

__all__ = ["BATCH_VERSION", "CODEC", "DEFAULT_OPTIONS", "TYPE_CODES", "TYPE_DDL", "TYPE_RESOLVED", "TYPE_ROW",
           "MessageTooLarge", "OpenProtocolDecoder", "OpenProtocolEncoder", "UnknownTypeCode", "VersionMismatch",
           "column_flags", "column_from_wire", "go_quote", "go_unquote", "type_code"]
