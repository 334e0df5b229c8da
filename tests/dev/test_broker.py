"""The embedded Tansu broker: the session fixture carries real traffic; Broker starts and stops cleanly."""

import os
import socket
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdcflow.dev.broker import Broker

pytestmark = pytest.mark.kafka
from cdcflow.dev.process import ServiceError, ServiceProcess, _start_ticks, terminate


def test_produce_and_consume_through_the_fixture(kafka_broker, unique_name):
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    admin.create_topics([NewTopic(unique_name, num_partitions=3, replication_factor=1)])[unique_name].result(10)
    assert len(admin.list_topics(unique_name, timeout=5).topics[unique_name].partitions) == 3

    producer = Producer({"bootstrap.servers": kafka_broker, "enable.idempotence": True})
    sent = {(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode()) for p in range(3) for i in range(5)}
    for p, k, v in sorted(sent):
        producer.produce(unique_name, key=k, value=v, partition=p)
    assert producer.flush(10) == 0

    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": unique_name,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(unique_name, p, 0) for p in range(3)])
    got = set()
    try:
        while len(got) < len(sent):
            msg = consumer.poll(5)
            assert msg is not None, f"only {len(got)} of {len(sent)} messages arrived"
            assert msg.error() is None, msg.error()
            got.add((msg.partition(), msg.key(), msg.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(unique_name, p) for p in range(3)], timeout=5)
        assert [tp.offset for tp in committed] == [5, 5, 5]
    finally:
        consumer.close()
    assert got == sent


def test_broker_context_manager_stops_the_process(tmp_path):
    with Broker(log_path=tmp_path / "b.log") as broker:
        info = broker.info
        host, port = broker.bootstrap_servers.split(":")
        assert info.is_running()
        socket.create_connection((host, int(port)), timeout=2).close()
    assert not info.is_running()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2)


def test_port_in_use_is_a_service_error_with_the_log(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServiceError) as e:
            Broker(port=port, log_path=tmp_path / "b.log", startup_timeout=5).start()
    assert "kafka broker" in str(e.value) and str(tmp_path / "b.log") in str(e.value)


def test_terminate_never_signals_a_process_that_is_not_ours():
    """A recorded pid whose command line differs (pid reuse) is left alone."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        impostor = ServiceProcess("kafka broker", proc.pid, ["/some/tansu", "broker"], "127.0.0.1:1")
        assert not impostor.is_ours()
        assert terminate(impostor) is False
        assert proc.poll() is None
        real = ServiceProcess("x", proc.pid, [sys.executable, "-c", "import time; time.sleep(60)"], "")
        assert real.is_ours() and terminate(real, timeout=5) is True
        assert proc.wait(5) is not None
    finally:
        if proc.poll() is None:
            proc.kill()


def test_terminate_waits_until_the_process_is_dead_and_reaped():
    """A stop returns only when the pid is gone, even if the process stops looking like itself.

    The child execs ``sleep`` on SIGTERM, so its command line changes while it is still
    alive for a second (as an exiting process's command line vanishes before it is dead).
    The process is started without a Popen kept around, the way ``cdcflow dev down`` finds it.
    """
    script = ("import os, signal, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: os.execv('/bin/sleep', ['sleep', '1']))\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    argv = [sys.executable, "-c", script]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        info = ServiceProcess("x", proc.pid, argv, "", start_ticks=_start_ticks(proc.pid))
        assert terminate(info, timeout=10) is True
        with pytest.raises(ChildProcessError):  # reaped by terminate, not left a zombie
            os.waitpid(proc.pid, os.WNOHANG)
    finally:
        proc.stdout.close()
        if proc.returncode is None:
            try:
                proc.kill()
                proc.wait(5)
            except (ProcessLookupError, ChildProcessError):
                pass
