"""TiCDC's Avro protocol (Confluent framing), both directions, as pure functions.

``schema``: the schemas TiCDC registers and the TiDB value <-> Avro datum mapping;
``encode``: events -> messages; ``decode``: messages -> events. The registry is passed in:
any object with ``register(subject, schema_text) -> id`` and ``schema_by_id(id) -> text``
(``StoreRegistry`` adapts ``cdcflow.schemas.SchemaStore``).
"""

from .decode import AvroDecoder
from .encode import AvroEncoder
from .schema import (
    CODEC,
    COMMIT_TS_FIELD,
    OP_FIELD,
    PHYSICAL_TIME_FIELD,
    AvroOptions,
    StoreRegistry,
    build_schema,
    schema_text,
    topic_subject,
)

__all__ = [
    "AvroDecoder", "AvroEncoder", "AvroOptions", "StoreRegistry", "build_schema", "schema_text", "topic_subject",
    "CODEC", "COMMIT_TS_FIELD", "OP_FIELD", "PHYSICAL_TIME_FIELD",
]
