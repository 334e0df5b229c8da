"""pluggy hook specifications of the ``cdcflow`` project.

A plugin is a module (or object) named by an entry point of the ``cdcflow``
group; cdcflow's own connectors and transforms are two such entry points. The
registry's ``PluginManager`` loads them with ``load_setuptools_entrypoints`` and
calls ``pm.hook.cdcflow_connectors()`` and ``pm.hook.cdcflow_transforms()``: each
implementation returns a list (empty if it provides nothing of that kind).
"""

from __future__ import annotations

import pluggy

from .sdk import ConnectorPlugin, Transform

PROJECT = "cdcflow"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def cdcflow_connectors() -> list[ConnectorPlugin]:
    """Return the connector plugins this plugin provides."""


@hookspec
def cdcflow_transforms() -> list[type[Transform]]:
    """Return the transform classes this plugin provides."""
