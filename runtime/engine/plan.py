"""What a run executes: picklable descriptions shipped from the driver to Spark tasks.

``RunContext`` is everything a task needs besides its partition (pipelines, their
connectors' settings validated once on the driver, state directory, limits);
``PartitionTask`` names one source partition. Both are plain data so Spark pickles them
once per micro-batch without surprises. ``plan_partitions`` asks each source for its
partitions on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import CdcflowError, ConfigError, PluginNotFoundError
from ..params import REDACTOR, secret_values
from ..pipeline.model import PipelineConfig
from .fastpath import IdleAwareSource
from .middleware import connector_settings
from .faults import DESTINATION, DLQ, PROCESSOR, SOURCE, node_error
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
    task_seconds: float = 5.0  # wall-clock budget of one task per micro-batch (a run: the trigger interval)
    task_records: int = 0  # 0: no record budget, only time
    idle_timeout: float = 0.5  # how long a partition may return [] before the task calls it idle


#: (pipeline id, role, node id) → the connector's or processor's typed settings (the DLQ's id is "";
#: a processor's is its ``node_id``, unique within the pipeline)
Settings = Mapping[tuple[str, str, str], Mapping[str, Any]]


def node_settings(pipelines: Mapping[str, PipelineConfig], registry) -> tuple[dict, tuple[str, ...]]:
    """Every connector's and processor's settings validated against its spec (``ConfigError``
    otherwise), and the secret values among them, which each worker's log redactor masks."""
    from ..pipeline.chain import validate_processor

    settings: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    secrets: list[str] = []
    for pipe in pipelines.values():
        for pc in pipe.all_processors:
            settings[(pipe.id, PROCESSOR, pc.node_id)] = validate_processor(pc, registry)
            secrets.extend(secret_values(registry.transform(pc.plugin).spec_for("transform"), pc.settings))
        sides = [(SOURCE, c.id, c.plugin, "source", c.settings) for c in pipe.sources]
        sides += [(DESTINATION, c.id, c.plugin, "destination", c.settings) for c in pipe.destinations]
        dlq = pipe.dead_letter_queue
        sides.append((DLQ, "", dlq.plugin, "destination", dlq.settings))
        for role, cid, plugin, side, raw in sides:
            info = registry.connector(plugin)
            settings[(pipe.id, role, cid)] = info.validate(side, raw, plugin_id=cid or f"{pipe.id}-dlq")
            secrets.extend(secret_values(info.spec_for(side), raw))
    return settings, tuple(sorted(set(secrets)))


@dataclass
class RunContext:
    pipelines: dict[str, PipelineConfig]
    state: StateDir
    plugins_dir: str | None = None
    limits: Limits = field(default_factory=Limits)
    settings: Settings = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # masked in every worker's logs (``params.REDACTOR``)

    @classmethod
    def prepare(cls, pipelines: dict[str, PipelineConfig], state: StateDir, registry, *,
                plugins_dir: str | None = None, limits: Limits | None = None) -> "RunContext":
        """The context of a run, its connectors' settings validated here (on the driver)."""
        settings, secrets = node_settings(pipelines, registry)
        return cls(pipelines, state, plugins_dir, limits or Limits(), settings, secrets)

    @property
    def schema_store(self) -> str:
        return str(self.state.schema_store_path)

    def settings_of(self, pipeline: str, role: str, connector: str = "") -> Mapping[str, Any]:
        try:
            return self.settings[(pipeline, role, connector)]
        except KeyError:
            raise CdcflowError(f"pipeline {pipeline}: {role} {connector!r} has no validated settings "
                               "(the run context was not made with RunContext.prepare)") from None

    def processor_settings(self, pipeline: str) -> dict[str, Mapping[str, Any]]:
        """``ProcessorConfig.node_id`` → its settings validated on the driver, for ``pipeline``'s chains."""
        return {node: s for (pipe, role, node), s in self.settings.items() if pipe == pipeline and role == PROCESSOR}

    def install_secrets(self) -> None:
        REDACTOR.add(*self.secrets)


def plan_partitions(ctx: RunContext, registry, until_idle: bool = False) -> list[PartitionTask]:
    """Configure each source once on the driver and ask for its partition ids.

    The instance is torn down again: the partitions are opened by the tasks.
    """
    tasks: list[PartitionTask] = []
    for pipe in ctx.pipelines.values():
        for src_cfg in pipe.sources:
            info = registry.connector(src_cfg.plugin)
            settings = ctx.settings_of(pipe.id, SOURCE, src_cfg.id)
            source = info.new_source()
            source.id = src_cfg.id
            if isinstance(source, IdleAwareSource):
                source.until_idle = until_idle
            try:
                source.configure(connector_settings(settings, info))
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
