"""Many partitions on one broker under a descriptor limit, beside Apache Kafka 4.4.

Every broker runs with ``--nofile`` (20,000) as its open-file limit (set in this process before the
brokers are spawned: they inherit it). ``scale`` (per broker kind, one after the other):

1. start it on an empty data directory; create ``--partitions`` partitions in topics of
   ``--per-topic`` (one CreateTopics each, timed);
2. produce one 100-byte record to each partition (one confluent-kafka producer);
3. stop it (SIGTERM) and start it again on the same directory: ``restart s`` is spawn to every
   partition led in a Metadata answer (ours accepts only once every log is loaded);
4. fetch from each partition (one consumer assigned every partition from offset 0, until it has
   every record), then describe every topic (AdminClient.describe_topics);
5. RSS, descriptors in use (``/proc/PID/fd``) and threads after each step; then DeleteTopics of all.

``latency``: a producer sends a 100-byte record every 2 ms (acks=1, linger 0) to an existing
one-partition topic; meanwhile another client creates a ``--per-topic``-partition topic, then
deletes it. Delivery latency p50/p99/max of the records sent during each operation (and alone);
with ``--stall-ms N`` ours logs event-loop stalls of N ms or more and the run counts them.

    python bench/partitions.py scale --kind ours --kind kafka --partitions 50000
    python bench/partitions.py latency --kind ours --kind kafka

Kafka 4.4 runs with a 1 GiB heap (``--kafka-heap``); ``--kafka-partitions`` caps what it is given
(it may not survive the full count under the same descriptor limit: the run says what happened).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import statistics
import sys
import tempfile
import threading
import time

try:  # run as `python bench/x.py` or as `python -m bench.x`
    from . import peers  # type: ignore[import-not-found]
    from ._common import percentile, table
except ImportError:  # pragma: no cover
    import peers  # type: ignore[no-redef]
    from _common import percentile, table  # type: ignore[no-redef]

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return -1


class Ours:
    """sharebroker on a data directory that outlives its process."""

    def __init__(self, extra: list[str]):
        self.workdir = tempfile.mkdtemp(prefix="sharebroker-parts-")
        self.data = os.path.join(self.workdir, "data")
        self.extra = extra
        self.bp: peers.BrokerProc | None = None
        self.logs: list[str] = []  # each start's log directory
        self.port = peers.free_port()  # the same at the restart

    def start(self) -> float:
        t0 = time.perf_counter()
        self.bp = peers.start_ours(self.port, data_dir=self.data, extra_args=self.extra, keep=True, timeout=900)
        self.logs.append(self.bp.workdir)
        return t0

    @property
    def bootstrap(self) -> str:
        return self.bp.bootstrap

    @property
    def pid(self) -> int:
        return self.bp.pid

    def alive(self) -> bool:
        return self.bp is not None and self.bp.alive()

    def stop(self) -> None:
        self.bp.stop(timeout=600)

    def close(self) -> None:
        if self.bp is not None:
            self.bp.stop()
        remove_later([self.workdir, *self.logs])


class Kafka:
    def __init__(self, heap: str):
        self.disk = peers.KafkaOnDisk(timeout=900, heap=heap)

    def start(self) -> float:
        t0 = time.perf_counter()
        if self.disk.node.proc is None:
            self.disk.start()
        else:
            self.disk.respawn()
            self.disk.wait_answering()
        return t0

    @property
    def bootstrap(self) -> str:
        return self.disk.bootstrap

    @property
    def pid(self) -> int:
        return self.disk.pid

    def alive(self) -> bool:
        return self.disk.node.alive()

    def stop(self) -> None:
        self.disk.stop()

    def why(self) -> str:
        """The lines of its logs that say why it failed (the directory is removed afterwards)."""
        keys = ("Too many open files", "Map failed", "OutOfMemory", "FATAL", "Exiting", "ERROR")
        lines = self.disk.node.tail(4000).splitlines()
        return "\n".join([line for line in lines if any(k in line for k in keys)][:12])

    def close(self) -> None:
        self.disk.stop()
        remove_later([str(self.disk.ref.directory)])


def remove_later(paths: list[str]) -> None:
    """Removing 50,000 partition directories takes minutes on a disk with discard: not waited for."""
    subprocess.Popen(["rm", "-rf", *paths], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


def open_broker(kind: str, args) -> Ours | Kafka:
    if kind == "kafka":
        return Kafka(args.kafka_heap)
    extra = ["--set", "sharebroker.durability=page-cache"] if kind == "ours-pagecache" else []
    if args.stall_ms:
        extra += ["--set", f"sharebroker.loop.stall.log.ms={args.stall_ms}"]
    return Ours(extra)


def loop_stalls(b) -> str:
    """Ours: how many event-loop stalls its log reports once started (``--stall-ms``; start-up's left
    out), the longest, and how long the loop thread was blocked in the kernel in the worst of them."""
    if not isinstance(b, Ours) or b.bp is None:
        return ""
    with open(b.bp.log_path, errors="replace") as f:
        log = f.readlines()
    first = next((i for i, line in enumerate(log) if "coordinators loaded" in line), 0)
    lines = [line for line in log[first:] if "event loop stalled" in line]
    ms = [int(line.split("stalled ", 1)[1].split(" ", 1)[0]) for line in lines]
    blocked = [int(line.split("blocked ", 1)[1].split(" ", 1)[0]) for line in lines if "blocked " in line]
    return f"{len(lines)} loop stalls, longest {max(ms, default=0)} ms, most blocked {max(blocked, default=0)} ms"


def snapshot(b, step: str, seconds: float, **extra) -> dict:
    rss = peers.rss_mb(b.pid)[0] if b.alive() else float("nan")
    row = {"step": step, "s": seconds, "RSS MiB": rss, "fds": descriptors(b.pid), "threads": threads(b.pid)}
    row.update(extra)
    print(row, file=sys.stderr, flush=True)
    return row


def all_led(b, topics: list[str], per: int, timeout: float) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = admin.list_topics(timeout=30)
            if all(t in md.topics and len(md.topics[t].partitions) == per
                   and all(p.leader >= 0 for p in md.topics[t].partitions.values()) for t in topics):
                return
        except Exception:  # noqa: BLE001 -- not answering yet
            pass
        if time.monotonic() > deadline or not b.alive():
            raise TimeoutError("partitions not all led" + ("" if b.alive() else ": the broker exited"))
        time.sleep(0.5)


def scale(kind: str, args) -> list[dict]:
    per = args.per_topic
    topics = [f"parts-{i}" for i in range((args.kafka_partitions if kind == "kafka" else args.partitions) // per)]
    b = open_broker(kind, args)
    rows: list[dict] = []
    try:
        scale_steps(b, topics, per, rows)
    except Exception as e:  # noqa: BLE001 -- what the broker does at this scale is the figure
        rows.append(snapshot(b, "failed", float("nan"), note=f"{type(e).__name__}: {str(e)[:100]}"))
        if isinstance(b, Kafka):
            print(b.why(), flush=True)
    finally:
        b.close()
    return rows


def scale_steps(b, topics: list[str], per: int, rows: list[dict]) -> None:
    """The steps of ``scale`` on ``b``, each a row of ``rows``."""
    n_topics = len(topics)
    t0 = b.start()
    rows.append(snapshot(b, "started, empty", time.perf_counter() - t0))
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    t0, slowest = time.perf_counter(), 0.0
    for i, name in enumerate(topics):
        t1 = time.perf_counter()
        try:
            admin.create_topics([NewTopic(name, per, 1)], operation_timeout=300,
                                request_timeout=300)[name].result(600)
        except Exception as e:  # noqa: BLE001 -- what the broker does at this scale is the figure
            rows.append(snapshot(b, f"CreateTopics {i + 1} failed", time.perf_counter() - t0, note=str(e)[:120]))
            return
        slowest = max(slowest, time.perf_counter() - t1)
        if not b.alive():
            rows.append(snapshot(b, f"died creating topic {i + 1}", time.perf_counter() - t0))
            return
    all_led(b, topics, per, 900)
    rows.append(snapshot(b, f"created {n_topics * per:,} partitions", time.perf_counter() - t0,
                         note=f"slowest CreateTopics {slowest:.2f} s"))
    if not b.alive():
        rows.append(snapshot(b, "exited after the creation", 0.0))
        return
    t0, failed = time.perf_counter(), []
    for name in topics:  # a producer per topic: one librdkafka producer of 50,000 partitions crawls
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "acks": 1})
        for part in range(per):
            p.produce(name, b"x" * 100, partition=part,
                      on_delivery=lambda err, _m: failed.append(err) if err else None)
            p.poll(0)
        p.flush(600)
    rows.append(snapshot(b, "produced one record to each", time.perf_counter() - t0, note=f"failed {len(failed)}"))
    t0 = time.perf_counter()
    b.stop()
    rows.append({"step": "stopped (SIGTERM)", "s": time.perf_counter() - t0})
    t0 = b.start()
    if isinstance(b, Ours):
        accept = time.perf_counter() - t0
    else:
        accept = float("nan")
    all_led(b, topics, per, 900)
    rows.append(snapshot(b, "restarted (all led)", time.perf_counter() - t0, note=f"accepting {accept:.2f} s"))
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "parts-bench", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(name, part, 0) for name in topics for part in range(per)])
    t0, got, deadline = time.perf_counter(), set(), time.monotonic() + 600
    while len(got) < n_topics * per and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got.add((m.topic(), m.partition()))
    c.close()
    rows.append(snapshot(b, "fetched from each", time.perf_counter() - t0, note=f"{len(got):,} partitions"))
    from confluent_kafka import TopicCollection
    t0 = time.perf_counter()
    described = 0
    for fut in admin.describe_topics(TopicCollection(topics), request_timeout=300).values():
        described += len(fut.result(600).partitions)
    rows.append(snapshot(b, "described all", time.perf_counter() - t0, note=f"{described:,} partitions"))
    t0 = time.perf_counter()
    for fut in admin.delete_topics(topics, operation_timeout=300, request_timeout=300).values():
        fut.result(600)
    rows.append(snapshot(b, "deleted all", time.perf_counter() - t0))


def latency(kind: str, args) -> list[dict]:
    """Delivery latencies of a steady producer alone, during CreateTopics and during DeleteTopics."""
    b = open_broker(kind, args)
    try:
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("steady", 1, 1)])["steady"].result(60)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": 1})
        p.produce("steady", b"warm")
        p.flush(30)
        sent: list[tuple[float, float]] = []  # (sent at, latency ms)
        phases: dict[str, tuple[float, float]] = {}
        stop = threading.Event()

        def admin_ops() -> None:
            time.sleep(args.alone)
            t = time.perf_counter()
            admin.create_topics([NewTopic("big", args.per_topic, 1)], operation_timeout=300,
                                request_timeout=300)["big"].result(600)
            all_led(b, ["big"], args.per_topic, 300)
            phases["CreateTopics"] = (t, time.perf_counter())
            time.sleep(1.0)
            t = time.perf_counter()
            admin.delete_topics(["big"], operation_timeout=300, request_timeout=300)["big"].result(600)
            phases["DeleteTopics"] = (t, time.perf_counter())
            time.sleep(1.0)
            stop.set()

        th = threading.Thread(target=admin_ops, daemon=True)
        th.start()
        start = time.perf_counter()
        i = 0
        while not stop.is_set():
            while (wait := start + i * 0.002 - time.perf_counter()) > 0:
                p.poll(wait)
            t0 = time.perf_counter()
            p.produce("steady", b"x" * 100,
                      on_delivery=lambda err, _m, t0=t0: sent.append((t0, (time.perf_counter() - t0) * 1e3)))
            p.poll(0)
            i += 1
        p.flush(60)
        th.join(60)
        phases["alone"] = (start, start + args.alone)
        rows = []
        for name in ("alone", "CreateTopics", "DeleteTopics"):
            a, z = phases[name]
            lat = sorted(ms for t, ms in sent if a <= t <= z)
            rows.append({"broker": kind, "during": name, "op s": z - a, "n": len(lat),
                         "p50 ms": statistics.median(lat) if lat else float("nan"),
                         "p99 ms": percentile(lat, 99), "max ms": lat[-1] if lat else float("nan")})
            print(rows[-1], file=sys.stderr, flush=True)
        if args.stall_ms:
            print(f"{kind}: {loop_stalls(b)}", flush=True)
        return rows
    finally:
        b.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["scale", "latency"])
    ap.add_argument("--kind", action="append", choices=["ours", "ours-pagecache", "kafka"])
    ap.add_argument("--partitions", type=int, default=50000)
    ap.add_argument("--kafka-partitions", type=int, default=None, help="default: --partitions")
    ap.add_argument("--per-topic", type=int, default=1000)
    ap.add_argument("--nofile", type=int, default=20000, help="open-file limit of the brokers")
    ap.add_argument("--kafka-heap", default="-Xmx1g")
    ap.add_argument("--alone", type=float, default=3.0, help="latency: seconds of the producer alone first")
    ap.add_argument("--stall-ms", type=int, default=0,
                    help="latency, ours: log event-loop stalls of this many ms and count them (0: off)")
    args = ap.parse_args(argv)
    args.kafka_partitions = args.kafka_partitions or args.partitions
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = args.nofile if hard == resource.RLIM_INFINITY else min(args.nofile, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    peers.terminate_on_sigterm()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()}, "
          f"open-file limit {limit}", flush=True)
    for kind in args.kind or ["ours", "kafka"]:
        if args.what == "scale":
            print(f"== {kind}: {args.kafka_partitions if kind == 'kafka' else args.partitions:,} partitions "
                  f"in topics of {args.per_topic:,}", flush=True)
            table(scale(kind, args), ["step", "s", "RSS MiB", "fds", "threads", "note"])
        else:
            table(latency(kind, args), ["broker", "during", "op s", "n", "p50 ms", "p99 ms", "max ms"])
        print(f"load average {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
