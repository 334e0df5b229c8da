"""Conduit's connector middleware (the ``sdk.*`` settings), for the connectors cdcflow runs in process.

Conduit's connector SDK wraps every connector in middleware configured by ``sdk.*`` settings,
so a Conduit pipeline file may give them to any connector. A standalone plugin applies its own
(its SDK lists them in its specification); for the connectors loaded in process (built-ins and
cdcflow-SDK plugins) the registry adds these parameters to their specifications and the engine
applies them here, around the plugin: the plugin never sees an ``sdk.*`` setting. A cdcflow
connector served to Conduit as a standalone plugin (``cdcflow.standalone.server``) lists them in
its specification and applies them the same way, as Conduit's SDK connectors do.

What each does in cdcflow (docs/conduit.md has the table):
- ``sdk.batch.size``: at most that many records per ``read`` (source) or per ``write`` (destination);
  0 leaves it to the engine's ``batch-size``. ``sdk.batch.delay``: accepted; a cdcflow batch ends when
  the source has nothing more ready, so there is no wait to shorten or lengthen.
- ``sdk.rate.perSecond`` / ``sdk.rate.burst`` (destination): a token bucket in front of ``write``,
  as Conduit's: writes go in chunks of at most ``burst`` records (default: the rate, rounded up),
  each waiting for its tokens.
- ``sdk.record.format`` / ``sdk.record.format.options`` (destination): how a destination that
  writes whole records (``file``) turns each into bytes: ``opencdc/json`` (the default),
  ``debezium/json``, ``template`` (``cdcflow.convert.recordformat``). A destination that writes
  its own format refuses any but the default when the pipeline is validated, not ignored.
- ``sdk.schema.extract.*`` / ``sdk.schema.context.*`` (source): ``SchemaExtraction`` derives an
  Avro schema from a record's structured key / payload, registers it in the run's schema store
  under Conduit's subject (``[<context>:][<collection>.]key|payload``) and names it in the
  ``opencdc.key.schema.*`` / ``opencdc.payload.schema.*`` metadata, as Conduit's source
  middleware does; the data stays structured (cdcflow passes records in process). Off unless
  enabled: a line that names a schema points into the writing run's state. Destination side
  (decoding raw data with the schema its metadata names): not applied (see docs/conduit.md).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..convert.avro import derive_schema
from ..convert.recordformat import FORMATS, OPENCDC_JSON, RecordFormat, record_format
from ..errors import ConfigError
from ..params import Parameter, ParamType
from ..record import (
    META_COLLECTION,
    META_KEY_SCHEMA_SUBJECT,
    META_KEY_SCHEMA_VERSION,
    META_PAYLOAD_SCHEMA_SUBJECT,
    META_PAYLOAD_SCHEMA_VERSION,
)

PREFIX = "sdk."
RECORD_FORMATS = FORMATS

_BATCH = {
    "sdk.batch.size": Parameter(ParamType.INT, default="0", greater_than=-1,
                                description="Records per batch at most (0: the engine's batch-size)."),
    "sdk.batch.delay": Parameter(ParamType.DURATION, default="0",
                                 description="Accepted for Conduit files; a batch ends when nothing more is ready."),
}
SOURCE_PARAMS: Mapping[str, Parameter] = {
    **_BATCH,
    "sdk.schema.extract.payload.enabled": Parameter(
        ParamType.BOOL, default="false",
        description="Derive a schema from each structured payload, register it and name it in the metadata."),
    "sdk.schema.extract.key.enabled": Parameter(
        ParamType.BOOL, default="false",
        description="Derive a schema from each structured key, register it and name it in the metadata."),
    "sdk.schema.extract.type": Parameter(ParamType.STRING, default="avro", inclusion=("avro",),
                                         description="Type of the extracted schemas (avro)."),
    "sdk.schema.extract.payload.subject": Parameter(
        ParamType.STRING, default="payload",
        description="Subject of payload schemas (after '<collection>.' when the record has a collection)."),
    "sdk.schema.extract.key.subject": Parameter(
        ParamType.STRING, default="key",
        description="Subject of key schemas (after '<collection>.' when the record has a collection)."),
    "sdk.schema.context.enabled": Parameter(ParamType.BOOL, default="true",
                                            description="Prefix the subjects with a context name and ':'."),
    "sdk.schema.context.name": Parameter(ParamType.STRING, default="",
                                         description="The context name (empty: the connector id)."),
}
DESTINATION_PARAMS: Mapping[str, Parameter] = {
    **_BATCH,
    "sdk.schema.extract.payload.enabled": Parameter(ParamType.BOOL, default="true",
                                                    description="Accepted for Conduit files (not applied)."),
    "sdk.schema.extract.key.enabled": Parameter(ParamType.BOOL, default="true",
                                                description="Accepted for Conduit files (not applied)."),
    "sdk.rate.perSecond": Parameter(ParamType.FLOAT, default="0", greater_than=-1,
                                    description="Records written per second at most (0: no limit)."),
    "sdk.rate.burst": Parameter(ParamType.INT, default="0", greater_than=-1,
                                description="Records per burst at most (0: the rate, rounded up)."),
    "sdk.record.format": Parameter(ParamType.STRING, default=OPENCDC_JSON, inclusion=RECORD_FORMATS,
                                   description="How a destination writing whole records turns each into bytes: "
                                               "opencdc/json, debezium/json or template."),
    "sdk.record.format.options": Parameter(ParamType.STRING, default="",
                                           description="Options of the record format: k=v pairs separated by "
                                                       "commas (debezium/json: debezium.schema.name, "
                                                       "debezium.rawData.key); for template, the template."),
}


# Conduit's processor SDK decodes a record's key/payload with its schema before the processor and
# encodes it after; cdcflow's processors work on the records as the engine holds them (structured
# data stays structured), so these are accepted with Conduit's defaults and change nothing.
PROCESSOR_PARAMS: Mapping[str, Parameter] = {
    f"sdk.schema.{step}.{part}.enabled": Parameter(
        ParamType.BOOL, default="true",
        description=f"Accepted for Conduit files: cdcflow's processors see structured data as it is ({step} is moot).")
    for step in ("decode", "encode") for part in ("key", "payload")
}


def applies(info: Any) -> bool:
    """Whether the engine applies the middleware for the plugin ``info`` (a ``PluginInfo``): for
    in-process plugins; a standalone plugin gets its ``sdk.*`` settings and applies them itself."""
    return getattr(info, "type", "builtin") == "builtin"


def connector_settings(settings: Mapping[str, Any], info: Any) -> Mapping[str, Any]:
    """What the plugin ``info`` is configured with: without the ``sdk.*`` settings the engine applies."""
    if not applies(info):
        return settings
    return without_sdk(settings)


def without_sdk(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if not k.startswith(PREFIX)}


@dataclass(frozen=True)
class SourceMiddleware:
    batch_size: int = 0
    extraction: "SchemaExtraction | None" = None

    @classmethod
    def of(cls, settings: Mapping[str, Any], info: Any, connector_id: str = "") -> "SourceMiddleware":
        return cls.from_settings(settings, connector_id) if applies(info) else cls()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], connector_id: str = "") -> "SourceMiddleware":
        return cls(int(settings.get("sdk.batch.size") or 0), SchemaExtraction.of(settings, connector_id))

    def apply(self, records: Sequence[Any]) -> None:
        """What the middleware does to a batch the plugin read (schema extraction)."""
        if self.extraction is not None and records:
            self.extraction.apply(records)

    def read_size(self, engine_batch: int) -> int:
        return min(engine_batch, self.batch_size) if self.batch_size > 0 else engine_batch


class SchemaExtraction:
    """Conduit's source schema extraction (conduit-connector-sdk, source_middleware.go,
    ``SourceWithSchemaExtraction`` and ``SourceWithSchemaContext``) on a batch of records.

    A record whose metadata already names a key / payload schema keeps it. Otherwise the schema of
    the structured key, or of the payload's ``after`` (``before`` when ``after`` is not
    structured), is derived, registered in the run's store under ``[<context>:][<collection>.]
    <subject>`` (the store deduplicates) and named in the metadata. Raw data gets no schema.
    """

    def __init__(self, key: bool, payload: bool, key_subject: str, payload_subject: str, context: str,
                 store: Any = None):
        self.key, self.payload = key, payload
        self.key_subject, self.payload_subject, self.context = key_subject, payload_subject, context
        self._store = store
        self._versions: dict[tuple[str, str], str] = {}  # (subject, schema text) -> version

    @classmethod
    def of(cls, settings: Mapping[str, Any], connector_id: str) -> "SchemaExtraction | None":
        key = bool(settings.get("sdk.schema.extract.key.enabled"))
        payload = bool(settings.get("sdk.schema.extract.payload.enabled"))
        if not (key or payload):
            return None
        context = ""
        if settings.get("sdk.schema.context.enabled", True):
            context = str(settings.get("sdk.schema.context.name") or connector_id)
        return cls(key, payload, str(settings.get("sdk.schema.extract.key.subject") or "key"),
                   str(settings.get("sdk.schema.extract.payload.subject") or "payload"), context)

    def apply(self, records: Sequence[Any]) -> None:
        for r in records:
            if self.key and type(r.key) is dict:
                self._attach(r, r.key, self.key_subject, META_KEY_SCHEMA_SUBJECT, META_KEY_SCHEMA_VERSION, "Key")
            if self.payload:
                value = r.after if type(r.after) is dict else r.before
                if type(value) is dict:
                    self._attach(r, value, self.payload_subject, META_PAYLOAD_SCHEMA_SUBJECT,
                                 META_PAYLOAD_SCHEMA_VERSION, "Payload")

    def _attach(self, record: Any, value: dict, subject: str, subject_key: str, version_key: str,
                name: str) -> None:
        meta = record.metadata
        if meta.get(subject_key) and meta.get(version_key):
            return  # the connector named its schema
        collection = meta.get(META_COLLECTION)
        if collection:
            subject = f"{collection}.{subject}"
        if self.context:
            subject = f"{self.context}:{subject}"
        text = json.dumps(derive_schema(value, name), separators=(",", ":"))
        version = self._versions.get((subject, text))
        if version is None:
            if self._store is None:
                from ..schemas import default_store

                self._store = default_store()
            version = str(self._store.register(subject, text).version)
            self._versions[(subject, text)] = version
        meta[subject_key] = subject
        meta[version_key] = version


class RateLimiter:
    """A token bucket (as Go's ``rate.Limiter``): ``rate`` tokens a second, at most ``burst`` saved."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.rate, self.burst = rate, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._at = clock()

    def wait(self, n: int) -> None:
        """Block until ``n`` (≤ burst) tokens are there, and take them."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= n
        if self._tokens < 0:
            self._sleep(-self._tokens / self.rate)


def configured_format(settings: Mapping[str, Any]) -> RecordFormat | None:
    """The record format the settings choose; None for the default (the JSON form), which every
    destination writes without being told. ConfigError for a template that does not compile."""
    name = settings.get("sdk.record.format") or OPENCDC_JSON
    if name == OPENCDC_JSON:
        return None
    return record_format(name, str(settings.get("sdk.record.format.options") or ""))


def attach_format(plugin: Any, fmt: RecordFormat | None, plugin_id: str = "") -> None:
    """Hand the format to a destination that writes whole records (it has a ``record_format``
    attribute, as Conduit's destinations calling ``Record.Bytes``); refuse it for one that writes
    its own format, rather than ignore the setting."""
    if fmt is None:
        return
    if not hasattr(plugin, "record_format"):
        raise ConfigError(plugin_id or type(plugin).__name__, "sdk.record.format", "unsupported",
                          f"{fmt.name!r}: this destination writes its own format, not whole records "
                          f"(only the default {OPENCDC_JSON} is accepted)")
    plugin.record_format = fmt


def check(side: str, settings: Mapping[str, Any], plugin: Any, plugin_id: str = "") -> None:
    """What ``cdcflow validate`` checks of the middleware beyond the spec (a configured plugin)."""
    if side == "destination":
        attach_format(plugin, configured_format(settings), plugin_id)


@dataclass
class DestinationMiddleware:
    batch_size: int = 0
    limiter: RateLimiter | None = None
    record_format: RecordFormat | None = None

    @classmethod
    def of(cls, settings: Mapping[str, Any], info: Any) -> "DestinationMiddleware":
        return cls.from_settings(settings) if applies(info) else cls()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "DestinationMiddleware":
        """The middleware of validated settings (ConfigError for a template that does not compile)."""
        rate = float(settings.get("sdk.rate.perSecond") or 0)
        limiter = None
        if rate > 0:
            burst = int(settings.get("sdk.rate.burst") or 0) or math.ceil(rate)
            limiter = RateLimiter(rate, burst)
        return cls(int(settings.get("sdk.batch.size") or 0), limiter, configured_format(settings))

    def attach(self, plugin: Any, plugin_id: str = "") -> None:
        """Give the opened plugin what it applies itself (the record format)."""
        attach_format(plugin, self.record_format, plugin_id)

    @property
    def active(self) -> bool:
        return self.batch_size > 0 or self.limiter is not None

    def write(self, write: Callable[[Sequence[Any]], Sequence[str | None] | None],
              records: Sequence[Any]) -> Sequence[str | None] | None:
        """``write`` over ``records`` in chunks (the batch size, and at most a burst each, every
        chunk waiting for its tokens); the per-record results joined, None when all were written."""
        size = len(records)
        if self.batch_size > 0:
            size = min(size, self.batch_size)
        if self.limiter is not None:
            size = min(size, self.limiter.burst)
        if size >= len(records) and self.limiter is None:
            return write(records)
        results: list[str | None] = []
        failed = False
        for start in range(0, len(records), max(size, 1)):
            chunk = records[start:start + size]
            if self.limiter is not None:
                self.limiter.wait(len(chunk))
            errors = write(chunk)
            if errors:
                failed = True
                results.extend(errors)
            else:
                results.extend([None] * len(chunk))
        return results if failed else None
