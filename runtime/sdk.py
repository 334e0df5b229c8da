"""Base classes for plugin authors: Source, Destination, Transform.

The lifecycle is Conduit's, and nothing else: ``configure`` (settings already validated
against the parameter spec) → ``open`` → ``read``/``write``/``process`` in batches →
``ack`` → ``stop`` → ``teardown``. The runtime drives it the same way for in-process
plugins and for standalone ones behind gRPC. (Built-ins may also implement engine-internal
fast paths, ``cdcflow.engine.fastpath``; a plugin never needs them.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence, Union

from .errors import InfrastructureError
from .params import Parameter
from .record import Record


class Plugin:
    """Common lifecycle. ``config`` holds typed values (see ``params.validate``)."""

    #: identifies the running instance in errors and logs (connector or processor id)
    id: str = ""

    def configure(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)

    def teardown(self) -> None:
        """Release everything ``open`` acquired. Called once, also after failures."""


class Source(Plugin):
    """Produces records. One instance reads one partition."""

    def partitions(self) -> Sequence[str]:
        """Partition ids this source splits into, called after ``configure``.

        The engine opens one instance per partition (a Spark partition each), so
        records of one partition keep their order. Default: one partition, ``""``.
        """
        return [""]

    def open(self, position: bytes | None, partition: str = "") -> None:
        """Start reading ``partition`` after ``position`` (None: from the beginning)."""

    def read(self, max_records: int) -> Sequence[Record] | None:
        """Return up to ``max_records`` records; ``[]`` when none are ready now,
        ``None`` when a bounded source has nothing more (end of stream)."""
        raise NotImplementedError

    def ack(self, positions: Sequence[bytes]) -> None:
        """Positions that every destination wrote durably, in production order."""

    def stop(self) -> bytes | None:
        """Stop producing; return the position of the last record returned by ``read``."""
        return None

    def lag(self) -> int | None:
        """Records known to be waiting behind the current position (progress and metrics),
        or None when the source cannot tell."""
        return None


class Destination(Plugin):
    """Writes records."""

    def open(self) -> None:
        """Prepare for writing."""

    def write(self, records: Sequence[Record]) -> Sequence[str | None] | None:
        """Write a batch durably before returning.

        Return None when every record was written, or one entry per record: None
        for written, an error message for rejected (that record is nacked to the
        DLQ). Raising fails the whole batch.
        """
        raise NotImplementedError

    def stop(self, last_position: bytes | None) -> None:
        """Flush everything up to and including ``last_position``.

        The engine calls it once before ``teardown`` when it closes the destination after a
        clean end (not after a failure), with the position of the last record it handed to
        ``write`` (None if it wrote nothing), as Conduit calls Stop before Teardown."""


class Filtered:
    """Result of a transform that drops a record on purpose."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FILTERED"


FILTERED = Filtered()


class Failed:
    """Result of a transform that could not process a record (goes to the DLQ)."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def __repr__(self) -> str:
        return f"Failed({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Failed) and other.message == self.message


#: one result per input record: the record, FILTERED, Failed, or several records
Result = Union[Record, Filtered, Failed, list[Record]]


class Transform(Plugin):
    """Processes records. Implement ``process_record`` (per record) or ``process``
    (per batch, for transforms that gain from seeing the whole batch)."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "v0.1.0"
    summary: ClassVar[str] = ""
    description: ClassVar[str] = ""
    author: ClassVar[str] = ""
    parameters: ClassVar[Mapping[str, Parameter]] = {}

    def open(self) -> None:
        """Prepare for processing."""

    def process_record(self, record: Record) -> Result:
        raise NotImplementedError

    def process(self, records: Sequence[Record]) -> list[Result]:
        """One result per input record, in order. A record that raises becomes
        ``Failed`` with the error message; the others go on. An ``InfrastructureError``
        is not a record's fault: it fails the whole batch."""
        out: list[Result] = []
        fn = self.process_record
        for r in records:
            try:
                out.append(fn(r))
            except InfrastructureError:
                raise  # an outage is not this record's fault: the batch fails and is retried
            except Exception as e:  # noqa: BLE001 - one bad record must not fail the batch
                out.append(Failed(f"{type(e).__name__}: {e}" if not str(e) else str(e)))
        return out


@dataclass(frozen=True)
class ConnectorPlugin:
    """What a connector plugin registers: its specification and implementation classes.

    Mirrors ``connector.v2.Specification``; a plugin may implement one side or both.
    """

    name: str
    version: str = "v0.1.0"
    summary: str = ""
    description: str = ""
    author: str = ""
    source: type[Source] | None = None
    destination: type[Destination] | None = None
    source_params: Mapping[str, Parameter] = field(default_factory=dict)
    destination_params: Mapping[str, Parameter] = field(default_factory=dict)
