"""Kafka source and destination for TiCDC's protocols (avro, canal-json, open-protocol) and opencdc-json."""

from .destination import KafkaDestination
from .settings import DESTINATION_PARAMS, SOURCE_PARAMS, KafkaSettings, parse_uri, resolve
from .source import KafkaSource

__all__ = ["KafkaDestination", "KafkaSource", "KafkaSettings", "SOURCE_PARAMS", "DESTINATION_PARAMS",
           "parse_uri", "resolve"]
