"""Prometheus metrics of a run (``--metrics-port``), in text exposition format.

A private ``CollectorRegistry`` per run: nothing leaks between runs embedded in
one process (tests), and only cdcflow's series are served.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .task import TaskStats


class RunMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.read = Counter("cdcflow_source_records_read", "Records read from a source connector",
                            ["pipeline", "connector"], registry=r)
        self.written = Counter("cdcflow_destination_records_written", "Records a destination wrote durably",
                               ["pipeline", "connector"], registry=r)
        self.filtered = Counter("cdcflow_records_filtered", "Records dropped by processors", ["pipeline"], registry=r)
        self.nacked = Counter("cdcflow_records_nacked", "Records rejected, by the rejecting node",
                              ["pipeline", "node"], registry=r)
        self.dlq = Counter("cdcflow_dlq_records_written", "Records written to the dead-letter queue",
                           ["pipeline"], registry=r)
        self.lag = Gauge("cdcflow_source_lag_records", "Records the source reports it is behind (when it knows)",
                         ["pipeline", "connector", "partition"], registry=r)
        self.batch_seconds = Histogram("cdcflow_micro_batch_seconds", "Duration of one micro-batch",
                                       registry=r, buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.partitions = Gauge("cdcflow_live_partitions", "Source partitions still being run", registry=r)
        self._server = None

    def observe(self, stats: Iterable[TaskStats], seconds: float, live_partitions: int) -> None:
        for s in stats:
            t = s.task
            self.read.labels(t.pipeline, t.source).inc(s.read)
            for dest, n in s.written.items():
                self.written.labels(t.pipeline, dest).inc(n)
            self.filtered.labels(t.pipeline).inc(s.filtered)
            for node, n in s.nacked.items():
                self.nacked.labels(t.pipeline, node).inc(n)
            self.dlq.labels(t.pipeline).inc(s.dlq)
            lag = 0 if s.ended else s.lag
            if lag is not None:
                self.lag.labels(t.pipeline, t.source, t.partition).set(lag)
        self.batch_seconds.observe(seconds)
        self.partitions.set(live_partitions)

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Start the HTTP endpoint (``/metrics``); returns the bound port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        return server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
