"""Settings of the storage connectors: a TiCDC sink URI plus discrete settings that win over it.

Precedence for every option: the discrete setting, else the URI's query
parameter, else TiCDC's default. The parameter specs therefore carry no
defaults (a default would hide whether the user set the value); ``resolve``
applies them.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Mapping

from cdcflow.connectors.ticdc.canal_json import CanalJsonOptions
from cdcflow.connectors.ticdc.csv import CsvOptions
from cdcflow.errors import ConfigError
from cdcflow.extras import install_hint
from cdcflow.params import Parameter, ParamType, did_you_mean, parse_bool, parse_duration

from .layout import DATE_SEPARATORS, EXTENSIONS

PLUGIN = "storage"
DEFAULT_FILE_SIZE = 64 * 1024 * 1024
# URI scheme -> fsspec protocol (and the package that provides it)
_SCHEMES = {"file": ("file", None), "": ("file", None), "s3": ("s3", "s3fs"), "gcs": ("gcs", "gcsfs"),
            "gs": ("gcs", "gcsfs"), "azure": ("abfs", "adlfs"), "azblob": ("abfs", "adlfs"),
            "memory": ("memory", None)}

_CSV_KEYS = ("delimiter", "quote", "null", "include-commit-ts", "binary-encoding-method", "output-old-value",
             "output-handle-key", "output-field-header")
_CANAL_KEYS = ("enable-tidb-extension", "content-compatible")
# settings a URI query may carry (TiCDC's names), besides the storage credentials below
_URI_OPTIONS = ("protocol", "terminator", "date-separator", "enable-partition-separator", "file-index-width",
                "flush-interval", "file-size", "connect-timeout", "read-timeout", "retries", "request-timeout") + _CSV_KEYS + _CANAL_KEYS
# TiCDC's S3 URI parameters -> discrete setting names
_S3_URI = {"endpoint": "s3.endpoint", "region": "s3.region", "access-key": "s3.access-key",
           "secret-access-key": "s3.secret-access-key", "session-token": "s3.session-token"}


def _p(description: str, ptype: ParamType = ParamType.STRING, **kw: Any) -> Parameter:
    return Parameter(ptype, None, description, **kw)


COMMON_PARAMS: dict[str, Parameter] = {
    "uri": Parameter(ParamType.STRING, None, "TiCDC sink URI: file:///dir (or a plain path), s3://bucket/prefix, "
                     "gcs:// or gs://bucket/prefix, azure:// or azblob://container/prefix, memory://prefix; "
                     "its query may carry any option below (?protocol=csv&date-separator=day).", required=True),
    "protocol": _p("csv (default) or canal-json.", inclusion=("csv", "canal-json")),
    "delimiter": _p("CSV field delimiter, 1-3 characters (default ,)."),
    "quote": _p('CSV quote character, may be empty (default ").'),
    "null": _p("CSV text of NULL (default \\N)."),
    "include-commit-ts": _p("CSV: write the commit-ts column (default false).", ParamType.BOOL),
    "binary-encoding-method": _p("CSV: base64 (default) or hex.", inclusion=("base64", "hex")),
    "output-old-value": _p("CSV: an update becomes a D row with the old values and an I row (default false).",
                           ParamType.BOOL),
    "output-handle-key": _p("CSV: write the handle-key column (default false).", ParamType.BOOL),
    "output-field-header": _p("CSV: first line of each file is a header (default false).", ParamType.BOOL),
    "enable-tidb-extension": _p("canal-json: write the _tidb field with the exact commitTs (default false; "
                                "without it only the physical milliseconds survive).", ParamType.BOOL),
    "content-compatible": _p("canal-json: full column types in mysqlType (ENUM/SET members, DECIMAL scale).",
                             ParamType.BOOL),
    "terminator": _p("Line terminator (default \\r\\n)."),
    "date-separator": _p("none, year, month or day (default day).", inclusion=DATE_SEPARATORS),
    "enable-partition-separator": _p("Partition directory for partitioned tables (default true).", ParamType.BOOL),
    "file-index-width": _p("Digits of the file index, 6-20 (default 20).", ParamType.INT,
                           greater_than=5, less_than=21),
    "s3.endpoint": _p("S3 endpoint URL (MinIO, moto, other S3-compatible stores)."),
    "s3.region": _p("S3 region."),
    "s3.access-key": _p("S3 access key id.", secret=True),
    "s3.secret-access-key": _p("S3 secret access key.", secret=True),
    "s3.session-token": _p("S3 session token.", secret=True),
    "connect-timeout": _p("Object stores: longest wait to connect (default 5s).", ParamType.DURATION),
    "read-timeout": _p("Object stores: longest wait for the next bytes of an answer (default 15s).",
                       ParamType.DURATION),
    "retries": _p("Object stores: attempts per request, the first included (default 3; S3: botocore's "
                  "standard retry mode).", ParamType.INT, greater_than=0),
    "request-timeout": _p("Object stores: longest one call may take, retries included, before it fails as "
                          "an outage (default 2m).", ParamType.DURATION),
    "storage-options.*": _p("Passed to the fsspec file system as keyword arguments (gcsfs: token, project; "
                            "adlfs: account_name, account_key, sas_token, connection_string).", secret=True),
}

DESTINATION_PARAMS: dict[str, Parameter] = {
    **COMMON_PARAMS,
    "flush-interval": _p("Longest time a data file stays open, 2s-10m (default 5s).", ParamType.DURATION),
    "file-size": _p("Rotate a data file once it holds this many bytes (default 67108864).", ParamType.INT,
                    greater_than=0),
}

SOURCE_PARAMS: dict[str, Parameter] = {
    **COMMON_PARAMS,
    "date-separator": _p("none, year, month or day (default day). The source reads the date directories "
                         "present whatever this says; it tells a four-digit partition id from a year.",
                         inclusion=DATE_SEPARATORS),
    "enable-partition-separator": _p("Accepted for symmetry (default true); the source reads the partition "
                                     "directories present whatever this says.", ParamType.BOOL),
    "stop-at-checkpoint": Parameter(ParamType.BOOL, "false", "Read only rows with commit-ts below the root "
                                    "metadata file's checkpoint-ts read at start (a consistent snapshot), then end."),
    "poll-interval": Parameter(ParamType.DURATION, "1s", "How often to look for new files once all are read."),
    "tables": Parameter(ParamType.STRING, "", "Comma-separated schema.table names to read (default: all)."),
}


@dataclass(frozen=True)
class StorageSettings:
    """Resolved settings. ``root`` is the path inside ``protocol``'s file system, without a trailing slash."""

    protocol: str  # fsspec protocol
    root: str
    format: str  # csv | canal-json
    csv: CsvOptions
    canal: CanalJsonOptions
    date_separator: str = "day"
    partition_separator: bool = True
    index_width: int = 20
    flush_interval: float = 5.0
    file_size: int = DEFAULT_FILE_SIZE
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: longest one object-store call may take, retries included (seconds)
    request_timeout: float = 120.0
    #: attempts per object-store request (the file system's own retry loop, where it has one)
    retries: int = 3

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.format]

    def open_filesystem(self):
        """The fsspec file system (imported lazily; a missing optional package is a ConfigError)."""
        return open_filesystem(self.protocol, self.storage_options, self.retries)


def open_filesystem(protocol: str, options: Mapping[str, Any], retries: int | None = None):
    import fsspec

    package = next((pkg for p, pkg in _SCHEMES.values() if p == protocol), None)
    try:
        fs = fsspec.filesystem(protocol, **dict(options))
    except ImportError as e:
        raise ConfigError(PLUGIN, "uri", "scheme", f"the {protocol} file system needs the {package} package "
                          f"({install_hint(package)}): {e}") from None
    if retries is not None and protocol in ("s3", "gcs"):
        # s3fs and gcsfs retry in a loop of their own (s3fs: 5 times, around botocore's retries, which
        # made a stalled endpoint hang for minutes); S3 retries once, in botocore, gcsfs ``retries`` times
        fs.retries = 1 if protocol == "s3" else retries
    return fs


def _query(uri: str) -> tuple[str, str, dict[str, str]]:
    """(scheme, path without query, query parameters) of a URI or plain path."""
    if "://" not in uri:
        return "", uri.split("?", 1)[0], dict(urllib.parse.parse_qsl(uri.split("?", 1)[1])) if "?" in uri else {}
    parts = urllib.parse.urlsplit(uri)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return parts.scheme.lower(), parts.netloc + parts.path, query


def resolve(config: Mapping[str, Any]) -> StorageSettings:
    """Validated connector config (``params.validate`` output) -> ``StorageSettings``."""
    uri = str(config["uri"])
    scheme, path, query = _query(uri)
    if scheme not in _SCHEMES:
        raise ConfigError(PLUGIN, "uri", "scheme",
                          f"scheme {scheme!r} is not supported (file, s3, gcs, gs, azure, azblob, memory)")
    protocol = _SCHEMES[scheme][0]
    for key in query:
        if key not in _URI_OPTIONS and key not in _S3_URI:
            names = _URI_OPTIONS + tuple(_S3_URI)
            raise ConfigError(PLUGIN, "uri", "query", f"unknown URI parameter {key!r}{did_you_mean(key, names)} "
                              f"(known: {', '.join(sorted(names))})")

    def get(name: str, default: Any = None) -> Any:
        v = config.get(name)
        if v is not None and v != "":
            return v
        if name in query:
            return query[name]
        return default

    fmt = str(get("protocol", "csv"))
    if fmt not in EXTENSIONS:
        raise ConfigError(PLUGIN, "protocol", "inclusion", f"protocol must be csv or canal-json, got {fmt!r}")
    opts = {k: get(k) for k in _CSV_KEYS + _CANAL_KEYS + ("terminator",) if get(k) is not None}
    csv_opts = CsvOptions.from_config(opts, PLUGIN)
    canal = CanalJsonOptions.from_config(opts, PLUGIN)
    date_sep = str(get("date-separator", "day"))
    if date_sep not in DATE_SEPARATORS:
        raise ConfigError(PLUGIN, "date-separator", "inclusion", f"must be one of {DATE_SEPARATORS}, got {date_sep!r}")
    try:
        part_sep = _as_bool(get("enable-partition-separator", True))
        width = int(get("file-index-width", 20))
        flush = _as_duration(get("flush-interval", 5.0))
        size = int(get("file-size", DEFAULT_FILE_SIZE))
    except ValueError as e:
        raise ConfigError(PLUGIN, None, "type", str(e)) from None
    if not 6 <= width <= 20:
        raise ConfigError(PLUGIN, "file-index-width", "range", f"must be 6-20, got {width}")
    if size <= 0:
        raise ConfigError(PLUGIN, "file-size", "greater-than", f"must be positive, got {size}")
    if flush < 0:
        raise ConfigError(PLUGIN, "flush-interval", "range", f"must not be negative, got {flush}")
    storage_options: dict[str, Any] = {k[len("storage-options."):]: v for k, v in config.items()
                                       if k.startswith("storage-options.") and v is not None}
    if protocol == "s3":
        for uri_key, setting in _S3_URI.items():
            v = config.get(setting) or query.get(uri_key)
            if not v:
                continue
            if uri_key == "endpoint":
                storage_options.setdefault("endpoint_url", v)
            elif uri_key == "region":
                storage_options.setdefault("client_kwargs", {})["region_name"] = v
            elif uri_key == "access-key":
                storage_options["key"] = v
            elif uri_key == "secret-access-key":
                storage_options["secret"] = v
            else:
                storage_options["token"] = v
    try:
        connect = _as_duration(get("connect-timeout", 5.0))
        read = _as_duration(get("read-timeout", 15.0))
        request = _as_duration(get("request-timeout", 120.0))
        retries = int(get("retries", 3))
    except ValueError as e:
        raise ConfigError(PLUGIN, None, "type", str(e)) from None
    for name, value in (("connect-timeout", connect), ("read-timeout", read), ("request-timeout", request)):
        if value <= 0:
            raise ConfigError(PLUGIN, name, "greater-than", f"must be positive, got {value}")
    if retries < 1:
        raise ConfigError(PLUGIN, "retries", "greater-than", f"must be at least 1, got {retries}")
    if protocol == "s3":
        config = storage_options.setdefault("config_kwargs", {})
        config.setdefault("connect_timeout", connect)
        config.setdefault("read_timeout", read)
        config.setdefault("retries", {"max_attempts": retries, "mode": "standard"})
    elif protocol == "gcs":
        storage_options.setdefault("requests_timeout", connect + read)
    if protocol in ("s3", "gcs", "abfs"):
        # another writer's files must be seen: no listing cache, no instance shared with stale caches
        storage_options.setdefault("use_listings_cache", False)
        storage_options.setdefault("skip_instance_cache", True)
    root = path.rstrip("/") if protocol != "file" else _local_root(path)
    if not root and protocol != "memory":
        raise ConfigError(PLUGIN, "uri", "path", f"URI {uri!r} names no bucket or directory")
    return StorageSettings(protocol, root, fmt, csv_opts, canal, date_sep, part_sep, width, flush, size,
                           storage_options, request, retries)


def _local_root(path: str) -> str:
    import os

    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


def _as_bool(v: Any) -> bool:
    return v if isinstance(v, bool) else parse_bool(str(v))


def _as_duration(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else parse_duration(str(v))
