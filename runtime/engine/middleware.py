"""Conduit's connector middleware (the ``sdk.*`` settings), for the connectors cdcflow runs in process.

Conduit's connector SDK wraps every connector in middleware configured by ``sdk.*`` settings,
so a Conduit pipeline file may give them to any connector. A standalone plugin applies its own
(its SDK lists them in its specification); for the connectors loaded in process (built-ins and
cdcflow-SDK plugins) the registry adds these parameters to their specifications and the engine
applies them here, around the plugin: the plugin never sees an ``sdk.*`` setting.

What each does in cdcflow (docs/conduit.md has the table):
- ``sdk.batch.size``: at most that many records per ``read`` (source) or per ``write`` (destination);
  0 leaves it to the engine's ``batch-size``. ``sdk.batch.delay``: accepted; a cdcflow batch ends when
  the source has nothing more ready, so there is no wait to shorten or lengthen.
- ``sdk.rate.perSecond`` / ``sdk.rate.burst`` (destination): a token bucket in front of ``write``,
  as Conduit's: writes go in chunks of at most ``burst`` records (default: the rate, rounded up),
  each waiting for its tokens.
- ``sdk.record.format`` (destination): ``opencdc/json``, the JSON form cdcflow's destinations write;
  another format is refused when the pipeline is validated, not ignored.
- ``sdk.schema.*``: accepted with Conduit's defaults; cdcflow keeps the schema metadata a record
  comes with and does not extract schemas itself (see docs/conduit.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..params import Parameter, ParamType

PREFIX = "sdk."
RECORD_FORMATS = ("opencdc/json",)

_BATCH = {
    "sdk.batch.size": Parameter(ParamType.INT, default="0", greater_than=-1,
                                description="Records per batch at most (0: the engine's batch-size)."),
    "sdk.batch.delay": Parameter(ParamType.DURATION, default="0",
                                 description="Accepted for Conduit files; a batch ends when nothing more is ready."),
}
_SCHEMA_EXTRACT = {
    "sdk.schema.extract.payload.enabled": Parameter(ParamType.BOOL, default="true",
                                                    description="Accepted for Conduit files (not applied)."),
    "sdk.schema.extract.key.enabled": Parameter(ParamType.BOOL, default="true",
                                                description="Accepted for Conduit files (not applied)."),
}
SOURCE_PARAMS: Mapping[str, Parameter] = {
    **_BATCH,
    **_SCHEMA_EXTRACT,
    "sdk.schema.extract.type": Parameter(ParamType.STRING, default="avro", inclusion=("avro",),
                                         description="Accepted for Conduit files (not applied)."),
    "sdk.schema.extract.payload.subject": Parameter(ParamType.STRING, default="payload",
                                                    description="Accepted for Conduit files (not applied)."),
    "sdk.schema.extract.key.subject": Parameter(ParamType.STRING, default="key",
                                                description="Accepted for Conduit files (not applied)."),
    "sdk.schema.context.enabled": Parameter(ParamType.BOOL, default="true",
                                            description="Accepted for Conduit files (not applied)."),
    "sdk.schema.context.name": Parameter(ParamType.STRING, default="",
                                         description="Accepted for Conduit files (not applied)."),
}
DESTINATION_PARAMS: Mapping[str, Parameter] = {
    **_BATCH,
    **_SCHEMA_EXTRACT,
    "sdk.rate.perSecond": Parameter(ParamType.FLOAT, default="0", greater_than=-1,
                                    description="Records written per second at most (0: no limit)."),
    "sdk.rate.burst": Parameter(ParamType.INT, default="0", greater_than=-1,
                                description="Records per burst at most (0: the rate, rounded up)."),
    "sdk.record.format": Parameter(ParamType.STRING, default="opencdc/json", inclusion=RECORD_FORMATS,
                                   description="How records are written: opencdc/json (cdcflow's only format so far)."),
    "sdk.record.format.options": Parameter(ParamType.STRING, default="",
                                           description="Options of the record format (none for opencdc/json)."),
}


def applies(info: Any) -> bool:
    """Whether the engine applies the middleware for the plugin ``info`` (a ``PluginInfo``): for
    in-process plugins; a standalone plugin gets its ``sdk.*`` settings and applies them itself."""
    return getattr(info, "type", "builtin") == "builtin"


def connector_settings(settings: Mapping[str, Any], info: Any) -> Mapping[str, Any]:
    """What the plugin ``info`` is configured with: without the ``sdk.*`` settings the engine applies."""
    if not applies(info):
        return settings
    return {k: v for k, v in settings.items() if not k.startswith(PREFIX)}


@dataclass(frozen=True)
class SourceMiddleware:
    batch_size: int = 0

    @classmethod
    def of(cls, settings: Mapping[str, Any], info: Any) -> "SourceMiddleware":
        return cls(int(settings.get("sdk.batch.size") or 0)) if applies(info) else cls()

    def read_size(self, engine_batch: int) -> int:
        return min(engine_batch, self.batch_size) if self.batch_size > 0 else engine_batch


class RateLimiter:
    """A token bucket (as Go's ``rate.Limiter``): ``rate`` tokens a second, at most ``burst`` saved."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.rate, self.burst = rate, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._at = clock()

    def wait(self, n: int) -> None:
        """Block until ``n`` (≤ burst) tokens are there, and take them."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= n
        if self._tokens < 0:
            self._sleep(-self._tokens / self.rate)


@dataclass
class DestinationMiddleware:
    batch_size: int = 0
    limiter: RateLimiter | None = None

    @classmethod
    def of(cls, settings: Mapping[str, Any], info: Any) -> "DestinationMiddleware":
        if not applies(info):
            return cls()
        rate = float(settings.get("sdk.rate.perSecond") or 0)
        limiter = None
        if rate > 0:
            burst = int(settings.get("sdk.rate.burst") or 0) or math.ceil(rate)
            limiter = RateLimiter(rate, burst)
        return cls(int(settings.get("sdk.batch.size") or 0), limiter)

    @property
    def active(self) -> bool:
        return self.batch_size > 0 or self.limiter is not None

    def write(self, write: Callable[[Sequence[Any]], Sequence[str | None] | None],
              records: Sequence[Any]) -> Sequence[str | None] | None:
        """``write`` over ``records`` in chunks (the batch size, and at most a burst each, every
        chunk waiting for its tokens); the per-record results joined, None when all were written."""
        size = len(records)
        if self.batch_size > 0:
            size = min(size, self.batch_size)
        if self.limiter is not None:
            size = min(size, self.limiter.burst)
        if size >= len(records) and self.limiter is None:
            return write(records)
        results: list[str | None] = []
        failed = False
        for start in range(0, len(records), max(size, 1)):
            chunk = records[start:start + size]
            if self.limiter is not None:
                self.limiter.wait(len(chunk))
            errors = write(chunk)
            if errors:
                failed = True
                results.extend(errors)
            else:
                results.extend([None] * len(chunk))
        return results if failed else None
