"""Registers the built-in ``kafka`` connector (entry point ``builtin-kafka``).

A plugin of its own because it needs confluent-kafka, which only the ``kafka`` extra
installs: without it this entry point fails to load, naming the extra, and every
other built-in stays usable.
"""

from __future__ import annotations

from cdcflow.hookspecs import hookimpl
from cdcflow.sdk import ConnectorPlugin

from . import kafka
from .builtin import AUTHOR, BUILTIN_VERSION

KAFKA = ConnectorPlugin(
    name="kafka",
    version=BUILTIN_VERSION,
    author=AUTHOR,
    summary=("Reads and writes TiCDC's Kafka protocols (avro, canal-json, open-protocol) and opencdc-json; "
             "Conduit's kafka connector without a protocol."),
    description=(
        "Settings take a TiCDC sink URI (kafka://host:port/topic?protocol=avro&...) and the same options "
        "as discrete settings, which win. The source commits offsets only after downstream acknowledgement, "
        "drops TiCDC replays and, with consistency=transaction, releases rows up to the global resolved ts "
        "in commit-ts order with DDL as a barrier. The destination dispatches topics and partitions as "
        "TiCDC does, registers Avro schemas under <topic>-key/-value and acknowledges a record only on "
        "its delivery report. See docs/connector-kafka.md."
    ),
    source=kafka.KafkaSource,
    destination=kafka.KafkaDestination,
    source_params=kafka.SOURCE_PARAMS,
    destination_params=kafka.DESTINATION_PARAMS,
)


@hookimpl
def cdcflow_connectors() -> list[ConnectorPlugin]:
    return [KAFKA]
