"""Typed errors. Each carries the context a user needs to find the cause."""

from __future__ import annotations

from .masking import mask_text


class CdcflowError(Exception):
    """Base class of every error cdcflow raises on purpose."""


class ConfigError(CdcflowError):
    """A setting is invalid. Raised before anything starts."""

    def __init__(self, plugin: str, parameter: str | None, rule: str, message: str):
        self.plugin = plugin
        self.parameter = parameter
        self.rule = rule
        where = f"{plugin}: parameter {parameter!r}" if parameter else plugin
        super().__init__(f"{where}: {message} (rule: {rule})")


class PluginNotFoundError(CdcflowError):
    """No registered plugin matches a reference such as ``builtin:file@v0.1.0``."""


class PluginLoadError(CdcflowError):
    """A plugin was found but could not be loaded or specified."""


class DuplicatePluginError(CdcflowError):
    """Two plugins share the same kind, name and version."""


class PluginCrashedError(CdcflowError):
    """A standalone plugin process died or broke its protocol."""

    def __init__(self, plugin: str, message: str):
        self.plugin = plugin
        super().__init__(f"plugin {plugin}: {message}")


class InfrastructureError(CdcflowError):
    """A service a node depends on failed: broker, schema registry, object store, state store, disk.

    Never a record's fault. The engine fails the whole batch (nothing after it is written or
    acknowledged, nothing goes to the DLQ), retries it with backoff inside the configured
    budget, then stops the pipeline naming pipeline, node and ``endpoint``. Connectors raise
    it (or a subclass) for every failure that is about the service, not the record's content.
    """

    def __init__(self, message: str, *, service: str = "", endpoint: str | None = None):
        self.service = service  # "kafka", "schema-registry", "object-store", "state", "disk", ...
        # servers, registry URL, path or URI; a URI's password or secret query never rides in the error
        self.endpoint = mask_text(endpoint) if endpoint else endpoint
        super().__init__(mask_text(message))


class RecordError(CdcflowError):
    """One record could not be processed; the pipeline may route it to the DLQ."""

    def __init__(self, message: str, *, position: bytes | None = None, node: str | None = None):
        self.position = position
        self.node = node
        super().__init__(message)


class ConversionError(CdcflowError):
    """A value cannot be represented in the target form without changing it."""

    def __init__(self, message: str, *, path: str | None = None, value: object = None):
        self.path = path
        self.value = value
        super().__init__(f"{path}: {message}" if path else message)


class SchemaError(CdcflowError):
    """A schema is unknown, invalid or incompatible."""
