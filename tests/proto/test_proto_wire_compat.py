"""Our protos are wire-identical to the peer SDK's (Conduit's) for every file both define.

Each side is dumped in its own subprocess: the peer package registers the same
proto file names in the default descriptor pool, so both cannot be imported
into one process.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

_DUMP = textwrap.dedent(
    """
    import importlib, json, sys
    from google.protobuf.descriptor import FieldDescriptor

    def label(f):
        if getattr(f, "is_repeated", None) is not None and not callable(f.is_repeated):
            return "repeated" if f.is_repeated else "optional"
        return "repeated" if f.label == FieldDescriptor.LABEL_REPEATED else "optional"

    def message(m, out):
        for f in m.fields:
            out.append(["field", m.full_name, f.name, f.number, f.type, label(f),
                        f.message_type.full_name if f.message_type else (f.enum_type.full_name if f.enum_type else ""),
                        f.containing_oneof.name if f.containing_oneof else ""])
        for e in m.enum_types:
            enum(e, out)
        for n in m.nested_types:
            message(n, out)

    def enum(e, out):
        for v in e.values:
            out.append(["enum", e.full_name, v.name, v.number])

    out = {}
    for name in sys.argv[1:]:
        fd = importlib.import_module(name).DESCRIPTOR
        rows = []
        for m in fd.message_types_by_name.values():
            message(m, rows)
        for e in fd.enum_types_by_name.values():
            enum(e, rows)
        for x in fd.extensions_by_name.values():
            rows.append(["extension", x.containing_type.full_name, x.name, x.number, x.type])
        for s in fd.services_by_name.values():
            for meth in s.methods:
                rows.append(["rpc", s.full_name, meth.name, meth.input_type.full_name, meth.output_type.full_name,
                             bool(getattr(meth, "client_streaming", False)), bool(getattr(meth, "server_streaming", False))])
        out[fd.name] = sorted(rows, key=repr)
    print(json.dumps(out))
    """
)

FILES = ["opencdc.v1.opencdc_pb2", "connector.v2.specifier_pb2", "connector.v2.source_pb2",
         "connector.v2.destination_pb2", "config.v1.parameter_pb2"]


def _dump(prefix: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _DUMP, *(prefix + f for f in FILES)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_descriptors_match_peer_sdk() -> None:
    if importlib.util.find_spec("conduit") is None:  # only looked up: importing it here would clash
        pytest.skip("peer SDK conduit-connector-sdk not installed (pip install --pre --no-deps conduit-connector-sdk)")
    ours, peer = _dump("cdcflow.pb."), _dump("conduit._grpc.")
    assert sorted(ours) == sorted(peer)
    for name in ours:
        assert ours[name], f"{name}: nothing dumped"
        only_ours = [r for r in ours[name] if r not in peer[name]]
        only_peer = [r for r in peer[name] if r not in ours[name]]
        assert not only_ours and not only_peer, f"{name}: ours only {only_ours}; peer only {only_peer}"
