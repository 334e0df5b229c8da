"""``cdcflow registry serve``: run the built-in Confluent-compatible schema registry."""

from __future__ import annotations

from ..errors import ConfigError
from .server import add_serve_arguments, auth_from_args, serve


def register(subparsers) -> None:
    registry = subparsers.add_parser("registry", help="the built-in Confluent-compatible schema registry")
    sub = registry.add_subparsers(dest="registry_command", metavar="COMMAND", required=True)
    p = sub.add_parser("serve", help="serve the registry REST API until interrupted",
                       description="Serve a Confluent-compatible schema registry (Avro) over a persistent "
                                   "store in --data; subjects and ids survive restarts.")
    add_serve_arguments(p)
    p.set_defaults(func=_serve)


def _serve(args) -> int:
    try:
        auth = auth_from_args(args)
    except ValueError as e:
        raise ConfigError("registry", "--auth", "user:password", str(e)) from None
    serve(host=args.host, port=args.port, data_dir=args.data, auth=auth)
    return 0
