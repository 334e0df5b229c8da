"""``cdc.mask``: mask or hash columns holding personal data.

``hash`` replaces a value with the hex SHA-256 of ``hash.salt`` + its text, so
equal values stay equal (joins and counts still work) without being readable;
``mask`` replaces it with ``mask.char`` repeated, optionally keeping the last
``mask.keepLast`` characters (card numbers, phone numbers). Null stays null.
Both change the value's type to text. Control records pass untouched.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, Sequence

from cdcflow.errors import ConfigError
from cdcflow.expr import to_text
from cdcflow.params import Parameter, ParamType
from cdcflow.record import META_COLLECTION, META_CONTROL, Record
from cdcflow.sdk import Result, Transform

from .base import plugin_name
from .patterns import ColumnSet

METHODS = ("mask", "hash")


def hasher(salt: str) -> Callable[[Any], str]:
    seed = hashlib.sha256(salt.encode("utf-8"))

    def hash_value(value: Any) -> str:
        h = seed.copy()
        h.update(value if type(value) is bytes else (value if type(value) is str else to_text(value)).encode("utf-8"))
        return h.hexdigest()

    return hash_value


def masker(char: str, keep_last: int) -> Callable[[Any], str]:
    def mask_value(value: Any) -> str:
        text = value if type(value) is str else to_text(value)
        if keep_last <= 0:
            return char * len(text)
        hidden = max(0, len(text) - keep_last)
        return char * hidden + text[hidden:]

    return mask_value


class CdcMask(Transform):
    name = "cdc.mask"
    version = "v0.1.0"
    summary = "Mask or hash columns (PII)."
    description = (
        "Replaces the values of columns matching `columns` (comma- or newline-separated globs, or regular "
        "expressions with `regex: true`; a pattern matches the column name or `<collection>.<column>`) in "
        ".Payload.Before and .Payload.After, and in .Key with `includeKey: true`. `method: hash` writes the hex "
        "SHA-256 of `hash.salt` + the value's text (deterministic); `method: mask` writes `mask.char` per "
        "character, keeping the last `mask.keepLast`. Null stays null."
    )
    author = "cdcflow"
    parameters = {
        "columns": Parameter(ParamType.STRING, required=True, description="Columns to mask, e.g. email, shop.users.phone."),
        "method": Parameter(ParamType.STRING, default="mask", inclusion=METHODS, description="mask or hash."),
        "mask.char": Parameter(ParamType.STRING, default="*", description="Character masked text is made of."),
        "mask.keepLast": Parameter(ParamType.INT, default="0", greater_than=-1,
                                   description="Characters kept visible at the end (mask only)."),
        "hash.salt": Parameter(ParamType.STRING, default="", secret=True,
                               description="Secret prepended before hashing (hash only); keep it stable."),
        "includeKey": Parameter(ParamType.BOOL, default="false",
                                description="Also replace matching columns in .Key (use with hash to keep identities)."),
        "regex": Parameter(ParamType.BOOL, default="false", description="Patterns are regular expressions, not globs."),
    }

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        plugin = plugin_name(self)
        self._columns = ColumnSet.parse(config["columns"], bool(config["regex"]), plugin, "columns")
        if not self._columns:
            raise ConfigError(plugin, "columns", "required", "at least one column pattern is required")
        if config["method"] == "hash":
            self._replace = hasher(config.get("hash.salt") or "")
        else:
            char = config.get("mask.char") or "*"
            if len(char) != 1:
                raise ConfigError(plugin, "mask.char", "length", "must be exactly one character")
            self._replace = masker(char, int(config["mask.keepLast"]))
        self._include_key = bool(config["includeKey"])

    def process(self, records: Sequence[Record]) -> list[Result]:
        columns, replace, with_key = self._columns, self._replace, self._include_key
        # plain column names are known per table without looking at the row's keys
        fixed = columns.fixed_columns if columns.literals is not None else None
        names = None
        for r in records:
            md = r.metadata
            if META_CONTROL in md:
                continue
            collection = md.get(META_COLLECTION) or ""
            if fixed is not None:
                names = fixed(collection)
            for row in (r.before, r.after, r.key) if with_key else (r.before, r.after):
                if type(row) is not dict:
                    continue
                for column in names if names is not None else columns.matching(collection, row):
                    value = row.get(column)
                    if value is not None:
                        row[column] = replace(value)
        return list(records)
