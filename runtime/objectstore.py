"""An object-store prefix for the engine's own state (positions, run lease, schemas).

The state directory may be ``s3://``, ``gs://``/``gcs://`` or ``azure://``/``azblob://``/``abfs://``
instead of a local path, so a cluster without a shared filesystem can run. It is opened through
the storage connector's file-system layer (``connectors/storage/settings.py``: the same scheme
table, credentials, timeouts and retries; ``writer.FileStore``: whole-object reads and writes,
create-only and compare-and-swap writes, errors as ``InfrastructureError`` naming the URI without
credentials), so one implementation serves both.

Options come from ``engine.state-options`` (the storage connector's object-store setting names,
e.g. ``s3.endpoint``, ``s3.region``, ``s3.access-key``) or the store's standard environment
(``AWS_*``, ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...); never the URI itself.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Mapping

from .errors import ConfigError

#: URI schemes a state directory may name besides a local path (abfs is an alias of azure)
SCHEMES = ("s3", "gs", "gcs", "azure", "azblob", "abfs")
#: the storage connector's settings that configure the file system (``engine.state-options`` keys)
OPTION_PREFIXES = ("s3.", "storage-options.")
OPTION_NAMES = ("connect-timeout", "read-timeout", "retries", "request-timeout")


def is_object_uri(location: object) -> bool:
    """Whether ``location`` names an object-store prefix (not a local path)."""
    if not isinstance(location, str) or "://" not in location:
        return False
    return location.split("://", 1)[0].lower() in SCHEMES


def normal_uri(uri: str, what: str = "state directory") -> str:
    """``uri`` without a trailing slash; refuses credentials or options carried in the URI."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError("engine", "state-dir", "uri",
                          f"the {what} URI takes no user, password, query or fragment (got "
                          f"{parts.scheme}://{parts.hostname or ''}{parts.path}...): give endpoint, region and "
                          "credentials in engine.state-options or the store's environment")
    if not parts.netloc:
        raise ConfigError("engine", "state-dir", "uri", f"the {what} URI {uri!r} names no bucket or container")
    return f"{parts.scheme.lower()}://{parts.netloc}{parts.path.rstrip('/')}"


def option_spec() -> dict:
    """The ``engine.state-options`` keys: the storage connector's object-store settings."""
    from cdcflow.connectors.storage.settings import COMMON_PARAMS

    return {k: p for k, p in COMMON_PARAMS.items() if k.startswith(OPTION_PREFIXES) or k in OPTION_NAMES}


def check_options(options: Mapping[str, str]) -> list[str]:
    """Problems of ``engine.state-options`` (unknown keys, bad values), as messages."""
    from .params import problems

    return [str(p) for p in problems("engine.state-options", option_spec(), dict(options))]


def secret_values(options: Mapping[str, str]) -> list[str]:
    """The values of ``options`` to mask in every message and log."""
    from .params import secret_values as _secrets

    return _secrets(option_spec(), options)


def open_prefix(uri: str, options: Mapping[str, Any] | None = None):
    """The storage connector's ``FileStore`` rooted at ``uri`` (file system opened, timeouts applied)."""
    from cdcflow.connectors.storage.settings import resolve
    from cdcflow.connectors.storage.writer import FileStore

    scheme, rest = uri.split("://", 1)
    if scheme.lower() == "abfs":  # the fsspec protocol's own name, accepted beside TiCDC's azure://
        uri = f"azure://{rest}"
    settings = resolve({"uri": uri, **{k: v for k, v in (options or {}).items() if v not in (None, "")}})
    return FileStore.of(settings)
