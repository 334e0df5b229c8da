"""Registers cdcflow's built-in connectors (``generator``, ``file``, ``log``, ``storage``).

Built-ins register through the same ``cdcflow`` entry-point group and hooks as any
third-party plugin (pyproject: ``builtin-connectors = "cdcflow.connectors.builtin"``).
Each connector module exports its classes and parameter specs; the specifications
(names, versions, texts) live here. ``kafka`` needs the ``kafka`` extra, so it is an
entry point of its own (``builtin_kafka``): without the extra only it fails to load.
"""

from __future__ import annotations

from cdcflow.hookspecs import hookimpl
from cdcflow.sdk import ConnectorPlugin

from . import file, generator, log
from .storage import destination as storage_destination, settings as storage_settings, source as storage_source

#: version of every connector shipped with cdcflow (follows the package version)
BUILTIN_VERSION = "v0.1.0"
AUTHOR = "cdcflow"

GENERATOR = ConnectorPlugin(
    name="generator",
    version=BUILTIN_VERSION,
    author=AUTHOR,
    summary="Generates records: Conduit-style raw/structured rows or rows of every TiDB column type.",
    description=(
        "Deterministic for a given seed. recordCount bounds the output (0 or -1: unbounded), rate "
        "limits it (records per second over all partitions). format.type tidb produces rows of every "
        "TiDB type, extremes and NULLs included, with the table's column types attached as schemas. "
        "partitions splits the generator into independent partitions that resume exactly."
    ),
    source=generator.GeneratorSource,
    source_params=generator.SOURCE_PARAMS,
)

FILE = ConnectorPlugin(
    name="file",
    version=BUILTIN_VERSION,
    author=AUTHOR,
    summary="Reads any text file, one record per line (or records in Conduit's JSON form); writes one record per line.",
    description=(
        "Conduit's file connector. The source reads any text file, one raw record per line (key the line "
        "number, file.path metadata), or with format: opencdc/json records in Conduit's JSON form; it follows "
        "a growing file and its positions are byte offsets after each line. The destination writes each "
        "record as sdk.record.format says (the JSON form by default), appending each batch with one write on "
        "an O_APPEND descriptor and fsyncing before acknowledging, so several writers may share a file; "
        "synced pages are then dropped from the page cache (a sink does not read its output back)."
    ),
    source=file.FileSource,
    destination=file.FileDestination,
    source_params=file.SOURCE_PARAMS,
    destination_params=file.DESTINATION_PARAMS,
)

LOG = ConnectorPlugin(
    name="log",
    version=BUILTIN_VERSION,
    author=AUTHOR,
    summary="Logs every record (the default dead-letter queue).",
    description="Writes each record in Conduit's JSON form to the cdcflow log at the configured level; "
    "secret values are redacted.",
    destination=log.LogDestination,
    destination_params=log.DESTINATION_PARAMS,
)


STORAGE = ConnectorPlugin(
    name="storage",
    version=BUILTIN_VERSION,
    author=AUTHOR,
    summary="Reads and writes the TiCDC storage sink layout (CSV or canal-json) on local disk, S3, GCS, Azure.",
    description=(
        "Destination: TiCDC's paths, CDC.index, schema files with checksums, table versions after DDLs and the "
        "metadata checkpoint; every write batch ends with complete, durable files (never overwritten, never "
        "partially visible). Source: reads the layout per table in version and file order, DDLs as control "
        "records, positions (file, row) resume exactly; watches for new files or stops at the checkpoint."
    ),
    source=storage_source.StorageSource,
    destination=storage_destination.StorageDestination,
    source_params=storage_settings.SOURCE_PARAMS,
    destination_params=storage_settings.DESTINATION_PARAMS,
)


@hookimpl
def cdcflow_connectors() -> list[ConnectorPlugin]:
    return [GENERATOR, FILE, LOG, STORAGE]
