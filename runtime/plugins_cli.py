"""``cdcflow plugins list|describe|export|init``.

The ``--json`` shapes are a stable interface (docs/cli.md; tests pin the keys):
add keys if needed, never rename or remove them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from .params import MASK, Parameter
from .registry import LoadFailure, PluginInfo, PythonPlugin, Registry, load_registry


def register(subparsers: argparse._SubParsersAction) -> None:
    plugins = subparsers.add_parser("plugins", help="list, describe, export and scaffold plugins")
    sub = plugins.add_subparsers(dest="plugins_command", metavar="SUBCOMMAND")

    def usage(args: argparse.Namespace) -> int:
        plugins.print_help(sys.stderr)
        return 2

    plugins.set_defaults(func=usage)

    p = sub.add_parser("list", help="every connector and transform, and plugins that failed to load")
    p.add_argument("--json", action="store_true", help="machine-readable output (see docs/cli.md)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="a plugin's specification and parameters")
    p.add_argument("name", metavar="NAME", help="[builtin|standalone|any:]NAME[@VERSION]")
    p.add_argument("--json", action="store_true", help="machine-readable output (see docs/cli.md)")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("export", help="write a launcher that runs a cdcflow connector as a Conduit standalone plugin")
    p.add_argument("name", metavar="NAME", help="[builtin|standalone|any:]NAME[@VERSION]")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write the launcher to")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("init", help="scaffold a third-party plugin package")
    p.add_argument("name", metavar="NAME", help="plugin name (lower case letters, digits, '-', '_', '.')")
    p.add_argument("--kind", required=True, choices=("source", "destination", "transform"))
    p.add_argument("--out", required=True, metavar="DIR", help="directory to create (must be empty or absent)")
    p.set_defaults(func=cmd_init)


# -- JSON shapes -----------------------------------------------------------------------
def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def parameter_json(p: Parameter) -> dict[str, Any]:
    """``{"type", "default", "description", "required", "secret", "validations": [{"type", "value"}]}``."""
    validations: list[dict[str, str]] = []
    if p.required:
        validations.append({"type": "required", "value": ""})
    if p.greater_than is not None:
        validations.append({"type": "greater-than", "value": _number(p.greater_than)})
    if p.less_than is not None:
        validations.append({"type": "less-than", "value": _number(p.less_than)})
    if p.inclusion:
        validations.append({"type": "inclusion", "value": ",".join(p.inclusion)})
    if p.exclusion:
        validations.append({"type": "exclusion", "value": ",".join(p.exclusion)})
    if p.regex is not None:
        validations.append({"type": "regex", "value": p.regex})
    default = MASK if (p.secret and p.default) else p.default
    return {
        "type": p.type.name.lower(),
        "default": default,
        "description": p.description,
        "required": p.required,
        "secret": p.secret,
        "validations": validations,
    }


def plugin_summary_json(info: PluginInfo) -> dict[str, Any]:
    return {
        "ref": info.ref,
        "kind": info.kind,
        "type": info.type,
        "name": info.name,
        "version": info.version,
        "sides": list(info.sides),
        "summary": info.summary,
        "origin": info.origin,
    }


def failure_json(f: LoadFailure) -> dict[str, Any]:
    return {"type": f.type, "origin": f.origin, "reason": f.reason}


def python_plugin_json(p: PythonPlugin) -> dict[str, Any]:
    return {"name": p.name, "origin": p.origin, "distribution": p.distribution}


def list_json(reg: Registry) -> dict[str, Any]:
    return {"plugins": [plugin_summary_json(p) for p in reg.plugins()],
            "errors": [failure_json(f) for f in reg.errors],
            "python_plugins": [python_plugin_json(p) for p in reg.python_plugins],
            "blocked": list(reg.blocked)}


def describe_json(info: PluginInfo) -> dict[str, Any]:
    params: dict[str, dict[str, Any]] = {}
    for side in info.sides:
        spec: Mapping[str, Parameter] = info.spec_for(side)
        params[side] = {name: parameter_json(p) for name, p in sorted(spec.items())}
    out = plugin_summary_json(info)
    out.update(description=info.description, author=info.author, parameters=params)
    return out


# -- commands --------------------------------------------------------------------------
def _registry(args: argparse.Namespace) -> Registry:
    return load_registry(getattr(args, "plugins_dir", None))


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def cmd_list(args: argparse.Namespace) -> int:
    reg = _registry(args)
    if args.json:
        _print_json(list_json(reg))
        return 0
    rows = [("TYPE", "NAME", "VERSION", "KIND", "SIDES", "SUMMARY")]
    for p in reg.plugins():
        rows.append((p.type, p.name, p.version, p.kind, ",".join(p.sides), p.summary))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
    if reg.blocked:
        print(f"\nblocked ($CDCFLOW_BLOCK_PLUGINS): {', '.join(reg.blocked)}")
    if reg.errors:
        print(f"\n{len(reg.errors)} plugin(s) failed to load:")
        for f in reg.errors:
            print(f"  {f.type} {f.origin}: {f.reason}")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    info = _registry(args).find(args.name)
    doc = describe_json(info)
    if args.json:
        _print_json(doc)
        return 0
    print(f"{info.ref}  ({info.kind}: {', '.join(info.sides)})")
    for label, key in (("summary", "summary"), ("author", "author"), ("origin", "origin")):
        if doc[key]:
            print(f"{label}: {doc[key]}")
    if info.description:
        print(f"\n{info.description}")
    for side, params in doc["parameters"].items():
        print(f"\n{side} parameters:")
        if not params:
            print("  (none)")
        for name, p in params.items():
            flags = [p["type"]]
            if p["required"]:
                flags.append("required")
            if p["secret"]:
                flags.append("secret")
            if p["default"] not in (None, ""):
                flags.append(f"default {p['default']}")
            rules = [f"{v['type']} {v['value']}" for v in p["validations"] if v["type"] != "required"]
            print(f"  {name} ({'; '.join(flags)})")
            if p["description"]:
                print(f"      {p['description']}")
            if rules:
                print(f"      rules: {'; '.join(rules)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .standalone.export import export_launcher

    # NAME without a type means the builtin one: only in-process plugins are exported
    path = export_launcher(args.name, Path(args.out))
    print(path)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from .scaffold import scaffold

    out = scaffold(args.name, args.kind, Path(args.out))
    print(out)
    return 0
