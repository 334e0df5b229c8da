"""``filter``: drop records (Conduit's processor).

Without a ``condition`` it drops every record; with one, the chain only hands it
the records for which the condition is true, so exactly those are dropped and the
others pass by untouched. A filtered record counts as acknowledged, not as a nack.
"""

from __future__ import annotations

from typing import Sequence

from cdcflow.record import Record
from cdcflow.sdk import FILTERED, Result, Transform


class Filter(Transform):
    name = "filter"
    version = "v0.1.0"
    summary = "Drop the records it receives (use with a condition)."
    description = (
        "Acknowledges and drops every record it receives. Give the processor a `condition` to drop only the "
        "records for which the condition is true; without one, every record is dropped."
    )
    author = "cdcflow"
    parameters = {}

    def process(self, records: Sequence[Record]) -> list[Result]:
        return [FILTERED] * len(records)
