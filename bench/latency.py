"""End-to-end latency at a fixed produce rate, with default client settings.

A confluent-kafka Producer sends records at a steady rate (5,000 msg/s for 10 s
by default) to a fresh 1-partition topic; each value starts with the send time
(time.monotonic_ns, taken just before produce()) and a sequence number.  A
Consumer (assign mode, in a thread of the same process) polls them and records
receive-time minus send-time.  Both clients keep librdkafka defaults (only
bootstrap.servers and group.id are set), so the consumer's fetch.wait.max.ms
stays 500: a broker that does not answer a waiting Fetch as soon as data
arrives shows up here as latencies near 500 ms.

Prints p50/p90/p99/p99.9/max latency in ms, records lost, achieved send rate
and broker CPU use during the run; with two brokers, the ratio first/second.

    python bench/latency.py --start tansu
    python bench/latency.py --start both --seconds 5
    python bench/latency.py --start ours+kafka --warm-seconds 10   # beside Kafka 4.4, its JIT warm
"""

from __future__ import annotations

import argparse
import struct
import sys
import threading
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

HDR = struct.Struct(">qqB")  # send monotonic_ns, sequence, kind (0 warm-up, 1 measured)
WARMUP, MEASURED = 0, 1


class Receiver(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, extra: dict):
        super().__init__(daemon=True, name="latency-consumer")
        self.bootstrap, self.topic, self.partitions, self.extra = bootstrap, topic, partitions, extra
        self.lat_ns: list[int] = []
        self.seqs: set[int] = set()
        self.dups = 0
        self.warm = 0
        self.errors: list[str] = []
        self.stop_evt = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": C.unique("bench-lat-g"), **self.extra})
        try:
            c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            self.ready.set()
            poll, now_ns, unpack = c.poll, time.monotonic_ns, HDR.unpack_from
            lat, seqs = self.lat_ns, self.seqs
            while not self.stop_evt.is_set():
                m = poll(0.1)
                if m is None:
                    continue
                t = now_ns()
                if m.error() is not None:
                    if len(self.errors) < 5:
                        self.errors.append(str(m.error()))
                    continue
                sent, seq, kind = unpack(m.value())
                if kind == WARMUP:
                    self.warm += 1
                    continue
                if seq in seqs:
                    self.dups += 1
                    continue
                seqs.add(seq)
                lat.append(t - sent)
        finally:
            c.close()


def paced(p: Producer, topic: str, pad: bytes, rate: float, total: int, kind: int, seq0: int) -> None:
    """Send ``total`` records at ``rate`` per second from a schedule (sleeping until the next is due)."""
    interval = 1.0 / rate
    produce, poll, mono, now_ns, pack = p.produce, p.poll, time.monotonic, time.monotonic_ns, HDR.pack
    sleep = time.sleep
    t0 = mono()
    i = 0
    while i < total:
        due = min(total, int((mono() - t0) * rate) + 1)
        while i < due:
            while True:
                try:
                    produce(topic, pack(now_ns(), seq0 + i, kind) + pad)
                    break
                except BufferError:
                    poll(0.001)
            i += 1
        poll(0)
        delay = t0 + i * interval - mono()
        if delay > 0:
            sleep(delay)


def run(bp, args) -> dict:
    topic = C.unique("bench-lat")
    C.create_topic(bp.bootstrap, topic, args.partitions)
    rx = Receiver(bp.bootstrap, topic, args.partitions, args.cconf)
    rx.start()
    rx.ready.wait(30)

    dr_errors: list[str] = []

    def on_delivery(err, _msg):
        if err is not None and len(dr_errors) < 1000:
            dr_errors.append(str(err))

    p = Producer({"bootstrap.servers": bp.bootstrap, "on_delivery": on_delivery, **args.pconf})
    pad = b"\0" * max(0, args.size - HDR.size)

    # warm-up: trickle records until the consumer sees one (connections, metadata, first fetch)
    deadline = time.monotonic() + args.warmup_timeout
    seq = 0
    while rx.warm == 0 and time.monotonic() < deadline:
        p.produce(topic, HDR.pack(time.monotonic_ns(), seq, WARMUP) + pad)
        seq += 1
        p.poll(0.05)
    if rx.warm == 0:
        rx.stop_evt.set()
        raise RuntimeError(f"no record came back within {args.warmup_timeout}s of warm-up")
    time.sleep(0.5)
    p.poll(0)

    if args.warm_seconds > 0:  # the same paced load, not counted (a JVM broker's JIT warms up here)
        paced(p, topic, pad, args.rate, int(args.rate * args.warm_seconds), WARMUP, 1 << 40)
        time.sleep(0.5)
    total = int(args.rate * args.seconds)
    mono, sleep = time.monotonic, time.sleep
    cpu0, ccpu0 = bp.cpu(), C.client_cpu()
    t0 = mono()
    paced(p, topic, pad, args.rate, total, MEASURED, 0)
    send_secs = mono() - t0
    p.flush(30)
    drain_deadline = mono() + args.drain_timeout
    while len(rx.seqs) < total and mono() < drain_deadline:
        sleep(0.05)
    cpu1, ccpu1 = bp.cpu(), C.client_cpu()
    wall = mono() - t0
    rx.stop_evt.set()
    rx.join(30)

    lat = sorted(x / 1e6 for x in rx.lat_ns)
    got = len(lat)
    row = {
        "broker": bp.name, "sent": total, "recv": got, "lost": total - got, "dups": rx.dups,
        "rate": total / send_secs,
        "p50_ms": C.percentile(lat, 50), "p90_ms": C.percentile(lat, 90), "p99_ms": C.percentile(lat, 99),
        "p99.9_ms": C.percentile(lat, 99.9), "max_ms": lat[-1] if lat else float("nan"),
        "mean_ms": sum(lat) / got if got else float("nan"),
        "broker_cpu%": 100 * (cpu1 - cpu0) / wall, "client_cpu%": 100 * (ccpu1 - ccpu0) / wall,
    }
    if dr_errors or rx.errors:
        print(f"!! {bp.name}: {len(dr_errors)} delivery errors {dr_errors[:3]}, consumer errors {rx.errors}",
              file=sys.stderr)
    return row


COLS = ["broker", "sent", "recv", "lost", "dups", "rate", "p50_ms", "p90_ms", "p99_ms", "p99.9_ms", "max_ms",
        "mean_ms", "broker_cpu%", "client_cpu%"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_target_args(ap)
    ap.add_argument("--rate", type=float, default=5000.0, help="records per second (default 5000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured sending time (default 10)")
    ap.add_argument("--size", type=int, default=100, help="value size in bytes (min %d)" % HDR.size)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--warmup-timeout", type=float, default=30.0)
    ap.add_argument("--warm-seconds", type=float, default=0.0,
                    help="send at the same rate for this long first, not counted (e.g. 10 for a JVM's JIT)")
    ap.add_argument("--drain-timeout", type=float, default=10.0,
                    help="after the last send, wait this long for missing records")
    ap.add_argument("--producer-config", action="append", default=[], metavar="K=V",
                    help="override a producer default (diagnostics only: the headline figure uses defaults)")
    ap.add_argument("--consumer-config", action="append", default=[], metavar="K=V",
                    help="override a consumer default, e.g. fetch.wait.max.ms=10 (diagnostics only)")
    args = ap.parse_args(argv)
    args.size = max(args.size, HDR.size)
    args.pconf = dict(kv.split("=", 1) for kv in args.producer_config)
    args.cconf = dict(kv.split("=", 1) for kv in args.consumer_config)

    rows = []
    for bp in C.each_broker(args):
        try:
            row = run(bp, args)
        except Exception as e:  # noqa: BLE001
            print(f"!! {bp.name} failed: {e!r}", file=sys.stderr, flush=True)
            continue
        C.table([row], COLS)
        rows.append(row)

    print(f"\n# end-to-end latency at {args.rate:g} msg/s for {args.seconds:g} s"
          + (f" after {args.warm_seconds:g} s not counted" if args.warm_seconds else "") + f", {args.size} B values,"
          " client settings: " + (", ".join(f"{k}={v}" for k, v in {**args.pconf, **args.cconf}.items())
                                   or "defaults (fetch.wait.max.ms=500)"))
    C.table(rows, COLS)
    ratios = []
    if len(rows) >= 2:
        a, b = rows[0], rows[1]
        ratios = [{"stat": k, a["broker"]: a[k], b["broker"]: b[k], f"{a['broker']}/{b['broker']}": C.ratio(a[k], b[k])}
                  for k in ("p50_ms", "p99_ms", "max_ms", "broker_cpu%")]
        print(f"\n# ratio {a['broker']}/{b['broker']} (> 1 means {a['broker']} is slower / burns more CPU)")
        C.table(ratios, list(ratios[0].keys()))
    C.write_json(args.json, {"bench": "latency", "rate": args.rate, "seconds": args.seconds, "size": args.size,
                             "rows": rows, "ratios": ratios})
    return 0


if __name__ == "__main__":
    sys.exit(main())
