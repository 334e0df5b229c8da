"""``cdcflow dev up|status|down``: local Kafka broker + schema registry for the default setup."""

from __future__ import annotations

import json
import os

from ..errors import ConfigError
from ..schemaregistry.server import AUTH_ENV, parse_credentials
from . import services


def register(subparsers) -> None:
    dev = subparsers.add_parser("dev", help="local Kafka broker and schema registry for development")
    sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)

    def common(p):
        p.add_argument("--state", default=services.DEFAULT_STATE_DIR, metavar="DIR",
                       help=f"where pids, logs and registry data live (default: {services.DEFAULT_STATE_DIR})")
        p.add_argument("--json", action="store_true", help="print the result as one JSON object")

    p = sub.add_parser("up", help="start the embedded Tansu broker and the built-in registry in the background")
    common(p)
    p.add_argument("--host", default="127.0.0.1", help="address both listen on (default: 127.0.0.1)")
    p.add_argument("--broker-port", type=int, default=None, help="default: a free port")
    p.add_argument("--registry-port", type=int, default=None, help="default: a free port")
    p.add_argument("--registry-auth", nargs="?", const="", default=None, metavar="USER:PASSWORD",
                   help=f"basic auth for the registry; without a value, user:password is read from ${AUTH_ENV} "
                        "(keeps it out of the process list)")
    p.set_defaults(func=_up)

    p = sub.add_parser("status", help="show the services of a state directory (exit 1 unless all run)")
    common(p)
    p.set_defaults(func=_status)

    p = sub.add_parser("down", help="stop the services started by `dev up`")
    common(p)
    p.set_defaults(func=_down)


def _print_services(dev: services.DevServices, as_json: bool, header: str | None = None) -> None:
    if as_json:
        print(json.dumps(dev.to_json()))
        return
    if header:
        print(header)
    running = dev.running()
    for name, label in ((services.BROKER, "bootstrap servers"), (services.REGISTRY, "schema registry")):
        s = dev.services.get(name)
        if s is not None:
            state = "running" if running[name] else "NOT RUNNING"
            print(f"  {label:18} {s.address:28} pid {s.pid:<8} {state}")
    print(f"  {'state':18} {services.state_path(dev.state_dir)}")


def _registry_auth(value: str | None) -> str | None:
    if value is None:
        return None
    auth = value or os.environ.get(AUTH_ENV, "")
    try:
        parse_credentials(auth)
    except ValueError as e:
        raise ConfigError("dev", "--registry-auth", "user:password", f"{e} (in the option or ${AUTH_ENV})") from None
    return auth


def _up(args) -> int:
    dev, started = services.up(args.state, host=args.host, broker_port=args.broker_port,
                               registry_port=args.registry_port, registry_auth=_registry_auth(args.registry_auth))
    _print_services(dev, args.json, "started:" if started else "already running:")
    return 0


def _status(args) -> int:
    dev = services.load(args.state)
    if dev is None:
        if args.json:
            print(json.dumps({"state_dir": args.state, "services": {}}))
        else:
            print(f"no dev services recorded in {args.state}")
        return 1
    _print_services(dev, args.json)
    return 0 if all(dev.running().values()) else 1


def _down(args) -> int:
    stopped = services.down(args.state)
    if args.json:
        print(json.dumps({"stopped": stopped}))
    elif not stopped:
        print(f"no dev services recorded in {args.state}")
    else:
        for name, was_running in stopped.items():
            print(f"  {name}: {'stopped' if was_running else 'was not running'}")
    return 0
