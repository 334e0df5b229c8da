"""The processor node: a chain of processors (Conduit's processors, cdcflow's transforms).

A pipeline has up to three places for chains: on its source, on the pipeline, and on each
destination; each is built once per process (``build``) and run per batch (``run``). A
record a processor rejects is nacked (``dlq.Nacks``) for the nack window to judge; a
processor's outage (``InfrastructureError``) fails the whole batch instead.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..pipeline.model import ProcessorConfig
from ..record import Record
from .dlq import Nacks
from .faults import PROCESSOR, in_node


def build(pipeline: str, processors: Sequence[ProcessorConfig], registry: Any,
          validated: Mapping[str, Mapping[str, Any]]):
    """The opened chain of ``processors`` (None when there are none), their settings as the
    driver validated them (``RunContext.processor_settings``); a failure names them."""
    if not processors:
        return None
    from ..pipeline.chain import build_chain

    with in_node(pipeline, PROCESSOR, "/".join(p.id for p in processors)):
        return build_chain(processors, registry, validated)


def run(chain: Any, records: Sequence[Record], nacks: Nacks, pipeline: str) -> tuple[Sequence[Record], int]:
    """Apply a chain; returns the surviving records and how many were filtered."""
    if chain is None or not records:
        return records, 0
    with in_node(pipeline, PROCESSOR, "/".join(chain.node_ids)):
        result = chain.process(records)
    for n in result.nacks:
        nacks.add(n.record, n.node_id, str(n.error))
    filtered = max(0, len(records) - len(result.records) - len(result.nacks))
    return result.records, filtered

