"""``field.rename``: rename fields of each record (Conduit's processor)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import Record
from cdcflow.sdk import Result, Transform

from .base import apply_each, compile_ref, plugin_name
from .field_exclude import DATA_ATTRIBUTES, split_references
from .paths import FieldRef

_TOP_LEVEL = {"Position", "Operation", "Key", "Metadata", "Payload", "Payload.Before", "Payload.After"}


def _renamer(ref: FieldRef, new_name: str) -> Callable[[Record], None]:
    """One rename as a closure over the parent path, so a record costs a few dict operations.

    A missing field is left alone; an existing field named ``new_name`` is replaced.
    Renaming inside raw data is an error for that record.
    """
    old = ref.path[-1]
    parents = ref.path[:-1]
    if ref.root == "Metadata":

        def rename_metadata(r: Record) -> None:
            md = r.metadata
            if old in md:
                md[new_name] = md.pop(old)

        return rename_metadata
    attr = DATA_ATTRIBUTES[ref.root]
    reference = ref.reference

    def rename(r: Record) -> None:
        node = getattr(r, attr)
        if node is None:
            return
        if type(node) is not dict:
            raise ValueError(f"field {reference!r}: {ref.root} is raw data; decode it into structured data first")
        for k in parents:
            node = node.get(k)
            if type(node) is not dict:
                return
        if old in node:
            node[new_name] = node.pop(old)

    return rename


class FieldRename(Transform):
    """Renames fields below .Metadata, .Key or .Payload; the value and its place in the record stay."""

    name = "field.rename"
    version = "v0.1.0"
    summary = "Rename a group of fields."
    description = (
        "Renames fields listed in `mapping` (`reference:newName` pairs, comma-separated, e.g. "
        "`.Metadata.key1:newKey,.Payload.After.foo:newFoo`). Top-level fields (.Position, .Operation, .Key, "
        ".Metadata, .Payload.Before, .Payload.After) cannot be renamed. Missing fields are left alone."
    )
    author = "cdcflow"
    parameters = {
        "mapping": Parameter(
            ParamType.STRING, required=True,
            description="Comma-separated reference:newName pairs, e.g. .Metadata.key:id,.Payload.After.foo:bar.",
        ),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        renames = []
        self._pairs: list[tuple[FieldRef, str]] = []
        for entry in split_references(config["mapping"]):
            reference, sep, new_name = entry.rpartition(":")
            if not sep or not reference.strip():
                raise ConfigError(
                    plugin, "mapping", "format",
                    f"entry {entry!r} is not reference:newName (e.g. .Payload.After.foo:bar)",
                )
            new_name = new_name.strip()
            ref = compile_ref(self, "mapping", reference.strip())
            if not ref.path or ref.root in ("Position", "Operation"):
                raise ConfigError(plugin, "mapping", "top-level",
                                  f"cannot rename the top-level field {ref.reference!r}")
            if not new_name:
                raise ConfigError(plugin, "mapping", "format", f"cannot rename {ref.reference!r} to an empty name")
            renames.append(_renamer(ref, new_name))
            self._pairs.append((ref, new_name))
        if not renames:
            raise ConfigError(plugin, "mapping", "required", "at least one reference:newName pair is required")
        self._renames = renames

    def process(self, records: Sequence[Record]) -> list[Result]:
        return apply_each(records, self._renames)
