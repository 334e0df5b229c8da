"""Which node of a pipeline failed, whether it was an outage, and how long to retry it.

Every call the engine makes into a node (source read/ack/open, a processor chain, a
destination or the DLQ write, the state store) is wrapped so that a failure leaves it as
a ``NodeError`` naming pipeline, role and connector id, plus service and endpoint when
the cause is an ``InfrastructureError``. Only that case is retried (``RetryPolicy``): an
outage is never a record's fault, so it fails the whole batch instead of nacking records.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass

from ..errors import CdcflowError, InfrastructureError
from ..pipeline.model import EngineConfig

log = logging.getLogger("cdcflow.engine")

SOURCE, PROCESSOR, DESTINATION, DLQ, STATE = "source", "processor", "destination", "DLQ", "state store"


def as_infrastructure(e: BaseException) -> InfrastructureError | None:
    """``e`` as an outage, or None when it is not one.

    SQLite errors can only come from the schema store (disk full, I/O error, file gone):
    they are outages of that store whichever plugin ran into them."""
    if isinstance(e, InfrastructureError):
        return e
    if isinstance(e, sqlite3.OperationalError):
        from ..schemas import STORE_ENV

        return InfrastructureError(str(e), service="schema-store", endpoint=os.environ.get(STORE_ENV))
    return None


def state_fault(path: object, e: OSError) -> InfrastructureError:
    """An OSError on the state directory (ENOSPC, EROFS, EIO...), carrying the path."""
    reason = e.strerror or str(e)
    errno = f"[Errno {e.errno}] " if e.errno else ""
    return InfrastructureError(f"{errno}{reason}: {path}", service="state", endpoint=str(path))


class NodeError(CdcflowError):
    """A node of a pipeline failed: its role, id and (for an outage) service and endpoint."""

    def __init__(self, pipeline: str, role: str, node: str, cause: BaseException):
        self.pipeline, self.role, self.node, self.cause = pipeline, role, node, cause
        self.infrastructure = as_infrastructure(cause)
        super().__init__(f"{role} {node}: {describe(cause)}")  # the driver prefixes the pipeline

    @property
    def retryable(self) -> bool:
        return self.infrastructure is not None


def describe(e: BaseException) -> str:
    """One line for an error: service and endpoint first for an outage."""
    infra = as_infrastructure(e)
    text = str(e) or type(e).__name__
    if infra is not None:
        where = f" at {infra.endpoint}" if infra.endpoint and infra.endpoint not in text else ""
        service = infra.service or "service"
        return f"{service} unavailable{where}: {text}"
    return text if isinstance(e, CdcflowError) else f"{type(e).__name__}: {text}"


class in_node:
    """``with in_node(pipeline, role, node):`` — a failure inside leaves as a ``NodeError`` naming
    the node (an error already naming its node, or a deliberate stop, passes unchanged)."""

    __slots__ = ("pipeline", "role", "node")

    def __init__(self, pipeline: str, role: str, node: str):
        self.pipeline, self.role, self.node = pipeline, role, node

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ, e, tb) -> None:
        if e is not None and isinstance(e, Exception) and not isinstance(e, (NodeError, PipelineStopped)):
            raise node_error(self.pipeline, self.role, self.node, e) from e


class PipelineStopped(CdcflowError):
    """The pipeline stopped on purpose: nack threshold exceeded or the DLQ write failed."""


def quiet_teardown(part: object) -> None:
    """``part.teardown()``, best effort: closing after a failure must not hide that failure."""
    if part is None:
        return
    try:
        part.teardown()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        log.debug("teardown of %r failed", part, exc_info=True)


def node_error(pipeline: str, role: str, node: str, e: BaseException) -> NodeError:
    """``e`` wrapped with the node it happened in (the innermost node wins)."""
    if isinstance(e, NodeError):
        return e
    if role == PROCESSOR:
        node = getattr(e, "processor_id", None) or node  # the chain says which processor
    return NodeError(pipeline, role, node, e)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for a batch failed by an outage (the ``error-recovery.*`` settings)."""

    max_retries: int = 10  # -1: no limit
    min_delay: float = 1.0
    max_delay: float = 30.0
    backoff_factor: float = 2.0
    max_elapsed: float = 300.0  # 0: no limit

    @classmethod
    def of(cls, engine: EngineConfig) -> "RetryPolicy":
        return cls(engine.retry_max_retries, engine.retry_min_delay, engine.retry_max_delay,
                   engine.retry_backoff_factor, engine.retry_max_elapsed)

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return min(self.max_delay, self.min_delay * self.backoff_factor ** (retry - 1))

    def next_delay(self, retry: int, elapsed: float) -> float | None:
        """The wait before retry ``retry`` after ``elapsed`` seconds of failing; None: give up."""
        if 0 <= self.max_retries < retry:
            return None
        wait = self.delay(retry)
        if self.max_elapsed and elapsed + wait > self.max_elapsed:
            return None
        return wait

    def __str__(self) -> str:
        retries = "no retry limit" if self.max_retries < 0 else f"max-retries {self.max_retries}"
        elapsed = f", max-elapsed {self.max_elapsed:g}s" if self.max_elapsed else ""
        return f"error-recovery: {retries}{elapsed}"
