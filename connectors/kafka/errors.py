"""The connector's outage type: what the broker side failed at, never a record's fault."""

from __future__ import annotations

from cdcflow.errors import InfrastructureError


class KafkaUnavailableError(InfrastructureError):
    """A broker, topic, partition or the group coordinator cannot serve the connector.

    ``endpoint`` is the bootstrap servers (credentials live in ``kafka.*`` settings, never there).
    The engine fails the batch, retries, then stops the pipeline naming the node.
    """

    def __init__(self, message: str, *, servers: str | None = None):
        super().__init__(message, service="kafka", endpoint=servers)
