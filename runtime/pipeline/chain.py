"""The transform chain: a pipeline's (or a connector's) processors run over a batch.

The engine builds one ``Chain`` per processor list inside each Spark task (or
reuses one per executor process) and calls ``process`` once per batch. Each
processor sees the whole surviving batch through its batch ``process`` method (the
one implementation of every transform). A condition is evaluated over the batch in
one call (``Condition.evaluate_many``) and only the matching sub-batch is processed.
Batches where every record comes back as one record take the result list as is.

Semantics (Conduit's):
- a processor with a ``condition`` only receives the records for which it is true;
  the others pass it by unchanged and keep their place;
- ``FILTERED`` drops a record (it counts as acknowledged);
- ``Failed``, a raise for one record, or a condition that fails for one record
  nacks only that record, naming the processor; the rest of the batch goes on;
- an ``InfrastructureError`` (an outage, never the record's fault) is not a nack: it
  leaves ``process`` with ``processor_id`` set, and the engine fails the batch;
- a transform returning several records (a split) puts them where the input was.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import compress
from operator import not_
from typing import Any, Mapping, Sequence

from ..errors import CdcflowError, ConfigError, InfrastructureError
from ..expr import Condition, ExpressionError
from ..record import Record
from ..sdk import Failed, Filtered, Transform
from .model import ProcessorConfig

log = logging.getLogger(__name__)

__all__ = ["Chain", "ChainResult", "Nack", "ProcessorSetupError", "build_chain", "validate_processor"]


@dataclass(slots=True)
class Nack:
    """A record a processor rejected: it goes to the DLQ with ``error`` and ``node_id``."""

    record: Record
    node_id: str
    error: str


@dataclass(slots=True)
class ChainResult:
    """Output of one batch: surviving records in input order, nacks in input order."""

    records: list[Record]
    nacks: list[Nack] = field(default_factory=list)
    filtered: int = 0  # input records dropped on purpose (FILTERED or an empty split)


class ProcessorSetupError(ConfigError):
    """A processor could not be built: unknown plugin, bad setting, bad condition, failing open."""

    def __init__(self, processor: ProcessorConfig, rule: str, message: str, parameter: str | None = None):
        self.processor_id = processor.id
        self.origin = processor.origin
        where = f"{processor.origin}: " if processor.origin else ""
        super().__init__(f"{where}processor {processor.id!r} ({processor.plugin})", parameter, rule, message)


class _Node:
    __slots__ = ("id", "transform", "condition")

    def __init__(self, node_id: str, transform: Transform, condition: Condition | None):
        self.id = node_id
        self.transform = transform
        self.condition = condition


def _message(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


class Chain:
    """Processors applied in order to batches. An empty chain returns its input as is."""

    def __init__(self, nodes: list[_Node]):
        self._nodes = nodes
        self._torn_down = False

    @property
    def node_ids(self) -> list[str]:
        return [n.id for n in self._nodes]

    def __len__(self) -> int:
        return len(self._nodes)

    def process(self, records: Sequence[Record]) -> ChainResult:
        batch = records if isinstance(records, list) else list(records)
        if not self._nodes:
            return ChainResult(batch)
        # origin[i] is the input index batch[i] came from: nacks are reported in input order
        origin: Sequence[int] = range(len(batch))
        nacks: list[tuple[int, Nack]] = []
        filtered = 0
        for node in self._nodes:
            if not batch:
                break
            batch, origin, dropped = self._apply(node, batch, origin, nacks)
            filtered += dropped
        nacks.sort(key=lambda item: item[0])
        return ChainResult(batch, [n for _, n in nacks], filtered)

    def _apply(
        self, node: _Node, batch: list[Record], origin: Sequence[int], nacks: list[tuple[int, Nack]]
    ) -> tuple[list[Record], Sequence[int], int]:
        cond = node.condition
        if cond is None:
            return _splice_all(node, batch, origin, self._run(node, batch), nacks)
        mask = cond.evaluate_many(batch)
        selected_count = mask.count(True)
        if selected_count + mask.count(False) != len(mask):
            # some records failed the condition: nack them, go on with the others
            keep = [type(m) is bool for m in mask]
            for i, m in enumerate(mask):
                if type(m) is not bool:
                    nacks.append((origin[i], Nack(batch[i], node.id, f"condition: {m}")))
            batch, origin, mask = list(compress(batch, keep)), list(compress(origin, keep)), list(compress(mask, keep))
        if selected_count == 0:
            return batch, origin, 0
        if selected_count == len(batch):
            return _splice_all(node, batch, origin, self._run(node, batch), nacks)
        selected = list(compress(batch, mask))
        results = self._run(node, selected)
        kinds = set(map(type, results))
        if kinds == _ALL_FILTERED:
            keep = list(map(not_, mask))
            return list(compress(batch, keep)), list(compress(origin, keep)), selected_count
        if kinds == _ALL_RECORDS:
            replaced = iter(results)
            return [next(replaced) if m else r for r, m in zip(batch, mask)], origin, 0
        out: list[Record] = []
        out_origin: list[int] = []
        dropped = 0
        k = 0
        for i, r in enumerate(batch):
            if not mask[i]:
                out.append(r)
                out_origin.append(origin[i])
                continue
            dropped += _merge(node, r, origin[i], results[k], out, out_origin, nacks)
            k += 1
        return out, out_origin, dropped

    @staticmethod
    def _run(node: _Node, selected: list[Record]) -> list[Any]:
        transform = node.transform
        try:
            results = transform.process(selected)
        except InfrastructureError as e:
            # an outage is no record's fault: it fails the batch (the engine retries it), naming the processor
            if not getattr(e, "processor_id", None):
                e.processor_id = node.id  # type: ignore[attr-defined]
            raise
        except Exception as e:  # noqa: BLE001
            # A batch-level raise cannot say which record failed: run the records one
            # by one so only the failing ones are nacked.
            log.debug("processor %s failed a batch of %d (%s); retrying record by record", node.id, len(selected), e)
            results = []
            for r in selected:
                try:
                    one = transform.process([r])
                    results.append(one[0] if len(one) == 1 else Failed(f"returned {len(one)} results for 1 record"))
                except InfrastructureError as e1:
                    e1.processor_id = node.id  # type: ignore[attr-defined]
                    raise
                except Exception as e1:  # noqa: BLE001
                    results.append(Failed(_message(e1)))
            return results
        if len(results) != len(selected):
            message = f"processor returned {len(results)} results for {len(selected)} records (plugin bug)"
            return [Failed(message)] * len(selected)
        return results

    def teardown(self) -> None:
        """Tear every processor down once; failures are logged, never raised (runs in ``finally``)."""
        if self._torn_down:
            return
        self._torn_down = True
        for node in self._nodes:
            try:
                node.transform.teardown()
            except Exception as e:  # noqa: BLE001
                log.warning("processor %s: teardown failed: %s", node.id, _message(e))

    def __enter__(self) -> "Chain":
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()


_ALL_RECORDS = {Record}
_ALL_FILTERED = {Filtered}


def _splice_all(
    node: _Node, batch: list[Record], origin: Sequence[int], results: list[Any], nacks: list[tuple[int, Nack]]
) -> tuple[list[Record], Sequence[int], int]:
    """Next batch from one result per record of ``batch``; the common outcomes cost no Python loop."""
    kinds = set(map(type, results))
    if kinds == _ALL_RECORDS:
        return results if type(results) is list else list(results), origin, 0
    if kinds == _ALL_FILTERED:
        return [], [], len(batch)
    out: list[Record] = []
    out_origin: list[int] = []
    dropped = 0
    for i, res in enumerate(results):
        dropped += _merge(node, batch[i], origin[i], res, out, out_origin, nacks)
    return out, out_origin, dropped


def _merge(
    node: _Node,
    record: Record,
    at: int,
    result: Any,
    out: list[Record],
    out_origin: list[int],
    nacks: list[tuple[int, Nack]],
) -> int:
    """Append one processor result to the next batch; return 1 if the record was dropped."""
    if type(result) is Record:
        out.append(result)
        out_origin.append(at)
        return 0
    if isinstance(result, Filtered):
        return 1
    if isinstance(result, Failed):
        nacks.append((at, Nack(record, node.id, result.message)))
        return 0
    if isinstance(result, list):
        if not result:
            return 1
        for item in result:
            if not isinstance(item, Record):
                nacks.append((at, Nack(record, node.id, f"processor returned a {type(item).__name__} in a split")))
                return 0
        out.extend(result)
        out_origin.extend([at] * len(result))
        return 0
    if isinstance(result, Record):
        out.append(result)
        out_origin.append(at)
        return 0
    nacks.append((at, Nack(record, node.id, f"processor returned {type(result).__name__}, not a record")))
    return 0


def connector_settings(config: Mapping[str, Any], info: Any) -> Mapping[str, Any]:
    from ..engine.middleware import connector_settings as without_sdk

    return without_sdk(config, info)


def validate_processor(pc: ProcessorConfig, registry: Any) -> Mapping[str, Any]:
    """``pc``'s settings typed and checked against its plugin's spec; ``ProcessorSetupError`` otherwise.

    The engine calls it once per run on the driver (``RunContext.prepare``) and hands the result
    to every worker's ``build_chain``."""
    try:
        info = registry.transform(pc.plugin)
    except CdcflowError as e:
        raise ProcessorSetupError(pc, "plugin", _message(e)) from e
    try:
        return info.validate("transform", pc.settings, plugin_id=pc.id)
    except ConfigError as e:
        raise ProcessorSetupError(pc, e.rule, _message(e), e.parameter) from e


def build_chain(processors: Sequence[ProcessorConfig], registry: Any,
                validated: Mapping[str, Mapping[str, Any]] | None = None) -> Chain:
    """Instantiate, configure and open each processor; compile conditions once.

    ``registry`` is a ``cdcflow.registry.Registry`` (anything with ``transform(ref)``
    returning a ``PluginInfo``). ``validated`` maps ``ProcessorConfig.node_id`` → settings already checked
    by ``validate_processor`` (the engine's run context); a processor not in it is validated
    here. Raises ``ProcessorSetupError`` (a ConfigError) naming the processor and its
    file:line; processors already opened are torn down first.
    """
    nodes: list[_Node] = []
    try:
        for pc in processors:
            config = validated.get(pc.node_id) if validated is not None else None
            nodes.append(_build_node(pc, registry, config))
    except BaseException:
        Chain(nodes).teardown()
        raise
    return Chain(nodes)


def _build_node(pc: ProcessorConfig, registry: Any, config: Mapping[str, Any] | None) -> _Node:
    if config is None:
        config = validate_processor(pc, registry)
    try:
        info = registry.transform(pc.plugin)
    except CdcflowError as e:
        raise ProcessorSetupError(pc, "plugin", _message(e)) from e
    condition = None
    if pc.condition:
        try:
            condition = Condition.compile(pc.condition)
        except ExpressionError as e:
            raise ProcessorSetupError(pc, "condition", _message(e)) from e
    transform = info.new_transform()
    transform.id = pc.id
    try:
        transform.configure(connector_settings(config, info))  # without the sdk.* settings
    except ConfigError as e:
        _quiet_teardown(transform)
        raise ProcessorSetupError(pc, e.rule, _message(e), e.parameter) from e
    except Exception as e:  # noqa: BLE001
        _quiet_teardown(transform)
        raise ProcessorSetupError(pc, "configure", _message(e)) from e
    try:
        transform.open()
    except Exception as e:  # noqa: BLE001
        _quiet_teardown(transform)
        raise ProcessorSetupError(pc, "open", _message(e)) from e
    return _Node(pc.id, transform, condition)


def _quiet_teardown(transform: Transform) -> None:
    try:
        transform.teardown()
    except Exception as e:  # noqa: BLE001
        log.warning("processor %s: teardown failed: %s", transform.id, _message(e))
