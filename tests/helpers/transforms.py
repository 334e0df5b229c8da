"""Shared helpers: build a configured transform or a chain through the real registry."""

from __future__ import annotations

from cdcflow.pipeline.chain import build_chain
from cdcflow.pipeline.model import ProcessorConfig
from cdcflow.registry import load_registry

_REGISTRY = None


def registry():
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = load_registry()
    return _REGISTRY


def make(name: str, **settings: str):
    """A transform validated, configured and opened as the chain would (settings are strings)."""
    info = registry().transform(name)
    t = info.new_transform()
    t.id = f"test-{name}"
    t.configure(info.validate("transform", settings, plugin_id=t.id))
    t.open()
    return t


def configure_only(name: str, **settings: str):
    info = registry().transform(name)
    t = info.new_transform()
    t.configure(info.validate("transform", settings))
    return t


def chain(*processors: tuple):
    """Processors given as (id, plugin, condition, settings)."""
    return build_chain(
        [ProcessorConfig(id=i, plugin=p, condition=c, settings=dict(s)) for i, p, c, s in processors], registry()
    )
