"""Table and column patterns for the ``cdc.*`` transforms.

A pattern is a glob (``shop_*.orders_?``, ``*`` and ``?`` also match dots;
``[abc]`` classes) or, with ``regex: true``, a regular expression that must match
the whole name. Tables are named by their collection (``schema.table`` for TiCDC
data); a column pattern matches the bare column name or ``<collection>.<column>``.

Decisions are cached per name, so the per-record cost is one dict lookup.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Sequence

from cdcflow.errors import ConfigError

_CACHE_LIMIT = 65536


def split_list(text: str | None) -> list[str]:
    """Entries separated by newlines when the text has any (so regexes may hold commas), else by commas."""
    if not text:
        return []
    parts = text.splitlines() if "\n" in text.strip() else text.split(",")
    return [p.strip() for p in parts if p.strip()]


def compile_pattern(text: str, regex: bool, plugin: str, parameter: str) -> re.Pattern[str]:
    source = text if regex else fnmatch.translate(text)
    try:
        return re.compile(source)
    except re.error as e:
        raise ConfigError(plugin, parameter, "pattern", f"invalid pattern {text!r}: {e}") from None


class NameSet:
    """Names matching any of a list of patterns; ``match`` is cached per name."""

    __slots__ = ("patterns", "_cache")

    def __init__(self, patterns: Sequence[re.Pattern[str]]):
        self.patterns = list(patterns)
        self._cache: dict[str, bool] = {}

    @classmethod
    def parse(cls, text: str | None, regex: bool, plugin: str, parameter: str) -> "NameSet":
        return cls([compile_pattern(p, regex, plugin, parameter) for p in split_list(text)])

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def match(self, name: str) -> bool:
        hit = self._cache.get(name)
        if hit is None:
            hit = any(p.fullmatch(name) for p in self.patterns)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[name] = hit
        return hit


class ColumnSet:
    """Columns matching a list of patterns, per table.

    A pattern matches a column when it matches the bare column name or
    ``<collection>.<column>`` (so ``email`` matches it in every table and
    ``shop.users.email`` only in ``shop.users``). ``matching(collection, row)``
    returns the matching column names of the row's table seen so far; a row
    whose columns were all seen before costs one set comparison.
    """

    __slots__ = ("patterns", "literals", "_plans", "_fixed")

    def __init__(self, patterns: Sequence[re.Pattern[str]], literals: Sequence[str] | None = None):
        self.patterns = list(patterns)
        #: the pattern texts when every pattern is a plain name (no glob characters), else None
        self.literals = list(literals) if literals is not None else None
        self._plans: dict[str, tuple[set[str], list[str], list[str]]] = {}
        self._fixed: dict[str, list[str]] = {}

    @classmethod
    def parse(cls, text: str | None, regex: bool, plugin: str, parameter: str) -> "ColumnSet":
        texts = split_list(text)
        literal = not regex and not any(ch in t for t in texts for ch in "*?[")
        return cls([compile_pattern(p, regex, plugin, parameter) for p in texts], texts if literal else None)

    def fixed_columns(self, collection: str) -> list[str]:
        """For plain-name patterns only: every column name that can match in ``collection``,
        known without seeing a row (``email`` → email; ``shop.users.email`` → email in shop.users)."""
        columns = self._fixed.get(collection)
        if columns is None:
            if self.literals is None:
                raise ValueError("fixed_columns needs plain-name patterns")
            prefix = f"{collection}."
            columns = []
            for name in self.literals:
                for column in (name, name[len(prefix):] if name.startswith(prefix) else None):
                    if column and column not in columns:
                        columns.append(column)
            if len(self._fixed) >= _CACHE_LIMIT:
                self._fixed.clear()
            self._fixed[collection] = columns
        return columns

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def match(self, collection: str, column: str) -> bool:
        qualified = f"{collection}.{column}"
        return any(p.fullmatch(column) or p.fullmatch(qualified) for p in self.patterns)

    def _plan(self, collection: str, row: dict) -> tuple[set[str], list[str], list[str]]:
        plan = self._plans.get(collection)
        if plan is None:
            if len(self._plans) >= _CACHE_LIMIT:
                self._plans.clear()
            plan = self._plans[collection] = (set(), [], [])
        seen, matched, unmatched = plan
        if not row.keys() <= seen:
            for column in row:
                if column not in seen:
                    seen.add(column)
                    (matched if self.match(collection, column) else unmatched).append(column)
        return plan

    def matching(self, collection: str, row: dict) -> list[str]:
        """Columns of ``collection`` seen so far that match (some may be absent from ``row``)."""
        return self._plan(collection, row)[1]

    def not_matching(self, collection: str, row: dict) -> list[str]:
        """Columns of ``collection`` seen so far that do not match (some may be absent from ``row``)."""
        return self._plan(collection, row)[2]
