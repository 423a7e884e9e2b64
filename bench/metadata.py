"""Metadata for every topic with many partitions: its cost on the broker's loop, and what it does to
a producer meanwhile.

Starts one sharebroker per ``--root`` (a checkout of this repository: e.g. ``before=/tmp/base``, a
``git worktree`` of the commit before a change, and ``after=.``), one after the other, creates
``--topics`` topics of ``--partitions`` partitions, and measures:

* ``cold ms``: the first Metadata (v12, all topics) after the topics were created, client round
  trip (what a client that connects first pays; the broker encodes each topic's entry then);
* ``rtt p50/p99 ms``: ``--requests`` more of them (and more until 2 s have passed), one at a time
  on one connection;
* ``cpu ms/req``: the broker's CPU time over those requests, per request (the loop's cost: the
  broker answers on one thread);
* ``producer p50/p99/max ms``: delivery latency of a confluent-kafka producer sending a small record
  every 2 ms (acks=1, linger 0) for ``--seconds``, alone (``alone`` row) and while another client
  asks Metadata for all topics back to back (``+metadata`` row): what other clients wait while the
  loop answers Metadata.

    python bench/metadata.py --root before=/tmp/meta-base --root after=. --topics 10 --partitions 1000
    python bench/metadata.py --kafka --topics 10 --partitions 1000   # this checkout, then Kafka 4.4 (1 GiB heap)
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import threading
import time

try:  # run as `python bench/x.py` or as `python -m bench.x`
    from . import peers  # type: ignore[import-not-found]
    from ._common import percentile, roots, table
    from .cpu_per_mb import start_root
except ImportError:  # pragma: no cover
    import peers  # type: ignore[no-redef]
    from _common import percentile, roots, table  # type: ignore[no-redef]
    from cpu_per_mb import start_root  # type: ignore[no-redef]

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

METADATA_VERSION = 12  # librdkafka 2.x asks v12


def metadata_all_frame(correlation_id: int) -> bytes:
    """Metadata v12 for every topic (null topic list), request header v2, client id "bench"."""
    client = b"bench"
    body = struct.pack(">hhih", 3, METADATA_VERSION, correlation_id, len(client)) + client + b"\x00"
    body += b"\x00" + b"\x00\x00" + b"\x00"  # topics null, no auto-creation, no topic operations, tags
    return struct.pack(">i", len(body)) + body


class MetadataClient:
    def __init__(self, bootstrap: str):
        host, port = peers.check_loopback(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def all_topics(self) -> int:
        """One round trip; the answer's size."""
        self.corr += 1
        self.sock.sendall(metadata_all_frame(self.corr))
        size = struct.unpack(">i", self._read(4))[0]
        body = self._read(size)
        assert struct.unpack_from(">i", body)[0] == self.corr
        return size

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def create_topics(bs: str, topics: int, partitions: int) -> list[str]:
    names = [f"meta-{i}" for i in range(topics)]
    admin = AdminClient({"bootstrap.servers": bs})
    for n in names:  # one request each: Kafka refuses more than 10,000 partition records in one
        admin.create_topics([NewTopic(n, partitions, 1)], operation_timeout=120, request_timeout=120)[n].result(180)
    deadline = time.monotonic() + 600  # Kafka answers CreateTopics before its broker has the partitions
    while True:
        md = admin.list_topics(timeout=60)
        if all(n in md.topics and len(md.topics[n].partitions) == partitions
               and all(p.leader >= 0 for p in md.topics[n].partitions.values()) for n in names):
            return names
        if time.monotonic() > deadline:
            raise TimeoutError("the partitions are not all led")
        time.sleep(1)


def producer_latencies(bs: str, topic: str, seconds: float) -> list[float]:
    """Delivery latencies (ms) of one small record every 2 ms for ``seconds``."""
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "acks": 1})
    out: list[float] = []

    p.produce(topic, b"warm")
    p.flush(10)
    start = time.perf_counter()
    for i in range(int(seconds / 0.002)):
        while (wait := start + i * 0.002 - time.perf_counter()) > 0:
            p.poll(wait)
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 100, on_delivery=lambda err, msg, t0=t0: out.append((time.perf_counter() - t0) * 1e3))
        p.poll(0)
    p.flush(30)
    return out


def metadata_storm(bs: str, stop: threading.Event, count: list) -> None:
    c = MetadataClient(bs)
    try:
        while not stop.is_set():
            c.all_topics()
            count[0] += 1
    finally:
        c.close()


def one_root(name: str, path: str, args) -> list[dict]:
    return measure(start_root(path, name, ["--set", "sharebroker.durability=page-cache"]), name, args)


def measure(bp: peers.BrokerProc, name: str, args) -> list[dict]:
    """The figures of the module docstring on the started broker ``bp``; stops it."""
    rows = []
    try:
        bs = bp.bootstrap
        create_topics(bs, args.topics, args.partitions)
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("meta-producer", 1, 1)])["meta-producer"].result(30)
        c = MetadataClient(bs)
        t0 = time.perf_counter()
        size = c.all_topics()
        cold = (time.perf_counter() - t0) * 1e3
        rtts = []
        cpu0, end = bp.cpu(), time.perf_counter() + 2.0  # CPU time comes in 10 ms ticks: enough of them
        while len(rtts) < args.requests or time.perf_counter() < end:
            t0 = time.perf_counter()
            c.all_topics()
            rtts.append((time.perf_counter() - t0) * 1e3)
        cpu = (bp.cpu() - cpu0) * 1e3 / len(rtts)
        c.close()
        rtts.sort()
        rows.append({"root": name, "partitions": args.topics * args.partitions, "bytes": size, "cold ms": cold,
                     "requests": len(rtts), "rtt p50 ms": statistics.median(rtts), "rtt p99 ms": percentile(rtts, 99),
                     "cpu ms/req": cpu})
        alone = sorted(producer_latencies(bs, "meta-producer", args.seconds))
        stop, count = threading.Event(), [0]
        storm = threading.Thread(target=metadata_storm, args=(bs, stop, count), daemon=True)
        storm.start()
        try:
            loaded = sorted(producer_latencies(bs, "meta-producer", args.seconds))
        finally:
            stop.set()
            storm.join(60)
        for label, lat in (("alone", alone), (f"+metadata ({count[0] / args.seconds:.0f}/s)", loaded)):
            rows.append({"root": name, "producer": label, "n": len(lat), "p50 ms": statistics.median(lat),
                         "p99 ms": percentile(lat, 99), "max ms": lat[-1]})
    finally:
        bp.stop()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR",
                    help="repository checkout to start the broker from (repeatable; default: this one)")
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=1000, help="per topic")
    ap.add_argument("--requests", type=int, default=30,
                    help="timed Metadata requests after the first (at least; they go on for 2 s)")
    ap.add_argument("--seconds", type=float, default=5.0, help="producer run, alone and with Metadata load")
    ap.add_argument("--kafka", action="store_true", help="also Apache Kafka 4.4 (tests/kafka_ref), in the same run")
    ap.add_argument("--kafka-heap", default="-Xmx1g")
    args = ap.parse_args(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()}", flush=True)
    metadata_rows, producer_rows = [], []
    runs = [(name, lambda name=name, path=path: one_root(name, path, args)) for name, path in roots(args.root)]
    if args.kafka:
        runs.append(("kafka", lambda: measure(peers.start_kafka(heap=args.kafka_heap, timeout=600), "kafka", args)))
    for _name, run in runs:
        for row in run():
            (producer_rows if "producer" in row else metadata_rows).append(row)
            print(row, file=sys.stderr, flush=True)
    table(metadata_rows, ["root", "partitions", "bytes", "cold ms", "requests", "rtt p50 ms", "rtt p99 ms",
                          "cpu ms/req"])
    print()
    table(producer_rows, ["root", "producer", "n", "p50 ms", "p99 ms", "max ms"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
