"""``field.exclude``: remove fields from each record (Conduit's processor)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result, Transform

from .base import apply_each, compile_ref, plugin_name


def split_references(text: str) -> list[str]:
    """Split a comma-separated list of references, keeping commas inside ["..."] brackets."""
    parts, current, quote = [], [], ""
    escaped = False
    for ch in text:
        if quote:
            current.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        if ch == ",":
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


class FieldExclude(Transform):
    """Removes every listed field; nested data below a removed field goes with it."""

    name = "field.exclude"
    version = "v0.1.0"
    summary = "Remove a subset of fields from the record."
    description = (
        "Removes the fields listed in `fields` (comma-separated field references). Removing .Metadata leaves "
        "an empty map, removing .Payload clears Before and After. .Position and .Operation cannot be removed."
    )
    author = "cdcflow"
    parameters = {
        "fields": Parameter(
            ParamType.STRING, required=True,
            description="Comma-separated field references, e.g. .Metadata,.Payload.After.foo,.Key.key1.",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        refs = []
        for text in split_references(config["fields"]):
            ref = compile_ref(self, "fields", text)
            if ref.root in ("Position", "Operation"):
                raise ConfigError(plugin, "fields", "exclusion", "it is not allowed to exclude .Position or .Operation")
            refs.append(ref)
        if not refs:
            raise ConfigError(plugin, "fields", "required", "at least one field reference is required")
        self._refs = refs
        self._deleters = [r.delete for r in refs]

    def process(self, records: Sequence[Record]) -> list[Result]:
        return apply_each(records, self._deleters)

#: record attribute holding the data below each reference root
DATA_ATTRIBUTES = {"Key": "key", "Payload.Before": "before", "Payload.After": "after"}
