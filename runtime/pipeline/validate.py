"""Offline validation of pipeline files (``cdcflow validate``).

Everything that can be known without running anything: the file problems of
``config.load_files``, then per pipeline: every plugin exists and has the side it
is used for, settings are valid against each plugin's parameter spec (all rule
violations, not just the first), conditions compile, built-in transforms accept
their settings (their ``configure`` compiles templates and field references),
each running pipeline has at least one source and one destination (a stopped one
may have none, as in Conduit), and built-in
connectors accept their settings (their ``configure`` runs the checks ``cdcflow
run`` would otherwise make only when starting: URI query parameters, settings
required together, combinations). Standalone plugins are not started: their
settings are checked against their spec only.

A problem with one setting is reported at that setting's own line (a URI query
parameter at the URI's line), with "did you mean" for a near-miss name.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import CdcflowError, ConfigError
from ..expr import Condition, ExpressionError
from ..params import REDACTOR, problems as parameter_problems
from .config import LoadResult, Problem, load_files
from .model import ConnectorConfig, Origin, PipelineConfig, ProcessorConfig


@dataclass
class ValidationResult:
    pipelines: list[PipelineConfig] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)  # reported; never make the files invalid

    @property
    def valid(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "problems": [p.as_dict() for p in self.problems],
                "warnings": [w.as_dict() for w in self.warnings]}


def validate_files(
    paths: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    plugins_dir: str | Path | None = None,
    registry: Any = None,
) -> ValidationResult:
    """Load ``paths`` and check them against the plugins in ``registry``
    (default: ``load_registry(plugins_dir)``). Returns every problem, sorted by file and line."""
    loaded = load_files(list(paths), env)
    if registry is None:
        from ..registry import load_registry

        registry = load_registry(plugins_dir)
    return validate_loaded(loaded, registry, paths)


def validate_loaded(loaded: LoadResult, registry: Any, paths: Sequence[str] = ()) -> ValidationResult:
    problems = list(loaded.problems)
    for pipeline in loaded.pipelines:
        problems.extend(_PipelineChecker(pipeline, registry).check())
    order = {str(p): i for i, p in reversed(list(enumerate(paths)))}
    # the same fact found twice is listed once; a message quoting a setting never shows its secrets
    def listed(found: list[Problem]) -> list[Problem]:
        unique = list(dict.fromkeys(Problem(pr.file, pr.line, REDACTOR.redact(pr.message)) for pr in found))
        unique.sort(key=lambda pr: (order.get(pr.file, len(order)), pr.file, pr.line))
        return unique

    return ValidationResult(loaded.pipelines, listed(problems), listed(loaded.warnings))


class _PipelineChecker:
    def __init__(self, pipeline: PipelineConfig, registry: Any):
        self.pipeline = pipeline
        self.registry = registry
        self.problems: list[Problem] = []
        self.failed_spec = False

    def add(self, origin: Origin | None, message: str) -> None:
        origin = origin or self.pipeline.origin
        if origin is None:
            self.problems.append(Problem("<unknown>", 0, message))
        else:
            self.problems.append(Problem(origin.file, origin.line, message))

    def check(self) -> list[Problem]:
        p = self.pipeline
        what = f"pipeline {p.id!r}"
        if p.status != "stopped" and not p.sources:
            self.add(p.origin, f"{what} has no source connector (at least one is required)")
        if p.status != "stopped" and not p.destinations:
            self.add(p.origin, f"{what} has no destination connector (at least one is required)")
        for c in p.connectors:
            self.connector(c, what)
            for proc in c.processors:
                self.processor(proc, f"{what}: connector {c.id!r}")
        for proc in p.processors:
            self.processor(proc, what)
        dlq = p.dead_letter_queue
        self.configured("connector", dlq.plugin, "destination", dlq.settings, dlq.origin, f"{what}: dead-letter-queue",
                        dlq.setting_origins, "dlq")
        return self.problems

    def connector(self, c: ConnectorConfig, owner: str) -> None:
        what = f"{owner}: connector {c.id!r}"
        self.configured("connector", c.plugin, c.type, c.settings, c.origin, what, c.setting_origins, c.id)

    def configured(self, kind: str, ref: str, side: str, settings: Mapping[str, str], origin: Origin | None,
                   what: str, setting_origins: Mapping[str, Origin], plugin_id: str) -> None:
        """The spec checks, then (settings passing them) the built-in connector's own ``configure``:
        exactly what ``cdcflow run`` does before it opens anything."""
        info = self.plugin_settings(kind, ref, side, settings, origin, what, setting_origins)
        if info is None or info.type != "builtin" or self.failed_spec:
            return
        try:
            config = info.validate(side, settings, plugin_id=plugin_id)
            instance = info.new_source() if side == "source" else info.new_destination()
            instance.id = plugin_id
        except CdcflowError:
            return  # reported by the spec checks above
        try:
            instance.configure(config)
            from ..engine import middleware  # the sdk.* settings the engine applies around the plugin

            middleware.check(side, config, instance, plugin_id)
        except ConfigError as e:
            self.add(_setting_origin(e.parameter, settings, setting_origins, origin), f"{what}: {_without_plugin(e)}")
        except CdcflowError as e:
            self.add(origin, f"{what}: {e}")
        except Exception as e:  # noqa: BLE001 - a plugin's configure may raise anything
            self.add(origin, f"{what}: invalid settings: {type(e).__name__}: {e}")
        finally:
            try:
                instance.teardown()
            except Exception:  # noqa: BLE001 - nothing was opened; a failing teardown changes nothing here
                pass

    def plugin_settings(
        self, kind: str, ref: str, side: str, settings: Mapping[str, str], origin: Origin | None, what: str,
        setting_origins: Mapping[str, Origin] | None = None,
    ) -> Any:
        """Resolve the plugin and check its settings; return its PluginInfo or None.
        ``failed_spec`` tells whether any setting broke the spec."""
        self.failed_spec = False
        try:
            info = self.registry.connector(ref) if kind == "connector" else self.registry.transform(ref)
        except CdcflowError as e:
            self.add(origin, f"{what}: {e}")
            return None
        if side not in info.sides:
            has = ", ".join(info.sides) or "none"
            self.add(origin, f"{what}: plugin {info.ref} cannot be used as a {side} (it has: {has})")
            return None
        for err in parameter_problems(info.ref, info.spec_for(side), settings):
            self.failed_spec = True
            self.add(_setting_origin(err.parameter, settings, setting_origins or {}, origin), f"{what}: {err}")
        return info

    def processor(self, proc: ProcessorConfig, owner: str) -> None:
        what = f"{owner}: processor {proc.id!r}"
        if proc.condition:
            try:
                Condition.compile(proc.condition)
            except ExpressionError as e:
                self.add(proc.origin, f"{what}: condition: {e}")
        info = self.plugin_settings("transform", proc.plugin, "transform", proc.settings, proc.origin, what,
                                    proc.setting_origins)
        if info is None or info.type != "builtin":
            return
        # settings passed the spec: let the transform itself check what it compiles (templates, references)
        try:
            config = info.validate("transform", proc.settings, plugin_id=proc.id)
        except ConfigError:
            return  # already reported above, rule by rule
        transform = info.new_transform()
        transform.id = proc.id
        try:
            from ..engine.middleware import connector_settings  # the sdk.* settings are not the plugin's

            transform.configure(connector_settings(config, info))
        except ConfigError as e:
            self.add(_setting_origin(e.parameter, proc.settings, proc.setting_origins, proc.origin),
                     f"{what}: {_without_plugin(e)}")
        except CdcflowError as e:
            self.add(proc.origin, f"{what}: {e}")
        except Exception as e:  # noqa: BLE001 - a plugin's configure may raise anything
            self.add(proc.origin, f"{what}: invalid settings: {type(e).__name__}: {e}")
        finally:
            try:
                transform.teardown()
            except Exception:  # noqa: BLE001 - nothing was opened; a failing teardown changes nothing here
                pass


def _setting_origin(parameter: str | None, settings: Mapping[str, str], origins: Mapping[str, Origin],
                    owner: Origin | None) -> Origin | None:
    """Where a problem with ``parameter`` is written: the setting's own line; for an option given
    in the URI's query (``uri: kafka://.../t?protocol=avro``), the URI's line; else the owner's."""
    if parameter:
        if parameter in origins:
            return origins[parameter]
        uri = settings.get("uri", "")
        if "uri" in origins and "?" in uri:
            query = urllib.parse.parse_qs(uri.split("?", 1)[1], keep_blank_values=True)
            if parameter in query:
                return origins["uri"]
    return owner


def _without_plugin(e: ConfigError) -> str:
    """ConfigError text without its leading plugin name (the caller already names the processor)."""
    text = str(e)
    prefix = f"{e.plugin}: "
    return text[len(prefix):] if text.startswith(prefix) else text
