"""Shared bits for the Avro codec tests: registries (ours and confluent's in-memory one)."""

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from cdcflow.connectors.ticdc.avro import StoreRegistry
from cdcflow.schemas import SchemaStore


def store_registry() -> StoreRegistry:
    return StoreRegistry(SchemaStore())


class ConfluentRegistry:
    """confluent_kafka's own in-memory registry client (``mock://``) behind the codec's
    registry interface, so AvroSerializer/AvroDeserializer and cdcflow share ids."""

    def __init__(self):
        self.client = SchemaRegistryClient.new_client({"url": "mock://cdcflow-tests"})

    def register(self, subject: str, schema_text: str) -> int:
        return self.client.register_schema(subject, Schema(schema_text, "AVRO"))

    def schema_by_id(self, schema_id: int) -> str:
        return self.client.get_schema(schema_id).schema_str
