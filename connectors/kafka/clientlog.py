"""librdkafka's own log lines, through cdcflow's logging, each distinct line once.

Left alone, librdkafka prints to stderr: a broker that is down gives hundreds of near-identical
"Connect to ... failed" lines before cdcflow's own error (which names connector and servers)
can say what is wrong. confluent-kafka hands the lines to any object with ``log`` (its
``logger`` setting); this one sends them to ``cdcflow.connectors.kafka.librdkafka``: errors
as warnings (the connector raises the typed error that counts), a line that only differs from
an earlier one in its numbers (counts, milliseconds, ports) at debug level for ``REPEAT_WINDOW``
seconds.
"""

from __future__ import annotations

import logging
import re
import threading
import time

log = logging.getLogger("cdcflow.connectors.kafka.librdkafka")

REPEAT_WINDOW = 60.0  # seconds a line stays "already said"
_MAX_REMEMBERED = 512
_NUMBERS = re.compile(r"\d+")


class ClientLog:
    """The ``logger`` of every confluent-kafka client the connector makes (thread-safe)."""

    def __init__(self, target: logging.Logger = log):
        self._target = target
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args) -> None:
        text = msg % args if args else msg
        key = _NUMBERS.sub("#", text)
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            repeat = last is not None and now - last < REPEAT_WINDOW
            if not repeat:
                if len(self._seen) >= _MAX_REMEMBERED:
                    self._seen = {k: t for k, t in self._seen.items() if now - t < REPEAT_WINDOW}
                    if len(self._seen) >= _MAX_REMEMBERED:
                        self._seen.clear()
                self._seen[key] = now
        if repeat:
            level = logging.DEBUG
        elif level > logging.WARNING:
            level = logging.WARNING
        if self._target.isEnabledFor(level):
            self._target.log(level, "librdkafka: %s", text)


CLIENT_LOG = ClientLog()
