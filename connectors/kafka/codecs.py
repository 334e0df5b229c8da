"""The protocol side of the connector: which codec, which schema registry.

Codecs live in ``cdcflow.connectors.ticdc``; this module only picks and
configures them from ``KafkaSettings`` so source and destination agree.
"""

from __future__ import annotations

from typing import Any

from cdcflow.errors import ConfigError

from ..ticdc.avro import AvroDecoder, AvroEncoder, AvroOptions, StoreRegistry
from ..ticdc.canal_json import CanalJsonDecoder, CanalJsonEncoder, CanalJsonOptions
from ..ticdc.open_protocol import OpenProtocolDecoder, OpenProtocolEncoder
from .settings import PLUGIN, KafkaSettings


#: header cdcflow's destination adds to an Avro tombstone: the DELETE's commit ts as decimal text
#: (the message itself carries none); the source takes it as the delete's commit ts
DELETE_TS_HEADER = "cdcflow-commit-ts"


def delete_ts_header(commit_ts: int) -> list[tuple[str, bytes]] | None:
    return [(DELETE_TS_HEADER, b"%d" % commit_ts)] if commit_ts else None


def delete_ts_from_headers(headers: list[tuple[str, bytes]] | None) -> int | None:
    """The commit ts of ``DELETE_TS_HEADER``; None without one (or with one that is not a
    positive number: then the decoder's own rule applies)."""
    for name, value in headers or ():
        if name == DELETE_TS_HEADER and value:
            try:
                ts = int(value)
            except ValueError:
                return None
            return ts if 0 < ts < 1 << 64 else None
    return None


def registry_for(s: KafkaSettings) -> Any:
    """An object with ``register(subject, text) -> id`` and ``schema_by_id(id) -> text``.

    With a ``schema-registry`` URL: the REST client (Confluent or cdcflow's built-in
    registry, ``user:password@`` in the URL for basic auth). Without: the built-in
    schema store of this run, shared by every process through its SQLite file. Every request is
    bounded by ``schema-registry-timeout``; an unreachable registry raises
    ``RegistryUnavailableError`` (an ``InfrastructureError``), which the codecs let through.
    """
    if s.schema_registry:
        try:
            from cdcflow.schemaregistry.client import RegistryClient
        except ModuleNotFoundError as e:  # pragma: no cover - the client ships with cdcflow
            raise ConfigError(PLUGIN, "schema-registry", "client", f"schema registry client unavailable: {e}") from e
        return RegistryClient(s.schema_registry, timeout=s.schema_registry_timeout)
    from cdcflow.schemas import default_store

    return StoreRegistry(default_store())


def avro_options(s: KafkaSettings) -> AvroOptions:
    return AvroOptions.from_config(s.codec_options)


def decoder_for(s: KafkaSettings) -> Any:
    if s.protocol == "avro":
        return AvroDecoder(avro_options(s), registry_for(s))
    if s.protocol == "canal-json":
        return CanalJsonDecoder()
    if s.protocol == "open-protocol":
        return OpenProtocolDecoder()
    return None  # opencdc-json: cdcflow.convert.jsonform, no per-run state


def encoder_for(s: KafkaSettings) -> Any:
    if s.protocol == "avro":
        return AvroEncoder(avro_options(s), registry_for(s))
    if s.protocol == "canal-json":
        return CanalJsonEncoder(CanalJsonOptions.from_config(s.codec_options, PLUGIN))
    if s.protocol == "open-protocol":
        return OpenProtocolEncoder({
            "max-batch-size": s.max_batch_size,
            "max-message-bytes": s.max_message_bytes,
            "only-output-updated-columns": s.only_output_updated_columns,
        })
    return None
