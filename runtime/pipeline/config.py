"""Load Conduit pipeline files (``version: 2.x``, and 1.x) into ``model.PipelineConfig``.

The YAML is read as PyYAML *nodes* (not plain Python values) so every problem can
name the file and line it comes from. Loading never stops at the first problem:
``load_files`` returns every pipeline it could build together with every problem it
found, so ``cdcflow validate`` lists them all and ``cdcflow run`` refuses to start
when the list is not empty.

Where Conduit's parser only warns, so does this one (``LoadResult.warnings``): an unknown
key is ignored, a missing version or an unknown 2.x version is read as 2.2 (an unknown 1.x
as 1.1), an unset ``${VAR}`` becomes "" (as Go's ``os.ExpandEnv`` makes it). Version 1.x
files (pipelines, connectors and processors as mappings keyed by id) are read too. The
cdcflow-only ``engine:`` section stays strict: an unknown key there is a problem.

Settings values stay the text written in the file (Conduit passes
``map<string,string>``): ``recordCount: 10`` becomes ``"10"``, ``enabled: true``
becomes ``"true"``, ``key:`` (null) becomes ``""``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..params import parse_duration
from .model import (
    ConnectorConfig,
    DLQConfig,
    EngineConfig,
    Origin,
    PipelineConfig,
    ProcessorConfig,
)

#: versions of the pipeline file format this parser knows (Conduit's 2.x line; 1.x is read too)
SUPPORTED_VERSIONS = ("2", "2.0", "2.1", "2.2")
V1_VERSIONS = ("1.0", "1.1")
LATEST_VERSION, LATEST_V1 = "2.2", "1.1"

#: set by the loader for every file: the absolute directory of the file being read,
#: so paths can be written relative to it (``${CDCFLOW_FILE_DIR}/out.jsonl``)
FILE_DIR_VARIABLE = "CDCFLOW_FILE_DIR"

_TAG_NULL = "tag:yaml.org,2002:null"
_TAG_STR = "tag:yaml.org,2002:str"
_TAG_INT = "tag:yaml.org,2002:int"
_TAG_BOOL = "tag:yaml.org,2002:bool"

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{([^}]*)\}?")


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a pipeline file. ``line`` is 1-based; 0 when the whole file is concerned."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        if self.line <= 0:
            return f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message}


@dataclass
class LoadResult:
    """Pipelines that could be built (possibly with problems of their own) and every problem."""

    pipelines: list[PipelineConfig] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: what Conduit's parser would warn about: reported, never a reason to refuse
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def load_files(paths: list[str], env: Mapping[str, str] | None = None) -> LoadResult:
    """Parse every file in ``paths`` (in order) and check ids across all of them.

    ``env`` supplies ``${VAR}`` values (default: ``os.environ``). Pipeline ids must be
    unique across all files; a duplicate keeps the first and reports the second.
    """
    environ = os.environ if env is None else env
    result = LoadResult()
    seen_pipelines: dict[str, Origin] = {}
    for path in paths:
        for pipeline in _FileParser(str(path), environ, result.problems, result.warnings).parse():
            first = seen_pipelines.get(pipeline.id)
            if first is not None:
                result.problems.append(
                    _problem(pipeline.origin, f"duplicate pipeline id {pipeline.id!r} (first defined at {first})")
                )
                continue
            seen_pipelines[pipeline.id] = pipeline.origin or Origin(str(path), 0)
            result.pipelines.append(pipeline)
    file_order = {str(p): i for i, p in reversed(list(enumerate(paths)))}
    result.problems.sort(key=lambda pr: (file_order.get(pr.file, len(file_order)), pr.line))
    result.warnings.sort(key=lambda pr: (file_order.get(pr.file, len(file_order)), pr.line))
    return result


def _problem(origin: Origin | None, message: str) -> Problem:
    if origin is None:
        return Problem("<unknown>", 0, message)
    return Problem(origin.file, origin.line, message)


class _FileParser:
    """Turns one file's YAML nodes into PipelineConfig objects, collecting problems."""

    def __init__(self, path: str, env: Mapping[str, str], problems: list[Problem], warnings: list[Problem]):
        self.path = path
        self.problems = problems
        self.warnings = warnings
        self.v1 = False  # the document being read is a version 1.x one
        self.file_dir = str(Path(path).resolve().parent)
        self.env: dict[str, str] = {FILE_DIR_VARIABLE: self.file_dir}
        self.env.update(env)

    # -- entry -------------------------------------------------------------

    def parse(self) -> list[PipelineConfig]:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except OSError as e:
            self.problems.append(Problem(self.path, 0, f"cannot read file: {e.strerror or e}"))
            return []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.problems.append(Problem(self.path, 0, f"file is not UTF-8: {e}"))
            return []
        try:
            documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark is not None else 0
            what = e.problem or str(e)
            if e.context:
                what = f"{e.context}: {what}"
            self.problems.append(Problem(self.path, line, f"YAML syntax error: {what}"))
            return []
        except yaml.YAMLError as e:
            self.problems.append(Problem(self.path, 0, f"YAML error: {e}"))
            return []
        documents = [d for d in documents if d is not None]
        if not documents:
            self.problems.append(Problem(self.path, 0, "file holds no configuration (expected 'version' and 'pipelines')"))
            return []
        pipelines: list[PipelineConfig] = []
        for doc in documents:
            pipelines.extend(self._document(doc))
        return pipelines

    # -- helpers -----------------------------------------------------------

    def origin(self, node: Node) -> Origin:
        return Origin(self.path, node.start_mark.line + 1)

    def problem(self, node: Node, message: str) -> None:
        self.problems.append(Problem(self.path, node.start_mark.line + 1, message))

    def warn(self, node: Node, message: str) -> None:
        self.warnings.append(Problem(self.path, node.start_mark.line + 1, message))

    def mapping(self, node: Node, what: str, known: tuple[str, ...],
                strict: bool = False) -> dict[str, tuple[Node, Node]] | None:
        """Key → (key node, value node); reports non-mappings and duplicate keys. An unknown key
        is ignored with a warning, as Conduit does, or is a problem when ``strict``."""
        if _is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            self.problem(node, f"{what} must be a mapping, got {_kind(node)}")
            return None
        out: dict[str, tuple[Node, Node]] = {}
        for knode, vnode in node.value:
            if not isinstance(knode, ScalarNode):
                self.problem(knode, f"{what}: keys must be plain strings")
                continue
            key = knode.value
            if key in out:
                self.problem(knode, f"{what}: duplicate key {key!r} (first at line {out[key][0].start_mark.line + 1})")
                continue
            if known and key not in known:
                (self.problem if strict else self.warn)(
                    knode, f"{what}: unknown key {key!r}{'' if strict else ' ignored'} (known: {', '.join(known)})")
                continue
            out[key] = (knode, vnode)
        return out

    def sequence(self, node: Node, what: str) -> list[Node]:
        if _is_null(node):
            return []
        if not isinstance(node, SequenceNode):
            self.problem(node, f"{what} must be a list, got {_kind(node)}")
            return []
        return list(node.value)

    def text(self, node: Node, what: str) -> str | None:
        """A scalar's text with ``${VAR}`` interpolated; null → ''."""
        if not isinstance(node, ScalarNode):
            self.problem(node, f"{what} must be a single value, got {_kind(node)}")
            return None
        if node.tag == _TAG_NULL:
            return ""
        return self.interpolate(node, node.value)

    def required_text(self, fields: dict[str, tuple[Node, Node]], key: str, owner: Node, what: str) -> str | None:
        entry = fields.get(key)
        if entry is None:
            self.problem(owner, f"{what}: '{key}' is required")
            return None
        value = self.text(entry[1], f"{what}.{key}")
        if value == "":
            self.problem(entry[1], f"{what}: '{key}' must not be empty")
            return None
        return value

    def integer(self, node: Node, what: str, minimum: int) -> int | None:
        raw = self.text(node, what)
        if raw is None:
            return None
        try:
            value = int(raw.strip())
        except ValueError:
            self.problem(node, f"{what} must be an integer, got {raw!r}")
            return None
        if value < minimum:
            self.problem(node, f"{what} must be >= {minimum}, got {value}")
            return None
        return value

    def string_map(self, node: Node, what: str, origins: dict[str, Origin] | None = None) -> dict[str, str]:
        """Key -> text; ``origins`` (when given) gets each key's own line, so a problem with one
        setting can point at that setting rather than at its connector."""
        fields = self.mapping(node, what, ())
        if fields is None:
            return {}
        out: dict[str, str] = {}
        for key, (knode, vnode) in fields.items():
            value = self.text(vnode, f"{what}.{key}")
            if value is not None:
                out[key] = value
                if origins is not None:
                    origins[key] = self.origin(knode)
        return out

    def interpolate(self, node: Node, text: str) -> str:
        if "$" not in text:
            return text

        def replace(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            if m.group(3) is not None or m.group(1) is None:
                self.problem(node, f"invalid variable reference {m.group(0)!r} (use ${{NAME}} or ${{NAME:-default}})")
                return m.group(0)
            name, default = m.group(1), m.group(2)
            if default is not None and "${" in default:
                self.problem(node, f"nested variable reference in the default of ${{{name}:-...}} is not supported")
                return m.group(0)
            value = self.env.get(name)
            if default is not None:
                return value if value else default
            if value is None:  # Conduit's os.ExpandEnv makes it "" without a word; say it at least
                self.warn(node, f"environment variable {name!r} is not set: replaced by \"\" "
                                f"(use ${{{name}:-default}} for a default)")
                return ""
            return value

        return _VARIABLE.sub(replace, text)

    # -- structure ---------------------------------------------------------

    def _document(self, doc: Node) -> list[PipelineConfig]:
        fields = self.mapping(doc, "configuration", ("version", "pipelines", "engine"))
        if fields is None:
            return []
        version = self._version(doc, fields.get("version"))
        if version is None:
            return []
        self.v1 = version.startswith("1")
        file_engine = EngineConfig()
        if "engine" in fields:
            file_engine = self._engine(fields["engine"][1], EngineConfig(), "engine")
        pipelines_entry = fields.get("pipelines")
        if pipelines_entry is None:
            self.problem(doc, "'pipelines' is required")
            return []
        out = []
        for pid, pnode in self.entries(pipelines_entry[1], "pipelines"):
            p = self._pipeline(pnode, file_engine, pid)
            if p is not None:
                out.append(p)
        return out

    def _version(self, doc: Node, entry: tuple[Node, Node] | None) -> str | None:
        """The version the document is read as, as Conduit picks it: none given or an unknown
        2.x reads as 2.2 and an unknown 1.x as 1.1, with a warning; another major is a problem."""
        if entry is None:
            self.warn(doc, f"no 'version' given: read as version {LATEST_VERSION}")
            return LATEST_VERSION
        version = self.text(entry[1], "version")
        if version is None:
            return None
        if version in SUPPORTED_VERSIONS or version in V1_VERSIONS:
            if version == "1.0":
                self.warn(entry[1], "version 1.x is deprecated: its processors are mappings with no order of their own "
                                    "(cdcflow runs them in file order); convert the file to version 2.2")
            return version
        major = version.split(".")[0]
        if major in ("2", "1"):
            read_as = LATEST_VERSION if major == "2" else LATEST_V1
            self.warn(entry[1], f"unknown version {version!r}: read as version {read_as}")
            return read_as
        self.problem(entry[1], f"unsupported version {version!r}; this cdcflow reads "
                               f"{', '.join(SUPPORTED_VERSIONS + V1_VERSIONS)} (and any 1.x or 2.x)")
        return None

    def entries(self, node: Node, what: str) -> list[tuple[str | None, Node]]:
        """The items of a list (version 2: each carries its ``id``), or of a mapping keyed by id
        (version 1); ``(id or None, node)`` each."""
        if self.v1 and isinstance(node, MappingNode):
            out = []
            for knode, vnode in node.value:
                key = self.text(knode, f"{what} id")
                if key:
                    out.append((key, vnode))
            return out
        return [(None, n) for n in self.sequence(node, what)]

    def _pipeline(self, node: Node, file_engine: EngineConfig, pid: str | None = None) -> PipelineConfig | None:
        fields = self.mapping(
            node,
            "pipeline",
            ("id", "status", "name", "description", "connectors", "processors", "dead-letter-queue", "engine"),
        )
        if fields is None:
            return None
        pid = pid or self.required_text(fields, "id", node, "pipeline")
        if pid is None:
            return None
        what = f"pipeline {pid!r}"
        p = PipelineConfig(id=pid, origin=self.origin(node))
        if "status" in fields:
            status = self.text(fields["status"][1], f"{what}.status")
            if status not in (None, "", "running", "stopped"):
                self.problem(fields["status"][1], f"{what}: status must be 'running' or 'stopped', got {status!r}")
            elif status:
                p.status = status
        for key, attr in (("name", "name"), ("description", "description")):
            if key in fields:
                value = self.text(fields[key][1], f"{what}.{key}")
                if value is not None:
                    setattr(p, attr, value)
        connector_ids: dict[str, Origin] = {}
        if "connectors" in fields:
            for cid, cnode in self.entries(fields["connectors"][1], f"{what}.connectors"):
                c = self._connector(cnode, what, cid)
                if c is None:
                    continue
                if c.id in connector_ids:
                    self.problem(cnode, f"{what}: duplicate connector id {c.id!r} (first defined at {connector_ids[c.id]})")
                    continue
                connector_ids[c.id] = c.origin  # type: ignore[assignment]
                p.connectors.append(c)
        if "processors" in fields:
            p.processors = self._processors(fields["processors"][1], what, "")
        if "dead-letter-queue" in fields:
            p.dead_letter_queue = self._dlq(fields["dead-letter-queue"][1], what)
        p.engine = _copy_engine(file_engine)
        if "engine" in fields:
            p.engine = self._engine(fields["engine"][1], p.engine, f"{what}.engine")
        return p

    def _connector(self, node: Node, owner: str, cid: str | None = None) -> ConnectorConfig | None:
        fields = self.mapping(node, f"{owner}: connector", ("id", "type", "plugin", "name", "settings", "processors"))
        if fields is None:
            return None
        cid = cid or self.required_text(fields, "id", node, f"{owner}: connector")
        if cid is None:
            return None
        what = f"{owner}: connector {cid!r}"
        ctype = self.required_text(fields, "type", node, what)
        plugin = self.required_text(fields, "plugin", node, what)
        if ctype is not None and ctype not in ("source", "destination"):
            self.problem(fields["type"][1], f"{what}: type must be 'source' or 'destination', got {ctype!r}")
            ctype = None
        if ctype is None or plugin is None:
            return None
        c = ConnectorConfig(id=cid, type=ctype, plugin=plugin, origin=self.origin(node))
        if "name" in fields:
            c.name = self.text(fields["name"][1], f"{what}.name") or ""
        if "settings" in fields:
            c.settings = self.string_map(fields["settings"][1], f"{what}: settings", c.setting_origins)
        if "processors" in fields:
            c.processors = self._processors(fields["processors"][1], what, cid)
        return c

    def _processors(self, node: Node, owner: str, parent: str) -> list[ProcessorConfig]:
        """One parent's processors (the pipeline's, ``parent`` "", or a connector's): ids are
        unique within the parent, as Conduit scopes them (``<parent>:<id>``)."""
        out = []
        seen: dict[str, Origin] = {}
        for pid, pnode in self.entries(node, f"{owner}: processors"):
            proc = self._processor(pnode, owner, pid)
            if proc is None:
                continue
            proc.parent = parent
            if proc.id in seen:
                self.problem(pnode, f"{owner}: duplicate processor id {proc.id!r} (first defined at {seen[proc.id]})")
                continue
            seen[proc.id] = proc.origin  # type: ignore[assignment]
            out.append(proc)
        return out

    def _processor(self, node: Node, owner: str, pid: str | None = None) -> ProcessorConfig | None:
        # ``type`` is the name Conduit used before 2.2 for what is now ``plugin``
        fields = self.mapping(node, f"{owner}: processor", ("id", "plugin", "type", "condition", "settings", "workers"))
        if fields is None:
            return None
        pid = pid or self.required_text(fields, "id", node, f"{owner}: processor")
        if pid is None:
            return None
        what = f"{owner}: processor {pid!r}"
        if "plugin" in fields and "type" in fields:
            self.problem(fields["type"][0], f"{what}: 'type' is the pre-2.2 name of 'plugin'; give only 'plugin'")
            return None
        plugin = self.required_text(fields, "type" if "type" in fields else "plugin", node, what)
        if plugin is None:
            return None
        proc = ProcessorConfig(id=pid, plugin=plugin, origin=self.origin(node))
        if "condition" in fields:
            cond = self.text(fields["condition"][1], f"{what}.condition")
            proc.condition = cond or None
        if "settings" in fields:
            proc.settings = self.string_map(fields["settings"][1], f"{what}: settings", proc.setting_origins)
        if "workers" in fields:
            workers = self.integer(fields["workers"][1], f"{what}: workers", 0)
            if workers is not None:
                proc.workers = max(workers, 1)  # Conduit treats 0 as the default, 1
        return proc

    def _dlq(self, node: Node, owner: str) -> DLQConfig:
        what = f"{owner}: dead-letter-queue"
        fields = self.mapping(node, what, ("plugin", "settings", "window-size", "window-nack-threshold"))
        dlq = DLQConfig(origin=self.origin(node))
        if not fields:
            return dlq
        if "plugin" in fields:
            plugin = self.text(fields["plugin"][1], f"{what}.plugin")
            if plugin:
                dlq.plugin = plugin
        if "settings" in fields:
            dlq.settings = self.string_map(fields["settings"][1], f"{what}: settings", dlq.setting_origins)
        if "window-size" in fields:
            size = self.integer(fields["window-size"][1], f"{what}: window-size", 0)
            if size is not None:
                dlq.window_size = size
        if "window-nack-threshold" in fields:
            threshold = self.integer(fields["window-nack-threshold"][1], f"{what}: window-nack-threshold", 0)
            if threshold is not None:
                dlq.window_nack_threshold = threshold
        # Like Conduit, a threshold >= window-size is accepted: the window never stops the pipeline.
        return dlq

    def _engine(self, node: Node, base: EngineConfig, what: str) -> EngineConfig:
        """cdcflow's own settings; a pipeline-level ``engine:`` overrides the file-level one key by key."""
        fields = self.mapping(node, what, tuple(_ENGINE_KEYS), strict=True)
        engine = _copy_engine(base)
        if not fields:
            return engine
        for key, (_, vnode) in fields.items():
            _ENGINE_KEYS[key](self, vnode, engine, f"{what}.{key}")
        return engine


def _engine_master(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    value = parser.text(node, what)
    if value:
        engine.master = value


def _engine_conf(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    engine.conf.update(parser.string_map(node, what))


def _engine_seconds(parser: _FileParser, node: Node, what: str) -> float | None:
    """A bare number of seconds or a Go duration (500ms, 2s); None after reporting a problem."""
    raw = parser.text(node, what)
    if raw is None:
        return None
    try:
        seconds = float(raw) if re.fullmatch(r"\s*\d+(\.\d*)?\s*", raw) else parse_duration(raw)
    except ValueError as e:
        parser.problem(node, f"{what}: {e}")
        return None
    if seconds < 0:
        parser.problem(node, f"{what} must not be negative, got {raw!r}")
        return None
    return seconds


def _engine_trigger_interval(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    seconds = _engine_seconds(parser, node, what)
    if seconds is not None:
        engine.trigger_interval = seconds


def _engine_micro_batch_duration(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    seconds = _engine_seconds(parser, node, what)
    if seconds is not None:
        engine.micro_batch_duration = seconds


def _engine_batch_size(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    value = parser.integer(node, what, 1)
    if value is not None:
        engine.batch_size = value


def _engine_state_dir(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    from ..errors import ConfigError
    from ..objectstore import is_object_uri, normal_uri

    value = parser.text(node, what)
    if value and is_object_uri(value):
        try:
            engine.state_dir = normal_uri(value)
        except ConfigError as e:
            parser.problem(node, f"{what}: {e}")
    elif value:
        # relative to the pipeline file, like every default cdcflow derives from it
        engine.state_dir = str(Path(parser.file_dir, os.path.expanduser(value)))


def _engine_state_options(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    from ..objectstore import check_options

    options = parser.string_map(node, what)
    for problem in check_options(options):
        parser.problem(node, f"{what}: {problem}")
    engine.state_options.update(options)


def _engine_state_lease(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    seconds = _engine_seconds(parser, node, what)
    if seconds is not None and seconds < 3:
        parser.problem(node, f"{what} must be at least 3s (renewed every third of it), got {seconds:g}s")
    elif seconds is not None:
        engine.state_lease = seconds


def _engine_max_retries(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    value = parser.integer(node, what, -1)
    if value is not None:
        engine.retry_max_retries = value


def _engine_retry_seconds(attr: str) -> Callable[[_FileParser, Node, EngineConfig, str], None]:
    def parse(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
        seconds = _engine_seconds(parser, node, what)
        if seconds is not None:
            setattr(engine, attr, seconds)

    return parse


def _engine_backoff_factor(parser: _FileParser, node: Node, engine: EngineConfig, what: str) -> None:
    raw = parser.text(node, what)
    if raw is None:
        return
    try:
        value = float(raw)
    except ValueError:
        parser.problem(node, f"{what} must be a number, got {raw!r}")
        return
    if not value >= 1:
        parser.problem(node, f"{what} must be >= 1, got {raw!r}")
        return
    engine.retry_backoff_factor = value


_ENGINE_KEYS: dict[str, Callable[[_FileParser, Node, EngineConfig, str], None]] = {
    "master": _engine_master,
    "conf": _engine_conf,
    "trigger-interval": _engine_trigger_interval,
    "micro-batch-duration": _engine_micro_batch_duration,
    "batch-size": _engine_batch_size,
    "state-dir": _engine_state_dir,
    "state-options": _engine_state_options,
    "state-lease": _engine_state_lease,
    # Conduit's pipelines.error-recovery.* names; max-elapsed is Kafka Connect's errors.retry.timeout
    "error-recovery.max-retries": _engine_max_retries,
    "error-recovery.min-delay": _engine_retry_seconds("retry_min_delay"),
    "error-recovery.max-delay": _engine_retry_seconds("retry_max_delay"),
    "error-recovery.backoff-factor": _engine_backoff_factor,
    "error-recovery.max-elapsed": _engine_retry_seconds("retry_max_elapsed"),
}


def _copy_engine(e: EngineConfig) -> EngineConfig:
    return dataclasses.replace(e, conf=dict(e.conf), state_options=dict(e.state_options))


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _TAG_NULL


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node.tag == _TAG_NULL:
        return "null"
    return f"the value {node.value!r}"
