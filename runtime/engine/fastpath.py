"""Engine-internal fast paths that built-in connectors may implement; not part of the SDK.

A plugin author sees only Conduit's lifecycle (``cdcflow.sdk``). Some built-ins can do a
batch's work without making the Python objects the lifecycle speaks in, and the engine or
the standalone plugin server uses that when it can tell nothing else needs those objects.
Each capability is a ``typing.Protocol`` here, checked with ``isinstance``:

- ``IdleAwareSource``: a source the engine tells, before ``partitions``, that the run ends
  once every partition is idle (``cdcflow run --until-idle``), so that one which can tell
  its location is wrong (a path that does not exist) raises instead of idling forever.
- ``ReadWaitSource``: a source whose ``read`` may wait for records to come; the engine sets
  ``read_wait = 0`` when a task serves several partitions, so a quiet one is passed over at
  once (the task sleeps itself when none had records).
- ``WireDestination``: a destination that writes a standalone server's ``Destination.Run``
  request messages from their protobuf bytes, without building the records first.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable



@runtime_checkable
class IdleAwareSource(Protocol):
    """A source that reads ``until_idle`` (set by the engine before ``partitions``); it declares
    the capability with ``until_idle = False`` as a class attribute."""

    until_idle: bool


@runtime_checkable
class ReadWaitSource(Protocol):
    """A source whose ``read`` waits at most ``read_wait`` seconds for records when none is there
    yet (None: as its own settings say); it declares the capability with ``read_wait = None`` as a
    class attribute."""

    read_wait: float | None


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
