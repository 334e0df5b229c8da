"""``avro.encode`` and ``avro.decode``: structured data ⇄ Avro in Confluent's wire format
(Conduit's processors), with schemas in cdcflow's schema store.

Wire format: byte 0, the schema id as 4 bytes big-endian, then the Avro binary
body. Schemas live in ``cdcflow.schemas.default_store()`` (the SQLite store the
engine shares between driver and executors); a Confluent REST registry (``url``)
is not supported yet and is refused at configuration time.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Mapping

from cdcflow.convert.avro import Codec, codec_for, derive_schema
from cdcflow.errors import ConfigError, SchemaError
from cdcflow.params import Parameter, ParamType
from cdcflow.schemas import SchemaStore, default_store
from cdcflow.sdk import Transform

from .base import FieldValueTransform, parse_json, plugin_name

_HEADER = struct.Struct(">bI")
PRE_REGISTERED = "preRegistered"
AUTO_REGISTER = "autoRegister"

#: settings of Conduit's older versions that pointed at a Confluent REST registry
REGISTRY_PARAMETERS: Mapping[str, Parameter] = {
    "url": Parameter(description="Confluent schema registry URL (not supported yet: leave empty to use cdcflow's store)."),
    "auth.basic.username": Parameter(description="Registry user (only with url; not supported yet)."),
    "auth.basic.password": Parameter(secret=True, description="Registry password (only with url; not supported yet)."),
    "tls.ca.cert": Parameter(description="Registry CA certificate (only with url; not supported yet)."),
    "tls.client.cert": Parameter(description="Registry client certificate (only with url; not supported yet)."),
    "tls.client.key": Parameter(description="Registry client key (only with url; not supported yet)."),
}

_FIELD = Parameter(ParamType.STRING, default=".Payload.After", description="The field to encode or decode.")


def _refuse_remote_registry(transform: Transform, config: Mapping[str, Any]) -> None:
    for name in REGISTRY_PARAMETERS:
        if config.get(name):
            raise ConfigError(
                plugin_name(transform), name, "unsupported",
                "a Confluent REST schema registry is not supported yet; remove the registry settings to use "
                "cdcflow's schema store (CDCFLOW_SCHEMA_STORE)",
            )


def _sorted(value: Any) -> Any:
    """Keys in sorted order at every level, so derived schemas do not depend on key order
    (the field order Conduit's autoRegister derives)."""
    if type(value) is dict:
        return {k: _sorted(value[k]) for k in sorted(value)}
    if type(value) is list:
        return [_sorted(v) for v in value]
    return value


class AvroEncode(FieldValueTransform):
    name = "avro.encode"
    version = "v0.1.0"
    summary = "Encodes a record's field into the Avro format."
    description = (
        "Encodes structured data in `field` as Avro in Confluent's wire format (byte 0, 4-byte schema id, Avro "
        "body). `schema.strategy` preRegistered uses the schema registered under `schema.preRegistered.subject` "
        "(version `schema.preRegistered.version`, latest when empty), fetched once; autoRegister derives a schema "
        "from each value (fields sorted by name) and registers it under `schema.autoRegister.subject`. JSON text "
        "in the field is parsed first."
    )
    author = "cdcflow"
    parameters = {
        "field": _FIELD,
        "schema.strategy": Parameter(
            ParamType.STRING, required=True, inclusion=(PRE_REGISTERED, AUTO_REGISTER),
            description="preRegistered (recommended) or autoRegister (derive and register per record).",
        ),
        "schema.preRegistered.subject": Parameter(description="Subject of the schema to encode with."),
        "schema.preRegistered.version": Parameter(
            ParamType.INT, greater_than=0, description="Version of that subject (latest when empty)."
        ),
        "schema.autoRegister.subject": Parameter(description="Subject derived schemas are registered under."),
        **REGISTRY_PARAMETERS,
    }

    skip_null = False
    failure_prefix = "failed encoding data: "
    store: SchemaStore | None = None  # tests or embedders may set one; default_store() otherwise

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        _refuse_remote_registry(self, config)
        self._strategy = config["schema.strategy"]
        plugin = plugin_name(self)
        if self._strategy == PRE_REGISTERED:
            self._subject = config.get("schema.preRegistered.subject") or ""
            if not self._subject:
                raise ConfigError(plugin, "schema.preRegistered.subject", "required",
                                  "value is required with schema.strategy preRegistered")
            self._version = config.get("schema.preRegistered.version") or -1
        else:
            self._subject = config.get("schema.autoRegister.subject") or ""
            if not self._subject:
                raise ConfigError(plugin, "schema.autoRegister.subject", "required",
                                  "value is required with schema.strategy autoRegister")
        self._fixed: tuple[Codec, bytes] | None = None
        self._registered: dict[str, tuple[Codec, bytes]] = {}

    def open(self) -> None:
        store = self.store if self.store is not None else default_store()
        self._store = store
        if self._strategy == PRE_REGISTERED:
            try:
                stored = store.get(self._subject, self._version)
            except SchemaError as e:
                raise ConfigError(plugin_name(self), "schema.preRegistered.subject", "schema", str(e)) from None
            self._fixed = (codec_for(stored.text), _HEADER.pack(0, stored.id))
        elif store.compatibility(self._subject) is None and not store.versions(self._subject):
            # derived schemas are not guaranteed to be compatible with each other
            store.set_compatibility(self._subject, "NONE")

    def _codec_for(self, value: dict) -> tuple[Codec, bytes]:
        if self._fixed is not None:
            return self._fixed
        schema = derive_schema(_sorted(value), "record")
        text = json.dumps(schema, separators=(",", ":"))
        hit = self._registered.get(text)
        if hit is None:
            stored = self._store.register(self._subject, text)
            if len(self._registered) > 1024:
                self._registered.clear()
            hit = self._registered[text] = (codec_for(schema), _HEADER.pack(0, stored.id))
        return hit

    def convert(self, value: Any) -> Any:
        t = type(value)
        if t is bytes or t is str:
            value = parse_json(value)
            t = type(value)
        if t is not dict:
            raise ValueError(f"unexpected data type {t.__name__} (expected structured data)")
        codec, header = self._codec_for(value)
        return header + codec.encode(value)


class AvroDecode(FieldValueTransform):
    name = "avro.decode"
    version = "v0.1.0"
    summary = "Decodes a field's raw data in the Avro format."
    description = (
        "Decodes the Avro data in Confluent's wire format in `field` into structured data, with the schema "
        "its id names in cdcflow's schema store (schemas are looked up once per id)."
    )
    author = "cdcflow"
    parameters = {"field": _FIELD, **REGISTRY_PARAMETERS}

    skip_null = False
    failure_prefix = "failed decoding data: "
    store: SchemaStore | None = None

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        _refuse_remote_registry(self, config)
        self._codecs: dict[int, Codec] = {}

    def open(self) -> None:
        self._store = self.store if self.store is not None else default_store()

    def _codec(self, schema_id: int) -> Codec:
        codec = self._codecs.get(schema_id)
        if codec is None:
            kind, text = self._store.by_id(schema_id)
            if kind != "AVRO":
                raise SchemaError(f"schema id {schema_id} is a {kind} schema, not Avro")
            codec = self._codecs[schema_id] = codec_for(text)
        return codec

    def convert(self, data: Any) -> Any:
        if type(data) is str:
            data = data.encode("utf-8")
        if type(data) is not bytes:
            raise ValueError(f"unexpected data type {type(data).__name__} (expected raw data)")
        if len(data) < _HEADER.size or data[0] != 0:
            raise ValueError("not Avro in Confluent's wire format (expected byte 0 and a 4-byte schema id)")
        _, schema_id = _HEADER.unpack_from(data)
        return self._codec(schema_id).decode(data[_HEADER.size:])
