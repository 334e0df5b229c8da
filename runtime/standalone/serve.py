"""``python -m cdcflow.standalone.serve --plugin REF``: serve a registered plugin standalone.

This is what an exported launcher runs. ``REF`` names an in-process (builtin)
plugin of the registry; a bare ``NAME[@VERSION]`` means ``builtin:NAME``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from ..errors import CdcflowError
from . import handshake as hs
from .spec import CONNECTOR, TRANSFORM


def resolve(ref: str, kind: str | None = None):
    """The registry entry to serve (builtin only: a standalone one is already a plugin)."""
    from ..registry import load_registry

    if ":" not in ref:
        ref = f"builtin:{ref}"
    if not ref.startswith("builtin:"):
        raise CdcflowError(f"only builtin plugins can be served standalone, not {ref!r}")
    registry = load_registry(standalone=False)
    if kind == TRANSFORM:
        return registry.transform(ref)
    if kind == CONNECTOR:
        return registry.connector(ref)
    return registry.find(ref)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdcflow.standalone.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", required=True, help="plugin reference, e.g. builtin:file@v0.1.0")
    parser.add_argument("--kind", choices=(CONNECTOR, TRANSFORM), help="connector or transform (default: either)")
    args = parser.parse_args(argv)
    try:
        hs.check_cookie(os.environ)  # before loading any plugin code
    except hs.PluginEnvError as e:
        print(str(e), file=sys.stderr, flush=True)
        return 1
    try:
        info = resolve(args.plugin, args.kind)
    except CdcflowError as e:
        print(f"cannot serve {args.plugin}: {e}", file=sys.stderr, flush=True)
        return 1
    from ..engine.spark.heap import keep_freed_memory
    from .server import serve

    # what is loaded now lives as long as the process: keep full collections from walking it
    # again for every batch of records the plugin holds (the engine's workers do the same)
    gc.collect()
    gc.freeze()
    keep_freed_memory()
    return serve(info)


if __name__ == "__main__":
    sys.exit(main())
