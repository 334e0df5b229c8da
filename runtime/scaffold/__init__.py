"""``cdcflow plugins init``: scaffold a third-party plugin package.

The templates under ``templates/`` are ``string.Template`` files (``$name``,
``$module``, ``$class_name``, ...): ``common/`` for every kind, plus one
directory per kind with the plugin module and its test. The package registers
through the ``cdcflow`` entry-point group, exactly like the built-ins.
"""

from __future__ import annotations

import re
import string
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

KINDS = ("source", "destination", "transform")
NAME_RE = re.compile(r"^[a-z][a-z0-9._-]*$")

#: template file -> path in the new package (``$module`` is substituted)
LAYOUT = {
    "common/pyproject.toml.tmpl": "pyproject.toml",
    "common/README.md.tmpl": "README.md",
    "common/__init__.py.tmpl": "$module/__init__.py",
    "{kind}/plugin.py.tmpl": "$module/plugin.py",
    "{kind}/test_plugin.py.tmpl": "tests/test_plugin.py",
}


def names(name: str, kind: str) -> dict[str, str]:
    """Every spelling of the plugin name the templates use."""
    words = [w for w in re.split(r"[^a-z0-9]+", name) if w]
    module = "cdcflow_" + "_".join(words)
    camel = "".join(w.capitalize() for w in words)
    return {
        "name": name,
        "kind": kind,
        "module": module,
        "dist_name": f"cdcflow-{'-'.join(words)}",
        "class_name": camel + kind.capitalize(),
        "entry_name": name,
    }


def scaffold(name: str, kind: str, out_dir: str | Path) -> Path:
    """Write a plugin package for ``name`` into ``out_dir`` (absent or empty); return it."""
    if not NAME_RE.match(name):
        raise ConfigError("plugins init", "NAME", "regex",
                          f"plugin name {name!r} must match {NAME_RE.pattern} (e.g. my-source)")
    if kind not in KINDS:
        raise ConfigError("plugins init", "--kind", "inclusion", f"kind {kind!r} must be one of {', '.join(KINDS)}")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError("plugins init", "--out", "empty", f"{out} exists and is not an empty directory")
    values = names(name, kind)
    root = resources.files(__package__).joinpath("templates")
    for template, target in LAYOUT.items():
        text = root.joinpath(template.format(kind=kind)).read_text(encoding="utf-8")
        dest = out / string.Template(target).substitute(values)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(string.Template(text).substitute(values), encoding="utf-8")
    return out
