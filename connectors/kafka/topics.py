"""Which log a Kafka offset belongs to.

A saved offset only means something for the topic it was read from. A topic deleted and
created again (or a broker replaced by an empty one) has the same name and new offsets: a
source resuming there would skip or re-read rows silently, and an ``assign()``ed consumer
whose topic vanished gets no error at all — it just never returns anything. Kafka gives
every topic incarnation an id (KIP-516), so positions carry it and the source compares.
"""

from __future__ import annotations

import logging
from typing import Sequence

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from .settings import KafkaSettings, make_client

log = logging.getLogger("cdcflow.connectors.kafka.topics")


class TopicGone(Exception):
    """The topic (or one of its partitions) is not what the saved offsets were read from."""

    def __init__(self, topic: str, partition: int, message: str):
        self.topic, self.partition = topic, partition
        super().__init__(message)


class TopicWatch:
    """Ids and partition counts of the topics one source reads."""

    def __init__(self, settings: KafkaSettings, topics: Sequence[str], timeout: float = 5.0):
        self._admin: AdminClient = make_client(AdminClient, settings)
        self._topics = sorted(set(topics))
        self._timeout = timeout
        self._servers = settings.servers
        self.ids: dict[str, str | None] = {}

    def _describe(self) -> dict[str, tuple[str | None, int]] | None:
        """topic -> (id, partitions); a topic the broker does not know maps to (None, 0).
        None when the broker cannot be asked (unreachable, or too old to describe topics)."""
        try:
            futures = self._admin.describe_topics(TopicCollection(self._topics), request_timeout=self._timeout)
        except KafkaException as e:
            log.debug("describe_topics unavailable: %s", e)
            return None
        out: dict[str, tuple[str | None, int]] = {}
        for topic, future in futures.items():
            try:
                d = future.result(self._timeout + 5)
            except KafkaException as e:
                if e.args[0].code() == e.args[0].UNKNOWN_TOPIC_OR_PART:
                    out[topic] = (None, 0)
                    continue
                log.debug("describing %s failed: %s", topic, e)
                return None
            except Exception as e:  # noqa: BLE001 - a timeout: nothing to conclude from
                log.debug("describing %s failed: %s", topic, e)
                return None
            out[topic] = (str(d.topic_id) if d.topic_id is not None else None, len(d.partitions))
        return out

    def start(self, saved: dict[str, str | None] | None, partitions: Sequence[tuple[str, int]]) -> None:
        """Learn the current ids; raise ``TopicGone`` when a saved id names another incarnation."""
        described = self._describe()
        if described is None:
            self.ids = dict(saved or {})
            return
        self.ids = {t: described[t][0] for t in self._topics}
        for topic, partition in partitions:
            old = (saved or {}).get(topic)
            now = self.ids.get(topic)
            if old and now and old != now:
                raise TopicGone(topic, partition, f"topic {topic!r} on {self._servers} was recreated since this "
                                f"position was saved (id {old}, now {now}): its offsets name other messages. "
                                "Delete the pipeline's state (or its position) to read it from the start.")

    def check(self, partitions: Sequence[tuple[str, int]]) -> None:
        """While nothing arrives: raise ``TopicGone`` when a topic or partition read from is gone
        or was recreated. An unreachable broker is not a verdict: nothing is raised."""
        described = self._describe()
        if described is None:
            return
        for topic, partition in partitions:
            now, count = described.get(topic, (None, 0))
            if count == 0:
                raise TopicGone(topic, partition, f"topic {topic!r} no longer exists on {self._servers}")
            if partition >= count:
                raise TopicGone(topic, partition, f"topic {topic!r} on {self._servers} has no partition {partition} "
                                f"any more ({count} partitions)")
            old = self.ids.get(topic)
            if old and now and old != now:
                raise TopicGone(topic, partition, f"topic {topic!r} on {self._servers} was recreated while it was "
                                f"being read (id {old}, now {now}): the offsets read so far name other messages")
