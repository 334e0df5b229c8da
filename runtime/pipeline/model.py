"""Parsed pipeline configuration (Conduit ``version: 2.2`` plus cdcflow's ``engine:`` key).

Plain dataclasses shared by the parser, ``cdcflow validate`` and the engine. Each
node keeps where it came from (file and line) so errors can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Origin:
    file: str
    line: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class ProcessorConfig:
    id: str
    plugin: str  # e.g. "field.set", "builtin:filter", "standalone:my-transform@v1.0.0"
    settings: dict[str, str] = field(default_factory=dict)
    condition: str | None = None
    workers: int = 1
    origin: Origin | None = None
    setting_origins: dict[str, Origin] = field(default_factory=dict)  # setting key -> its line
    parent: str = ""  # the connector whose processor this is; "" for the pipeline's own

    @property
    def node_id(self) -> str:
        """Unique within the pipeline: ids are unique per parent, as Conduit scopes them."""
        return f"{self.parent}:{self.id}" if self.parent else self.id


@dataclass
class ConnectorConfig:
    id: str
    type: str  # "source" | "destination"
    plugin: str
    name: str = ""
    settings: dict[str, str] = field(default_factory=dict)
    processors: list[ProcessorConfig] = field(default_factory=list)
    origin: Origin | None = None
    setting_origins: dict[str, Origin] = field(default_factory=dict)  # setting key -> its line


@dataclass
class DLQConfig:
    plugin: str = "builtin:log"
    settings: dict[str, str] = field(default_factory=dict)
    window_size: int = 1
    window_nack_threshold: int = 0
    origin: Origin | None = None
    setting_origins: dict[str, Origin] = field(default_factory=dict)  # setting key -> its line


@dataclass
class EngineConfig:
    """cdcflow's own additions, under the top-level or pipeline-level ``engine:`` key."""

    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=dict)
    trigger_interval: float = 1.0  # seconds between micro-batches of unbounded sources
    micro_batch_duration: float | None = None  # seconds a task works per micro-batch (engine default if None)
    batch_size: int = 10_000  # records per read/transform/write batch
    state_dir: str | None = None  # default: .cdcflow/ beside the pipeline file; or an object-store URI
    state_options: dict[str, str] = field(default_factory=dict)  # the object store's settings (secrets masked)
    state_lease: float | None = None  # seconds an object-store run lease lasts unrenewed (default 30)
    # error recovery: a batch failed by an outage (InfrastructureError) is retried with
    # exponential backoff, then the pipeline stops (docs/reliability.md)
    retry_max_retries: int = 10  # -1: no limit (then only retry_max_elapsed bounds it)
    retry_min_delay: float = 1.0  # seconds before the first retry
    retry_max_delay: float = 30.0  # cap of one delay
    retry_backoff_factor: float = 2.0  # each delay is the previous one times this
    retry_max_elapsed: float = 300.0  # give up once the failure lasted this long (0: no limit)


@dataclass
class PipelineConfig:
    id: str
    status: str = "running"  # "running" | "stopped"
    name: str = ""
    description: str = ""
    connectors: list[ConnectorConfig] = field(default_factory=list)
    processors: list[ProcessorConfig] = field(default_factory=list)
    dead_letter_queue: DLQConfig = field(default_factory=DLQConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    origin: Origin | None = None

    @property
    def sources(self) -> list[ConnectorConfig]:
        return [c for c in self.connectors if c.type == "source"]

    @property
    def destinations(self) -> list[ConnectorConfig]:
        return [c for c in self.connectors if c.type == "destination"]

    @property
    def all_processors(self) -> list[ProcessorConfig]:
        """The pipeline's processors and every connector's, in file order of their parents."""
        return [*self.processors, *(p for c in self.connectors for p in c.processors)]
