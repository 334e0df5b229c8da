"""Which Avro schema a record's key or payload travels with — shared by the protobuf and JSON forms.

Rule: if the record's metadata already names a schema (``opencdc.payload.schema.subject``
/ ``.version``) that is in the store and every value fits it exactly, keep it
(this is how the TiDB column-type schema travels). Otherwise reuse the schema
last derived for the default subject if the values fit it, else derive one
(``derive_shared_schema``: before and after share it) and register it under
``<collection or "cdcflow">.payload`` / ``.key``; the store deduplicates.

A reference the writer had to derive is listed in ``cdcflow.schema.derived``;
readers drop those references again after restoring the values, so a record
comes back exactly as it went in (the reference is a wire detail).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from ..avro_values import Codec, codec_for, derive_shared_schema
from ..errors import ConversionError, SchemaError
from ..record import (
    META_COLLECTION,
    META_KEY_SCHEMA_SUBJECT,
    META_KEY_SCHEMA_VERSION,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
)
from ..schemas import AVRO, SchemaStore, default_store

META_SCHEMA_DERIVED = "cdcflow.schema.derived"
KEY, PAYLOAD = "key", "payload"
META_KEYS = {
    KEY: (META_KEY_SCHEMA_SUBJECT, META_KEY_SCHEMA_VERSION),
    PAYLOAD: (META_PAYLOAD_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_VERSION),
}
_RECORD_NAMES = {KEY: "Key", PAYLOAD: "Payload"}


class SchemaRefs:
    """Codecs of one store, cached by (subject, version); one per store (use :func:`refs_for`)."""

    def __init__(self, store: SchemaStore):
        self.store = store
        self._codecs: dict[tuple[str, int], Codec] = {}
        self._last: dict[str, tuple[Codec, str]] = {}

    def codec(self, subject: str, version: int | str) -> Codec:
        """The codec of a stored schema; SchemaError if it is unknown or not Avro."""
        try:
            v = int(version)
        except (TypeError, ValueError):
            raise SchemaError(f"schema subject {subject!r}: version {version!r} is not a number") from None
        hit = self._codecs.get((subject, v))
        if hit is not None:
            return hit
        stored = self.store.get(subject, v)
        if stored.type != AVRO:
            raise SchemaError(f"schema subject {subject!r} version {v} is {stored.type}, not AVRO")
        codec = codec_for(stored.text)
        if v > 0:  # "latest" may change
            self._codecs[(subject, v)] = codec
        return codec

    def attach(
        self, metadata: dict[str, str], part: str, values: list[Any], attempt: Callable[[Codec, Any], Any]
    ) -> tuple[list[Any], str, str, bool]:
        """Pick the schema for ``values`` (dicts) of ``part``; return (attempt results, subject, version, derived).

        ``attempt(codec, value)`` encodes or checks one value and raises
        ConversionError when it does not fit.
        """
        subject_key, version_key = META_KEYS[part]
        subject, version = metadata.get(subject_key), metadata.get(version_key)
        if subject and version:
            try:
                codec = self.codec(subject, version)
                return [attempt(codec, v) for v in values], subject, version, False
            except (SchemaError, ConversionError):
                pass
        default_subject = f"{metadata.get(META_COLLECTION) or 'cdcflow'}.{part}"
        last = self._last.get(default_subject)
        if last is not None:
            try:
                return [attempt(last[0], v) for v in values], default_subject, last[1], True
            except ConversionError:
                pass
        schema = derive_shared_schema(values, _RECORD_NAMES[part])
        codec = codec_for(schema)
        stored = self.store.register(default_subject, codec.text)
        self._codecs[(default_subject, stored.version)] = codec
        version = str(stored.version)
        self._last[default_subject] = (codec, version)
        return [attempt(codec, v) for v in values], default_subject, version, True


_refs: "weakref.WeakKeyDictionary[SchemaStore, SchemaRefs]" = weakref.WeakKeyDictionary()
_refs_lock = threading.Lock()


def refs_for(store: SchemaStore | None) -> SchemaRefs:
    """The (cached) SchemaRefs of ``store``; None means the process default store."""
    if store is None:
        store = default_store()
    hit = _refs.get(store)
    if hit is None:
        with _refs_lock:
            hit = _refs.get(store)
            if hit is None:
                hit = _refs[store] = SchemaRefs(store)
    return hit


def mark_derived(metadata: dict[str, str], parts: list[str]) -> None:
    if parts:
        metadata[META_SCHEMA_DERIVED] = ",".join(parts)


def pop_derived(metadata: dict[str, str]) -> tuple[str, ...]:
    """Remove the marker; return the parts whose references the writer derived."""
    marker = metadata.pop(META_SCHEMA_DERIVED, None)
    return tuple(marker.split(",")) if marker else ()


def drop_refs(metadata: dict[str, str], parts: tuple[str, ...]) -> None:
    for part in parts:
        for k in META_KEYS.get(part, ()):
            metadata.pop(k, None)


def in_context(error: ConversionError, context: str) -> ConversionError:
    """The same error with ``context`` (record position, line, part) in front; path and value kept."""
    out = ConversionError(f"{context}: {error}")
    out.path, out.value = error.path, error.value
    return out
