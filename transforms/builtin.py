"""Registers cdcflow's built-in transforms (entry point ``builtin-transforms``)."""

from __future__ import annotations

from cdcflow.hookspecs import hookimpl
from cdcflow.sdk import Transform

from .field_exclude import FieldExclude
from .field_set import FieldSet
from .filter import Filter

BUILTIN_TRANSFORMS: list[type[Transform]] = [FieldSet, FieldExclude, Filter]


@hookimpl
def cdcflow_transforms() -> list[type[Transform]]:
    return list(BUILTIN_TRANSFORMS)
