"""``cdc.route``: give records of matching tables a new collection name.

The common use is merging sharded tables (``shop_*.orders_*`` → ``shop.orders``)
or renaming schemas on the way to another system. Only ``opencdc.collection``
changes: ``ticdc.schema`` / ``ticdc.table`` keep naming the source table, so
``cdc.dedup`` after a route still tells the shards apart.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.params import Parameter, ParamType
from cdcflow.record import META_COLLECTION, Record
from cdcflow.sdk import Result, Transform

from .base import plugin_name
from .patterns import compile_pattern, split_list

_PLACEHOLDER = re.compile(r"\{(schema|table|collection)\}")
_CACHE_LIMIT = 65536


class _Route:
    __slots__ = ("pattern", "target", "regex")

    def __init__(self, pattern: re.Pattern[str], target: str, regex: bool):
        self.pattern, self.target, self.regex = pattern, target, regex

    def apply(self, collection: str) -> str | None:
        m = self.pattern.fullmatch(collection)
        if m is None:
            return None
        schema, dot, table = collection.partition(".")
        values = {"schema": schema, "table": table if dot else "", "collection": collection}
        target = _PLACEHOLDER.sub(lambda p: values[p.group(1)], self.target)
        return m.expand(target) if self.regex else target


_BACKREF = re.compile(r"\\(\d+)|\\g<([^>]*)>")


def _check_groups(pattern: re.Pattern[str], target: str, plugin: str) -> None:
    """A target naming a group its pattern lacks fails at configuration, not on the first record."""
    for m in _BACKREF.finditer(target):
        ref = m.group(1) if m.group(1) is not None else m.group(2)
        ok = int(ref) <= pattern.groups if ref.isdigit() else ref in pattern.groupindex
        if not ok:
            raise ConfigError(plugin, "routes", "pattern",
                              f"target {target!r} uses group {ref!r}, which {pattern.pattern!r} does not have")


class CdcRoute(Transform):
    name = "cdc.route"
    version = "v0.1.0"
    summary = "Route tables to new collection names (merge shards, rename schemas)."
    description = (
        "Sets `opencdc.collection` of records whose collection (`schema.table`) matches a pattern of `routes` "
        "to that route's target. Routes are `pattern:target` entries separated by commas or newlines; the "
        "first matching route wins; unmatched records keep their collection. Patterns are globs (or regular "
        "expressions with `regex: true`, whose groups the target may use as \\1 or \\g<name>). Targets may "
        "use {schema}, {table} and {collection}. DDL records are routed too; resolved records have no "
        "collection and pass."
    )
    author = "cdcflow"
    parameters = {
        "routes": Parameter(
            ParamType.STRING, required=True,
            description="pattern:target entries, e.g. shop_*.orders_*:shop.orders, legacy.*:archive.{table}.",
        ),
        "regex": Parameter(ParamType.BOOL, default="false", description="Patterns are regular expressions, not globs."),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        regex = bool(config["regex"])
        routes = []
        for entry in split_list(config["routes"]):
            pattern, sep, target = entry.rpartition(":")
            if not sep or not pattern.strip() or not target.strip():
                raise ConfigError(plugin, "routes", "format", f"entry {entry!r} is not pattern:target")
            compiled = compile_pattern(pattern.strip(), regex, plugin, "routes")
            route = _Route(compiled, target.strip(), regex)
            if regex:
                _check_groups(compiled, route.target, plugin)
            routes.append(route)
        if not routes:
            raise ConfigError(plugin, "routes", "required", "at least one pattern:target route is required")
        self._routes = routes
        self._cache: dict[str, str | None] = {}

    def _target(self, collection: str) -> str | None:
        for route in self._routes:
            target = route.apply(collection)
            if target is not None:
                return target if target != collection else None
        return None

    def process(self, records: Sequence[Record]) -> list[Result]:
        cache = self._cache
        for r in records:
            md = r.metadata
            collection = md.get(META_COLLECTION)
            if collection is None:
                continue
            try:
                target = cache[collection]
            except KeyError:
                target = self._target(collection)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[collection] = target
            if target is not None:
                md[META_COLLECTION] = target
        return list(records)
