"""Confluent compatibility levels decided by Avro schema-resolution rules.

A level names a direction and a reach. Direction: BACKWARD = the new schema can
read data written with the old one; FORWARD = the old schema can read data
written with the new one; FULL = both. Reach: the latest version only, or every
version (``_TRANSITIVE``). The reader/writer test itself is Apache Avro's
``ReaderWriterCompatibilityChecker``, the implementation of the specification's
resolution rules, so "compatible" means exactly "an Avro reader resolves it".
"""

from __future__ import annotations

import functools
import json
from typing import Sequence

from ..errors import SchemaError

BACKWARD = "BACKWARD"
BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
FORWARD = "FORWARD"
FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
FULL = "FULL"
FULL_TRANSITIVE = "FULL_TRANSITIVE"
NONE = "NONE"

LEVELS = (BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE)
DEFAULT_LEVEL = BACKWARD


class InvalidSchema(SchemaError):
    """Schema text that is not a valid Avro schema (HTTP 422, error code 42201)."""


class InvalidLevel(SchemaError):
    """A compatibility level name outside ``LEVELS`` (HTTP 422, error code 42203)."""


def normalize_level(level: object) -> str:
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise InvalidLevel(f"invalid compatibility level {level!r}; valid levels: {', '.join(LEVELS)}")
    return level.upper()


@functools.lru_cache(maxsize=1024)
def parse_avro(text: str):
    """Parse once per distinct text; the registry checks the same old versions again and again.

    Apache Avro parses it (and later judges compatibility); fastavro, which the
    codecs write with, must accept it too: it also checks that defaults match
    their field types, which Apache Avro's Python parser does not.
    """
    import avro.errors
    import avro.schema
    import fastavro

    try:
        parsed = avro.schema.parse(text)
        fastavro.parse_schema(json.loads(text))
    except (avro.errors.AvroException, fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError,
            AttributeError, RecursionError) as e:  # RecursionError: absurdly deep nesting is invalid input
        raise InvalidSchema(f"invalid Avro schema: {e}") from None
    return parsed


def reader_writer_problems(reader_text: str, writer_text: str) -> list[str]:
    """Why a reader with ``reader_text`` cannot read data written with ``writer_text`` (empty: it can)."""
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    result = ReaderWriterCompatibilityChecker().get_compatibility(parse_avro(reader_text), parse_avro(writer_text))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(sorted({k.value for k in result.incompatibilities}))
    where = ", ".join(sorted(result.locations))
    details = "; ".join(sorted(map(str, result.messages)))
    return [f"{kinds} at {where}: {details}"]


def problems(level: str, new_text: str, previous: Sequence[str]) -> list[str]:
    """Why ``new_text`` may not follow ``previous`` (oldest first) under ``level``; empty when it may.

    Non-transitive levels look at the newest previous version only.
    """
    level = normalize_level(level)
    parse_avro(new_text)
    if level == NONE or not previous:
        return []
    olds = list(previous) if level.endswith("_TRANSITIVE") else [previous[-1]]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    out: list[str] = []
    for old in reversed(olds):  # newest first: the most relevant message comes first
        if backward:
            out += [f"new schema cannot read data written with an older version: {p}"
                    for p in reader_writer_problems(new_text, old)]
        if forward:
            out += [f"an older version cannot read data written with the new schema: {p}"
                    for p in reader_writer_problems(old, new_text)]
    return out
