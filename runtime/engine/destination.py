"""The destination node: a destination plugin, the processors in front of it, its writes.

``write`` hands a batch to the plugin, which writes it durably before returning; the
records it rejects are nacked (``dlq.Nacks``), raising fails the batch. The node keeps the
position of the last record it handed over, which the engine passes to ``stop`` when it
closes the destination after a clean end (Conduit calls Stop with the last position, then
Teardown); after a failure it is only torn down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import CdcflowError
from ..pipeline.model import ConnectorConfig
from ..record import Record
from .dlq import Nacks
from .faults import DESTINATION, in_node, quiet_teardown
from .middleware import DestinationMiddleware, connector_settings

log = logging.getLogger("cdcflow.engine.destination")


@dataclass
class DestinationNode:
    config: ConnectorConfig
    plugin: Any
    chain: Any = None  # its own processors (None when there are none)
    last_position: bytes | None = None  # of the last record handed to ``write``
    middleware: DestinationMiddleware = field(default_factory=DestinationMiddleware)  # Conduit's sdk.* settings

    @classmethod
    def open(cls, pipeline: str, cfg: ConnectorConfig, info: Any, settings: dict, role: str = DESTINATION,
             node: str | None = None) -> "DestinationNode":
        """Configure and open the plugin ``info`` makes with the settings validated on the driver."""
        with in_node(pipeline, role, node or cfg.id):
            plugin = info.new_destination()
            plugin.id = cfg.id
            try:
                middleware = DestinationMiddleware.of(settings, info)
                plugin.configure(connector_settings(settings, info))
                middleware.attach(plugin, cfg.id)
                plugin.open()
            except BaseException:
                quiet_teardown(plugin)
                raise
        return cls(cfg, plugin, middleware=middleware)

    def write(self, pipeline: str, records: Sequence[Record], last_position: bytes, nacks: Nacks) -> int:
        """Write ``records`` (``last_position`` is the last one's); returns how many the plugin
        rejected (added to ``nacks``)."""
        dest_id = self.config.id
        with in_node(pipeline, DESTINATION, dest_id):
            mw = self.middleware
            errors = mw.write(self.plugin.write, records) if mw.active else self.plugin.write(records)
            if errors and len(errors) != len(records):
                raise CdcflowError(f"write returned {len(errors)} results for {len(records)} records")
        self.last_position = last_position
        failed = 0
        if errors:
            for r, err in zip(records, errors):
                if err is not None:
                    failed += 1
                    nacks.add(r, dest_id, str(err))
        return failed

    def close(self, clean: bool) -> None:
        """``stop(last_position)`` after a clean end, then ``teardown`` (both best effort)."""
        quiet_teardown(self.chain)
        if clean:
            try:
                self.plugin.stop(self.last_position)
            except Exception:  # noqa: BLE001 - every write was durable already; closing goes on
                log.warning("destination %s: stop failed", self.config.id, exc_info=True)
        quiet_teardown(self.plugin)


def before_stop(records: Sequence[Record], positions: list[bytes], stop_at: int) -> list[Record]:
    """The records that come before the stopping one in source order (a destination's batch
    after its processors: some records may be gone, a split may repeat a position)."""
    later = set(positions[stop_at:])
    out: list[Record] = []
    for r in records:
        if r.position in later:
            break
        out.append(r)
    return out
