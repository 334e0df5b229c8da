"""Fusing consecutive processors into one generated loop over a batch.

Separate batch loops pay the interpreter's loop and call overhead once per
processor per record; a fused run visits each record once and executes every
processor's step inline. A transform opts in with ``fused_step()`` returning a
``FusedStep``: a few Python statements over the record variable ``r``, written by
the transform's author (never derived from pipeline text), whose names start with
``$`` (made unique per processor) and whose values are passed as ``bindings``.
``$drop`` drops the record. Conditions are inlined from the expression compiler
(``Expression.inline``), which emits only bound names.

A raise inside a step nacks that record; which processor (and whether its
condition or its step) failed is read from the line the exception passed through in
the generated function, so the happy path carries no bookkeeping.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..expr import Condition

__all__ = ["FusedStep", "FusedRun", "step_of"]

_PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_INDENT = "    "
#: the only builtins generated code sees (step code may use them by name)
_BUILTINS = {"Exception": Exception, "type": type, "dict": dict, "str": str, "len": len, }
#: what ``$drop`` becomes: remember the index of the dropped record (only dropped records pay)
_DROP = "drops.append(_len(out) + _len(drops) + _len(failures)); continue"


@dataclass(frozen=True)
class FusedStep:
    """One processor's per-record work for a fused loop.

    ``code``: statements over ``r`` (the record, changed in place); ``$name`` for
    every name it binds or assigns (``type``, ``dict``, ``str``, ``len`` are
    available as is); ``$drop`` to drop the record. ``bindings``: the
    values of the ``$`` names that are not assigned in ``code``. ``message`` turns an
    exception raised by the step into the nack message.
    """

    code: str
    bindings: dict[str, Any] = field(default_factory=dict)
    message: Callable[[BaseException], str] = lambda e: str(e) or type(e).__name__


def step_of(transform: Any) -> FusedStep | None:
    """The transform's fused step, or None when it must run through its ``process``.

    A subclass that overrides ``process`` or ``process_record`` below the class that
    defines ``fused_step`` is not fused, so its override is what runs.
    """
    make = getattr(transform, "fused_step", None)
    if make is None:
        return None
    mro = type(transform).__mro__
    owner = mro.index(next(c for c in mro if "fused_step" in c.__dict__))
    for method in ("process", "process_record"):
        definer = next((c for c in mro if method in c.__dict__), None)
        if definer is not None and mro.index(definer) < owner:
            return None
    return make()


@dataclass
class _Stage:
    node_index: int
    condition: bool


class FusedRun:
    """Consecutive fusable processors compiled into one function.

    ``run(batch)`` returns ``(kept, dropped_indexes, failures)`` where failures are
    ``(index, node_index, message)`` tuples, indexes into ``batch``.
    """

    def __init__(self, ids: Sequence[str], steps: Sequence[FusedStep], conditions: Sequence[Condition | None]):
        self.ids = list(ids)
        self._steps = list(steps)
        self._conditions = list(conditions)
        lines: list[tuple[str, _Stage]] = []  # statements of the try body, with what they belong to
        bindings: dict[str, Any] = {"_len": len, **_BUILTINS}
        for k, (step, cond) in enumerate(zip(steps, conditions)):
            prefix = f"_p{k}_"
            bindings.update({prefix + name: value for name, value in step.bindings.items()})
            guard, after = self._condition_lines(k, cond, bindings)
            lines.extend((text, _Stage(k, True)) for text in guard)
            indent = _INDENT if guard else ""
            body = [line for line in _substitute(step.code, prefix).splitlines() if line.strip()] or ["pass"]
            lines.extend((indent + text, _Stage(k, False)) for text in body)
            lines.extend((text, _Stage(k, True)) for text in after)
        source = [
            # every bound value is a keyword default, so the loop reads it as a fast local
            f"def fused(records, out, drops, failures, *, {', '.join(f'{n}={n}' for n in bindings)}):",
            "    append = out.append",
            "    for r in records:",
            "        try:",
            *("            " + text for text, _ in lines),
            "        except Exception as e:",
            "            failures.append((_len(out) + _len(drops) + _len(failures), e))",
            "            continue",
            "        append(r)",
        ]
        self._first_line = 5  # line number of the first statement of the try body
        self._stages = [stage for _, stage in lines]
        self.source = "\n".join(source).replace("$drop", _DROP)
        namespace: dict[str, Any] = {"__builtins__": {}, **bindings}
        exec(compile(self.source, f"<cdcflow fused {'+'.join(self.ids)}>", "exec"), namespace)  # noqa: S102
        self._fn = namespace["fused"]

    @staticmethod
    def _condition_lines(k: int, cond: Condition | None, bindings: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Lines before the step (the test) and after it (the non-bool check) for processor ``k``."""
        if cond is None:
            return [], []
        inline = cond.expression.inline(f"_c{k}_", "r")
        if inline is None:  # syntax only the interpreter runs: one call per record, which also checks the bool
            bindings[f"_c{k}_eval"] = cond.evaluate
            return [f"if _c{k}_eval(r):"], []
        bindings.update(inline.bindings)
        if inline.always_bool:
            return [f"if {inline.source}:"], []
        bindings[f"_c{k}_notbool"] = cond.not_bool
        return (
            [f"_c{k}_v = {inline.source}", f"if _c{k}_v is True:"],
            [f"elif _c{k}_v is not False:", f"{_INDENT}raise _c{k}_notbool(_c{k}_v)"],
        )

    def run(self, batch: list[Any]) -> tuple[list[Any], list[int], list[tuple[int, int, str]]]:
        out: list[Any] = []
        drops: list[int] = []
        raised: list[tuple[int, BaseException]] = []
        self._fn(batch, out, drops, raised)
        failures = [(index, *self._describe(e)) for index, e in raised]
        return out, drops, failures

    def _describe(self, e: BaseException) -> tuple[int, str]:
        tb = e.__traceback__
        line = tb.tb_lineno if tb is not None else 0
        stage = self._stages[line - self._first_line] if 0 <= line - self._first_line < len(self._stages) else None
        if stage is None:  # not expected: report it against the first processor
            return 0, str(e) or type(e).__name__
        if stage.condition:
            cond = self._conditions[stage.node_index]
            return stage.node_index, f"condition: {cond.expression.error(e)}"  # type: ignore[union-attr]
        return stage.node_index, self._steps[stage.node_index].message(e)


def _substitute(code: str, prefix: str) -> str:
    return _PLACEHOLDER.sub(lambda m: "$drop" if m.group(1) == "drop" else prefix + m.group(1), textwrap.dedent(code))
