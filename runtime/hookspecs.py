"""pluggy hook specifications. Plugins (built-ins included) implement these and
register through the ``cdcflow`` entry-point group."""

from __future__ import annotations

import pluggy

from .sdk import ConnectorPlugin, Transform

PROJECT = "cdcflow"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def cdcflow_connectors() -> list[ConnectorPlugin]:
    """Return the connector plugins this module provides."""


@hookspec
def cdcflow_transforms() -> list[type[Transform]]:
    """Return the transform classes this module provides."""
