"""Paths of the TiCDC storage sink layout, and the name checks that keep writes under the root.

``{schema}/{table}/{table-version}/[{partition}/][{date}/]CDC{index}.{ext}``,
``{data dir}/meta/CDC.index``, ``{schema}/{table}/meta/schema_{v}_{crc}.json``,
``{schema}/meta/schema_{v}_{crc}.json`` and ``{root}/metadata``.
"""

from __future__ import annotations

import datetime
import re

from cdcflow.errors import RecordError

INDEX_DIR = "meta"
INDEX_FILE = "CDC.index"
METADATA_FILE = "metadata"
DATE_SEPARATORS = ("none", "year", "month", "day")
EXTENSIONS = {"csv": "csv", "canal-json": "json"}
DATA_FILE_RE = re.compile(r"^CDC(\d+)\.(csv|json)$")
_DATE_RE = {"year": re.compile(r"^\d{4}$"), "month": re.compile(r"^\d{4}-\d{2}$"),
            "day": re.compile(r"^\d{4}-\d{2}-\d{2}$")}
_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")
#: longest name segment, in UTF-8 bytes: local file systems' NAME_MAX (TiDB names are 64 characters at most)
MAX_NAME_BYTES = 255


class UnsafeNameError(RecordError):
    """A schema or table name would leave the root or make an ambiguous path; the record is refused."""


def check_name(kind: str, name: str, position: bytes | None = None) -> str:
    """``name`` if it is safe as one path segment; else ``UnsafeNameError``.

    Refused rather than escaped: an escaped name would read back as a different
    table, and TiCDC writes names verbatim, so refusing keeps the layout TiCDC's.
    """
    if not name or name in (".", "..", INDEX_DIR, METADATA_FILE) or _FORBIDDEN.search(name):
        raise UnsafeNameError(f"storage: {kind} name {name!r} is not allowed in a path (empty, '.', '..', "
                              "'meta', 'metadata', or holds '/', '\\\\', NUL or a control character)", position=position)
    if len(name) * 4 > MAX_NAME_BYTES and len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise UnsafeNameError(f"storage: {kind} name {name[:40]!r}... is too long for a path "
                              f"({len(name.encode('utf-8', 'surrogatepass'))} bytes, at most {MAX_NAME_BYTES})",
                              position=position)
    return name


def date_dir(commit_ts: int, separator: str) -> str | None:
    """The date directory of a row: its commit time (UTC) cut to ``separator``; None for ``none``."""
    if separator == "none":
        return None
    d = datetime.datetime.fromtimestamp((commit_ts >> 18) / 1000, datetime.timezone.utc)
    if separator == "year":
        return f"{d.year:04d}"
    if separator == "month":
        return f"{d.year:04d}-{d.month:02d}"
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def is_date_dir(name: str, separator: str) -> bool:
    return bool(_DATE_RE[separator].match(name)) if separator != "none" else False


def table_dir(schema: str, table: str) -> str:
    return f"{schema}/{table}"


def data_dir(schema: str, table: str, version: int, partition: int | None, date: str | None) -> str:
    parts = [schema, table, str(version)]
    if partition is not None:
        parts.append(str(partition))
    if date is not None:
        parts.append(date)
    return "/".join(parts)


def data_file_name(index: int, width: int, extension: str) -> str:
    return f"CDC{index:0{width}d}.{extension}"


def parse_data_file(name: str) -> tuple[int, str] | None:
    """(index, extension) of ``CDC000…1.csv``; None for other names."""
    m = DATA_FILE_RE.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def index_path(data_directory: str) -> str:
    return f"{data_directory}/{INDEX_DIR}/{INDEX_FILE}"


def table_schema_dir(schema: str, table: str) -> str:
    return f"{schema}/{table}/{INDEX_DIR}"


def database_schema_dir(schema: str) -> str:
    return f"{schema}/{INDEX_DIR}"
