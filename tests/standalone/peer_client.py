"""A Conduit-side host built only from the peer SDK's generated connector.v2 stubs.

Run as a script (never imported by the tests: the peer registers the same proto
file names as cdcflow). It launches a plugin the way go-plugin does, drives one
side through its whole lifecycle and prints what happened as one JSON object.

usage: peer_client.py LAUNCHER source|destination CONFIG_JSON [RECORD_COUNT]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

import conduit._grpc  # noqa: F401 - puts the peer's generated packages on sys.path
from connector.v2 import (  # noqa: E402
    destination_pb2, destination_pb2_grpc, source_pb2, source_pb2_grpc, specifier_pb2, specifier_pb2_grpc,
)
from opencdc.v1 import opencdc_pb2  # noqa: E402

COOKIE = ("CONDUIT_PLUGIN_MAGIC_COOKIE", "204e8e812c3a1bb73b838928c575b42a105dd2e9aa449be481bc4590486df53f")


def launch(path: str) -> tuple[subprocess.Popen, grpc.Channel, str]:
    env = dict(os.environ, PLUGIN_PROTOCOL_VERSIONS="1,2", PLUGIN_MIN_PORT="20000", PLUGIN_MAX_PORT="20500",
               CONDUIT_CONNECTOR_ID="pipeline:conn", CONDUIT_CONNECTOR_LOG_LEVEL="debug")
    env[COOKIE[0]] = COOKIE[1]
    proc = subprocess.Popen([path], stdout=subprocess.PIPE, env=env)
    line = proc.stdout.readline().decode().strip()
    core, app, network, address, protocol = line.split("|")[:5]
    assert (core, app, protocol) == ("1", "2", "grpc"), line
    target = address if network == "tcp" else f"unix:{address}"
    channel = grpc.insecure_channel(target)
    health = health_pb2_grpc.HealthStub(channel)
    for _ in range(200):
        try:
            if health.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=1).status == 1:
                break
        except grpc.RpcError:
            time.sleep(0.05)
    return proc, channel, line


def drive_source(channel: grpc.Channel, config: dict, want: int, out: dict) -> None:
    stub = source_pb2_grpc.SourcePluginStub(channel)
    stub.Configure(source_pb2.Source.Configure.Request(config=config))
    out["steps"].append("Configure")
    stub.LifecycleOnCreated(source_pb2.Source.Lifecycle.OnCreated.Request(config=config))
    out["steps"].append("LifecycleOnCreated")
    stub.Open(source_pb2.Source.Open.Request(position=b""))
    out["steps"].append("Open")
    import queue

    requests: queue.Queue = queue.Queue()

    def gen():
        while True:
            item = requests.get()
            if item is None:
                return
            yield item

    stream = stub.Run(gen())
    out["steps"].append("Run")
    positions, metadata = [], None
    it = iter(stream)
    while len(positions) < want:
        resp = next(it)
        for r in resp.records:
            positions.append(r.position.hex())
            metadata = metadata or dict(r.metadata)
        requests.put(source_pb2.Source.Run.Request(ack_positions=[r.position for r in resp.records]))
    last = stub.Stop(source_pb2.Source.Stop.Request()).last_position.hex()
    out["steps"].append("Stop")
    # keep the stream until the last position arrived, acking as we go
    while positions[-1] != last:
        resp = next(it)
        positions.extend(r.position.hex() for r in resp.records)
        requests.put(source_pb2.Source.Run.Request(ack_positions=[r.position for r in resp.records]))
    requests.put(None)
    for _ in it:  # the plugin ends the stream once ours is closed
        pass
    out["steps"].append("RunEnded")
    stub.Teardown(source_pb2.Source.Teardown.Request())
    out["steps"].append("Teardown")
    out.update(positions=positions, last_position=last, metadata=metadata)


def drive_destination(channel: grpc.Channel, config: dict, count: int, out: dict) -> None:
    stub = destination_pb2_grpc.DestinationPluginStub(channel)
    stub.Configure(destination_pb2.Destination.Configure.Request(config=config))
    out["steps"].append("Configure")
    stub.Open(destination_pb2.Destination.Open.Request())
    out["steps"].append("Open")
    records = []
    for i in range(count):
        after = struct_pb2.Struct()
        after.update({"id": i, "name": f"row {i}"})
        data = opencdc_pb2.Data(structured_data=after) if i % 2 else opencdc_pb2.Data(raw_data=f"raw {i}".encode())
        records.append(opencdc_pb2.Record(position=f"pos-{i}".encode(), operation=opencdc_pb2.OPERATION_CREATE,
                                          metadata={"opencdc.collection": "peer"},
                                          key=opencdc_pb2.Data(raw_data=f"k{i}".encode()),
                                          payload=opencdc_pb2.Change(after=data)))
    half = count // 2
    reqs = [destination_pb2.Destination.Run.Request(records=records[:half]),
            destination_pb2.Destination.Run.Request(records=records[half:])]
    acks = []
    stream = stub.Run(iter(reqs))
    out["steps"].append("Run")
    for resp in stream:
        acks.extend({"position": a.position.decode(), "error": a.error} for a in resp.acks)
        if len(acks) == count:
            break
    stub.Stop(destination_pb2.Destination.Stop.Request(last_position=records[-1].position))
    out["steps"].append("Stop")
    stub.Teardown(destination_pb2.Destination.Teardown.Request())
    out["steps"].append("Teardown")
    out["acks"] = acks


def main() -> None:
    path, side, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    proc, channel, line = launch(path)
    out: dict = {"handshake": line, "steps": []}
    spec = specifier_pb2_grpc.SpecifierPluginStub(channel).Specify(specifier_pb2.Specifier.Specify.Request())
    s = spec.specification
    out["spec"] = {"name": s.name, "version": s.version, "source_params": sorted(s.source_params),
                   "destination_params": sorted(s.destination_params)}
    out["steps"].append("Specify")
    if side == "source":
        drive_source(channel, config, count, out)
    else:
        drive_destination(channel, config, count, out)
    shutdown = channel.unary_unary("/plugin.GRPCController/Shutdown",
                                   request_serializer=lambda _: b"", response_deserializer=lambda b: b)
    shutdown(None, timeout=10)
    out["steps"].append("Shutdown")
    out["exit_code"] = proc.wait(timeout=10)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
