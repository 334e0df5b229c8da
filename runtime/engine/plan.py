"""What a run executes: picklable descriptions shipped from the driver to Spark tasks.

``RunContext`` is everything a task needs besides its partition (pipelines,
state directory, limits); ``PartitionTask`` names one source partition. Both are
plain data so Spark pickles them once per micro-batch without surprises.
``plan_partitions`` asks each source for its partitions on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError, PluginNotFoundError
from ..pipeline.model import PipelineConfig
from .faults import SOURCE, node_error
from .state import StateDir


@dataclass(frozen=True)
class PartitionTask:
    pipeline: str
    source: str
    partition: str

    def __str__(self) -> str:
        part = f"[{self.partition}]" if self.partition else ""
        return f"{self.pipeline}/{self.source}{part}"


@dataclass
class Limits:
    """How much one task does per micro-batch before returning to the driver."""

    batch_size: int = 10_000  # records per read → transform → write → ack cycle
    task_seconds: float = 5.0  # wall-clock budget of one task per micro-batch
    task_records: int = 0  # 0: no record budget, only time
    idle_timeout: float = 0.5  # how long a partition may return [] before the task calls it idle


@dataclass
class RunContext:
    pipelines: dict[str, PipelineConfig]
    state: StateDir
    plugins_dir: str | None = None
    limits: Limits = field(default_factory=Limits)

    @property
    def schema_store(self) -> str:
        return str(self.state.schema_store_path)


def plan_partitions(pipelines: list[PipelineConfig], registry, until_idle: bool = False) -> list[PartitionTask]:
    """Configure each source once on the driver and ask for its partition ids.

    The instance is torn down again: the partitions are opened by the tasks.
    """
    tasks: list[PartitionTask] = []
    for pipe in pipelines:
        for src_cfg in pipe.sources:
            info = registry.connector(src_cfg.plugin)
            settings = info.validate("source", src_cfg.settings, plugin_id=src_cfg.id)
            source = info.new_source()
            source.id = src_cfg.id
            source.until_idle = until_idle
            try:
                source.configure(settings)
                partitions = list(source.partitions())
            except (ConfigError, PluginNotFoundError):
                raise
            except Exception as e:  # an outage or a failure at start: named like the tasks name theirs
                raise node_error(pipe.id, SOURCE, src_cfg.id, e) from e
            finally:
                source.teardown()
            if not partitions:
                partitions = [""]
            tasks.extend(PartitionTask(pipe.id, src_cfg.id, str(p)) for p in partitions)
    return tasks
