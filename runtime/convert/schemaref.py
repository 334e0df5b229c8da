"""Which Avro schema a record's key or payload travels with in the protobuf form.

(The JSON form attaches no reference: its lines are self-contained. Its optional restoring
reader, ``cdcflow.convert.jsontypes``, only looks schemas up here: ``refs_for`` / ``codec``.)

Rule: if the record's metadata already names a schema (``opencdc.payload.schema.subject``
/ ``.version``) that is in the store and every value fits it exactly, keep it
(this is how the TiDB column-type schema travels). Otherwise reuse the schema
last derived for the default subject if the values fit it, else derive one
(``derive_shared_schema``: before and after share it) and register it under
``<collection or "cdcflow">.payload`` / ``.key``; the store deduplicates.

A reference the writer had to derive is listed in ``cdcflow.schema.derived``;
readers drop those references again after restoring the values, so a record
comes back exactly as it went in (the reference is a wire detail). If the
derived reference replaced one the metadata named (values that do not fit the
TiDB column-type schema, say a Decimal of another scale), the replaced one
travels in ``cdcflow.schema.replaced`` (JSON ``{"payload": [subject, version]}``)
and readers put it back.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import orjson

from .avro import Codec, codec_for, derive_shared_schema
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
META_SCHEMA_REPLACED = "cdcflow.schema.replaced"
KEY, PAYLOAD = "key", "payload"
META_KEYS = {
    KEY: (META_KEY_SCHEMA_SUBJECT, META_KEY_SCHEMA_VERSION),
    PAYLOAD: (META_PAYLOAD_SCHEMA_SUBJECT, META_PAYLOAD_SCHEMA_VERSION),
}
_RECORD_NAMES = {KEY: "Key", PAYLOAD: "Payload"}
_RECENT = 8  # derived schemas remembered per subject (values alternating between shapes reuse them)


class SchemaRefs:
    """Codecs of one store, cached by (subject, version); one per store (use :func:`refs_for`)."""

    def __init__(self, store: SchemaStore):
        self.store = store
        self._codecs: dict[tuple[str, int], Codec] = {}
        self._recent: dict[str, list[tuple[Codec, str]]] = {}  # per default subject, most recent first

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

    def first_derived(self, metadata: dict[str, str], part: str) -> tuple[Codec, str, str] | None:
        """(codec, default subject, version) that ``attach`` tries first for ``part`` when the
        metadata names no schema: the default subject's most recent derived one; None if none yet.

        Why: a writer that remembers nothing per record can take this schema directly when the
        values fit it, and only call ``attach`` (which would try it first too) when they do not.
        """
        default_subject = f"{metadata.get(META_COLLECTION) or 'cdcflow'}.{part}"
        recent = self._recent.get(default_subject)
        if not recent:
            return None
        codec, version = recent[0]
        return codec, default_subject, version

    def attach(
        self,
        metadata: dict[str, str],
        part: str,
        values: list[Any],
        attempt: Callable[[Codec, Any], Any],
        named_failed: bool = False,
    ) -> tuple[list[Any], str, str, bool]:
        """Pick the schema for ``values`` (dicts) of ``part``; return (attempt results, subject, version, derived).

        ``attempt(codec, value)`` encodes or checks one value and raises
        ConversionError when it does not fit. ``named_failed``: the caller already
        tried the schema the metadata names. When a derived schema replaces a
        reference the metadata named, the replaced one is recorded in ``metadata``
        (:data:`META_SCHEMA_REPLACED`); the caller sets the new reference.
        """
        subject_key, version_key = META_KEYS[part]
        subject, version = metadata.get(subject_key), metadata.get(version_key)
        if subject and version and not named_failed:
            try:
                codec = self.codec(subject, version)
                return [attempt(codec, v) for v in values], subject, version, False
            except (SchemaError, ConversionError):
                pass
        if subject is not None or version is not None:
            _record_replaced(metadata, part, subject, version)
        default_subject = f"{metadata.get(META_COLLECTION) or 'cdcflow'}.{part}"
        recent = self._recent.setdefault(default_subject, [])
        for i, (codec, stored_version) in enumerate(recent):
            try:
                results = [attempt(codec, v) for v in values]
            except ConversionError:
                continue
            if i:
                recent.insert(0, recent.pop(i))
            return results, default_subject, stored_version, True
        schema = derive_shared_schema(values, _RECORD_NAMES[part])
        codec = codec_for(schema)
        stored = self.store.register(default_subject, codec.text)
        self._codecs[(default_subject, stored.version)] = codec
        version = str(stored.version)
        recent.insert(0, (codec, version))
        del recent[_RECENT:]
        return [attempt(codec, v) for v in values], default_subject, version, True


def _record_replaced(metadata: dict[str, str], part: str, subject: str | None, version: str | None) -> None:
    marker = metadata.get(META_SCHEMA_REPLACED)
    try:
        replaced = _parse_replaced(marker) if marker else {}  # the other part's, set for this record
    except ConversionError:
        replaced = {}  # a reserved key holding something else: this record's marker replaces it
    replaced[part] = [subject, version]
    metadata[META_SCHEMA_REPLACED] = orjson.dumps(replaced).decode()


def _parse_replaced(marker: str) -> dict[str, list]:
    try:
        replaced = orjson.loads(marker)
    except ValueError:
        replaced = None
    if type(replaced) is not dict or not all(
        type(ref) is list and len(ref) == 2 and all(x is None or type(x) is str for x in ref)
        for ref in replaced.values()
    ):
        raise ConversionError(f"malformed {META_SCHEMA_REPLACED} metadata {marker!r}", path=META_SCHEMA_REPLACED)
    return replaced


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
    """Remove the derived references of ``parts``; put back the references they replaced."""
    for part in parts:
        for k in META_KEYS.get(part, ()):
            metadata.pop(k, None)
    marker = metadata.get(META_SCHEMA_REPLACED) if parts else None
    if marker is None:
        return
    replaced = _parse_replaced(marker)
    del metadata[META_SCHEMA_REPLACED]
    for part in parts:
        ref = replaced.get(part)
        if ref is not None:
            for k, v in zip(META_KEYS[part], ref):
                if v is not None:
                    metadata[k] = v


def in_context(error: ConversionError, context: str) -> ConversionError:
    """The same error with ``context`` (record position, line, part) in front; path and value kept."""
    out = ConversionError(f"{context}: {error}")
    out.path, out.value = error.path, error.value
    return out
