"""Conduit field references (``.Payload.After.name``) compiled into accessors.

A reference is parsed once (``FieldRef.compile``) into a ``FieldRef`` whose
``get``/``set``/``delete`` work on a ``Record`` without re-parsing. Grammar (Conduit's):

    .Position | .Operation | .Metadata[.KEY] | .Key[PATH] | .Payload[.Before[PATH] | .After[PATH]]
    PATH := ( .IDENT | ["any text"] )*

Dot notation takes letters, digits and ``_``; anything else uses brackets with a
double- or single-quoted string (``.Metadata["opencdc.collection"]``,
``.Payload.After["first name"]``). Metadata is flat: one key below ``.Metadata``.

Semantics follow Conduit's processors: reading a missing field gives None; setting a
nested field creates the maps on the way (``.Payload.After.foo`` on a record whose
``After`` is null makes ``{"foo": ...}``); setting a field inside raw (bytes) data is
an error; deleting a missing field does nothing; ``.Metadata`` deleted becomes ``{}``,
``.Payload`` deleted clears ``Before`` and ``After``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from cdcflow.errors import CdcflowError
from cdcflow.expr import to_text
from cdcflow.record import Operation, Record

__all__ = ["FieldRef", "FieldRefError", "PathError"]


class FieldRefError(CdcflowError):
    """A reference cannot be parsed, or cannot be applied to a record."""

    def __init__(self, reference: str, message: str):
        self.reference = reference
        super().__init__(f"field {reference!r}: {message}")


PathError = FieldRefError

_TOKEN = re.compile(r"""\.([A-Za-z0-9_]+)|\[\s*"((?:[^"\\]|\\.)*)"\s*\]|\[\s*'((?:[^'\\]|\\.)*)'\s*\]""")
_ROOTS = ("Position", "Operation", "Metadata", "Key", "Payload")
_ESCAPE = re.compile(r"\\(.)")


def _parse(reference: str) -> list[str]:
    text = reference.strip()
    if not text.startswith("."):
        raise FieldRefError(reference, "a reference starts with '.' (e.g. .Payload.After.name)")
    parts: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FieldRefError(reference, f"unexpected text at column {pos + 1}: {text[pos:]!r}")
        if m.group(1) is not None:
            parts.append(m.group(1))
        else:
            quoted = m.group(2) if m.group(2) is not None else m.group(3)
            parts.append(_ESCAPE.sub(r"\1", quoted))
        pos = m.end()
    return parts


class FieldRef:
    """One compiled reference; ``get``, ``set`` and ``delete`` act on a record."""

    __slots__ = ("reference", "root", "path", "get", "set", "delete")

    def __init__(self, reference: str, root: str, path: tuple[str, ...]):
        self.reference = reference
        self.root = root  # "Position", "Operation", "Metadata", "Key", "Payload", "Payload.Before", "Payload.After"
        self.path = path  # keys below the root
        self.get: Callable[[Record], Any]
        self.set: Callable[[Record, Any], None]
        self.delete: Callable[[Record], None]
        _bind(self)

    @classmethod
    def compile(cls, reference: str) -> "FieldRef":
        parts = _parse(reference)
        root = parts[0]
        if root not in _ROOTS:
            raise FieldRefError(reference, f"unknown record field {root!r} (expected one of {', '.join(_ROOTS)})")
        rest = parts[1:]
        if root in ("Position", "Operation") and rest:
            raise FieldRefError(reference, f".{root} has no fields")
        if root == "Metadata" and len(rest) > 1:
            raise FieldRefError(reference, "metadata is flat: use .Metadata.KEY or .Metadata[\"KEY\"]")
        if root == "Payload":
            if rest:
                if rest[0] not in ("Before", "After"):
                    raise FieldRefError(reference, f"unknown payload field {rest[0]!r} (expected Before or After)")
                root, rest = f"Payload.{rest[0]}", rest[1:]
        return cls(reference, root, tuple(rest))

    def __repr__(self) -> str:
        return f"FieldRef({self.reference!r})"


# -- binding ---------------------------------------------------------------------

_DATA_ATTR = {"Key": "key", "Payload.Before": "before", "Payload.After": "after"}


def _bind(ref: FieldRef) -> None:
    root, path, name = ref.root, ref.path, ref.reference

    if root == "Position":
        ref.get = lambda r: r.position

        def set_position(r: Record, value: Any) -> None:
            r.position = value if isinstance(value, bytes) else str(value).encode("utf-8")

        ref.set = set_position
        ref.delete = _refuse(name, "the position cannot be deleted")
        return

    if root == "Operation":
        ref.get = lambda r: r.operation.text

        def set_operation(r: Record, value: Any) -> None:
            if isinstance(value, Operation):
                r.operation = value
                return
            try:
                r.operation = Operation.from_text(str(value))
            except ValueError as e:
                raise FieldRefError(name, str(e)) from None

        ref.set = set_operation
        ref.delete = _refuse(name, "the operation cannot be deleted")
        return

    if root == "Metadata":
        if not path:
            ref.get = lambda r: r.metadata

            def set_metadata(r: Record, value: Any) -> None:
                if not isinstance(value, dict):
                    raise FieldRefError(name, f"metadata must be a map of strings, got {type(value).__name__}")
                r.metadata = {str(k): _meta_text(v) for k, v in value.items()}

            def delete_metadata(r: Record) -> None:
                r.metadata = {}

            ref.set, ref.delete = set_metadata, delete_metadata
            return
        key = path[0]
        ref.get = lambda r: r.metadata.get(key)

        def set_meta_key(r: Record, value: Any) -> None:
            r.metadata[key] = _meta_text(value)

        def delete_meta_key(r: Record) -> None:
            r.metadata.pop(key, None)

        ref.set, ref.delete = set_meta_key, delete_meta_key
        return

    if root == "Payload":
        ref.get = lambda r: {"before": r.before, "after": r.after}

        def delete_payload(r: Record) -> None:
            r.before = None
            r.after = None

        ref.set = _refuse(name, "set .Payload.Before or .Payload.After instead of .Payload")
        ref.delete = delete_payload
        return

    attr = _DATA_ATTR[root]
    if not path:
        ref.get = lambda r: getattr(r, attr)

        def set_whole(r: Record, value: Any) -> None:
            # Conduit: a string becomes raw data; a map becomes structured data
            if isinstance(value, str):
                value = value.encode("utf-8")
            elif value is not None and not isinstance(value, (bytes, dict)):
                raise FieldRefError(name, f"must be a map, raw bytes or a string, got {type(value).__name__}")
            setattr(r, attr, value)

        def delete_whole(r: Record) -> None:
            setattr(r, attr, None)

        ref.set, ref.delete = set_whole, delete_whole
        return

    parents, leaf = path[:-1], path[-1]

    def get_nested(r: Record) -> Any:
        node = getattr(r, attr)
        for k in path:
            if not isinstance(node, dict):
                return None
            node = node.get(k)
        return node

    def set_nested(r: Record, value: Any) -> None:
        node = getattr(r, attr)
        if node is None:
            node = {}
            setattr(r, attr, node)
        elif not isinstance(node, dict):
            raise FieldRefError(name, f"{root} is raw data; decode it into structured data first")
        for k in parents:
            child = node.get(k)
            if child is None:
                child = node[k] = {}
            elif not isinstance(child, dict):
                raise FieldRefError(name, f"{k!r} holds a {type(child).__name__}, not a map")
            node = child
        node[leaf] = value

    def delete_nested(r: Record) -> None:
        node = getattr(r, attr)
        if node is None:
            return
        if not isinstance(node, dict):
            raise FieldRefError(name, f"{root} is raw data; decode it into structured data first")
        for k in parents:
            node = node.get(k)
            if not isinstance(node, dict):
                return
        node.pop(leaf, None)

    ref.get, ref.set, ref.delete = get_nested, set_nested, delete_nested


def _meta_text(value: Any) -> str:
    return value if isinstance(value, str) else to_text(value)


def _refuse(reference: str, message: str) -> Callable[..., None]:
    def refuse(*_: Any) -> None:
        raise FieldRefError(reference, message)

    return refuse
