"""Record batches a source hands over before making their Records.

In a pass-through pipeline (no processors) most of the work is Python objects made only
to be serialised again: the storage source turns CSV text into values and Records, the
``file`` destination turns those back into JSON text. When nothing between a source and
its destinations needs Record objects, the engine says so (``Source.lazy_batches``) and
the source may return a ``RecordBatch`` from ``read`` instead of a list: a sequence of
Records made on first use, which a destination writing Conduit's JSON form asks for its
lines first (``jsonform_lines``). Every other consumer sees an ordinary sequence.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence, overload

from .record import Record
from .schemas import SchemaStore


class RecordBatch(Sequence[Record]):
    """A source's batch of records, kept in the form it read them in until Records are needed.

    Subclasses give ``__len__``, ``_materialize`` (the Records, as the source's list would
    hold them), ``positions`` (cheaper than materialising, if they can) and
    ``_render_jsonform`` (the lines ``dumps_lines`` would write, or None where they cannot).
    Metadata the engine adds to every record (``add_metadata``) applies to both forms.
    """

    __slots__ = ("_records", "_extra")

    def __init__(self) -> None:
        self._records: list[Record] | None = None
        self._extra: dict[str, str] | None = None

    # -- what subclasses provide ------------------------------------------------
    def __len__(self) -> int:
        raise NotImplementedError

    def _materialize(self) -> list[Record]:
        raise NotImplementedError

    def _render_jsonform(self, store: SchemaStore | None, extra: Mapping[str, str] | None) -> bytes | None:
        """``jsonform.dumps_lines(records, store)`` of the records with ``extra`` added to each
        one's metadata, without making them; None when this batch cannot."""
        return None

    def positions(self) -> list[bytes]:
        """The records' positions, in order."""
        return [r.position for r in self.records()]

    # -- the sequence -------------------------------------------------------------
    def records(self) -> list[Record]:
        """The Records (made on the first call, the same list after)."""
        if self._records is None:
            records = self._materialize()
            if self._extra:
                for r in records:
                    r.metadata.update(self._extra)
            self._records = records
        return self._records

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index):
        return self.records()[index]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __repr__(self) -> str:
        state = "materialised" if self._records is not None else "lazy"
        return f"<{type(self).__name__} of {len(self)} records, {state}>"

    # -- what the engine and destinations call ----------------------------------
    def add_metadata(self, items: Mapping[str, str]) -> None:
        """Set ``items`` in every record's metadata (the engine's ``conduit.source.*`` keys)."""
        if self._records is not None:
            for r in self._records:
                r.metadata.update(items)
        elif self._extra is None:
            self._extra = dict(items)
        else:
            self._extra.update(items)

    def jsonform_lines(self, store: SchemaStore | None) -> bytes | None:
        """The batch in Conduit's JSON form, one line per record, as ``dumps_lines`` writes it;
        None when the caller must write the Records (they were made already, and someone may
        have changed them, or this batch cannot render itself)."""
        if self._records is not None:
            return None
        return self._render_jsonform(store, self._extra)


def positions_of(batch: Sequence[Record]) -> list[bytes]:
    """The positions of a source's batch, a list or a ``RecordBatch`` (without making its Records)."""
    if isinstance(batch, RecordBatch):
        return batch.positions()
    return [r.position for r in batch]
