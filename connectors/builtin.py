"""Registers cdcflow's built-in connectors (``generator``, ``file``, ``log``).

Built-ins register through the same ``cdcflow`` entry-point group and hooks as any
third-party plugin (pyproject: ``builtin-connectors = "cdcflow.connectors.builtin"``).
Each connector module exports its classes and parameter specs; the specifications
(names, versions, texts) live here, in one place.
"""

from __future__ import annotations

from cdcflow.hookspecs import hookimpl
from cdcflow.sdk import ConnectorPlugin

from . import file, generator, log

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
    summary="Reads and writes records in Conduit's JSON form, one record per line.",
    description=(
        "The destination appends each batch with one write on an O_APPEND descriptor and fsyncs "
        "before acknowledging, so several writers may share a file. The source follows a growing "
        "file; its positions are byte offsets after each line."
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


@hookimpl
def cdcflow_connectors() -> list[ConnectorPlugin]:
    return [GENERATOR, FILE, LOG]
