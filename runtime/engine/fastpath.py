"""Engine-internal fast paths that built-in connectors may implement; not part of the SDK.

A plugin author sees only Conduit's lifecycle (``cdcflow.sdk``). Some built-ins can do a
batch's work without making the Python objects the lifecycle speaks in, and the engine or
the standalone plugin server uses that when it can tell nothing else needs those objects.
Each capability is a ``typing.Protocol`` here, checked with ``isinstance``:

- ``LazyBatchSource``: a source the engine tells, before ``open``, that nothing between it
  and its destinations needs Record objects (the pipeline has no processors). Its ``read``
  may then return a ``RecordBatch``: a sequence of Records made on first use, which a
  destination writing Conduit's JSON form asks for its finished lines first
  (``RecordBatch.jsonform_lines``). Every other consumer sees an ordinary sequence.
- ``IdleAwareSource``: a source the engine tells, before ``partitions``, that the run ends
  once every partition is idle (``cdcflow run --until-idle``), so that one which can tell
  its location is wrong (a path that does not exist) raises instead of idling forever.
- ``WireDestination``: a destination that writes a standalone server's ``Destination.Run``
  request messages from their protobuf bytes, without building the records first.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Protocol, Sequence, overload, runtime_checkable

from ..record import Record
from ..schemas import SchemaStore


@runtime_checkable
class LazyBatchSource(Protocol):
    """A source that may return ``RecordBatch``es from ``read`` when ``lazy_batches`` is set.

    The engine sets ``lazy_batches`` before ``open`` only when the pipeline has no
    processors; a source leaves it ``False`` as a class attribute to declare the capability."""

    lazy_batches: bool


@runtime_checkable
class IdleAwareSource(Protocol):
    """A source that reads ``until_idle`` (set by the engine before ``partitions``); it declares
    the capability with ``until_idle = False`` as a class attribute."""

    until_idle: bool


@runtime_checkable
class WireDestination(Protocol):
    """A destination that writes a standalone server's batch messages from their bytes."""

    def write_wire(self, messages: Sequence[bytes]) -> Sequence[Any]:
        """Write the records of ``Destination.Run`` request messages (records in field 1, read as
        ``cdcflow.convert.protobuf.from_wire`` reads them with the default schema store),
        durably before returning.

        One entry per message, in order: the ``Destination.Run.Response`` bytes acknowledging
        every record of it (``cdcflow.standalone.framing.encode_acks``), or ``(positions,
        failed)``: its records' positions and ``from_wire``'s ``failed`` (index -> (position,
        error)) for the records that did not decode, which are nacked with that error. The
        latter says the message went through records: when every message of a call did, the
        server decodes the next ones itself for a while and hands them to ``write``. Raising
        fails every record of the messages; a message that is not a batch message raises
        before anything is written. ``NotImplemented``: this instance takes records only."""


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
