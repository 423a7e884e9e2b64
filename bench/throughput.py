"""Produce/consume throughput with confluent-kafka, plus broker CPU per MB.

For each broker: create a topic (AdminClient, 1 partition by default), produce N
records of 100 B, consume them all back (Consumer in assign mode, from the
beginning); then the same with 1 KiB records on a fresh topic.  Prints
records/s, MB/s (MB = 10^6 bytes of record values) and the broker's CPU
milliseconds per MB, read from /proc/PID/stat deltas (utime+stime).  With two brokers it also
prints the ratio first/second (``--start both`` runs ours then tansu).

    python bench/throughput.py --start tansu
    python bench/throughput.py --start both --scale 0.2
    python bench/throughput.py --bootstrap 127.0.0.1:9092 --name ours
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

DEFAULT_N_100 = 2_000_000
DEFAULT_N_1K = 600_000


def _kv(items: list[str]) -> dict:
    out = {}
    for it in items:
        k, _, v = it.partition("=")
        out[k] = v
    return out


def produce(bootstrap: str, topic: str, n: int, size: int, extra: dict, timeout: float) -> dict:
    errors: list = []

    def on_err(err, _msg):  # only called for failures (delivery.report.only.error)
        if len(errors) < 5:
            errors.append(err)
        else:
            errors.append(None)

    conf = {"bootstrap.servers": bootstrap, "delivery.report.only.error": True, "on_delivery": on_err}
    conf.update(extra)
    p = Producer(conf)
    value = os.urandom(size)
    prod = p.produce
    poll = p.poll
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                prod(topic, value)
                break
            except BufferError:  # local queue full: let librdkafka drain it
                poll(0.01)
        if not i & 0x3FF:
            poll(0)
    left = p.flush(timeout)
    secs = time.perf_counter() - t0
    return {"secs": secs, "unflushed": left, "errors": len(errors), "first_errors": [str(e) for e in errors if e][:5]}


def consume(bootstrap: str, topic: str, partitions: int, extra: dict, idle_timeout: float,
            want: int = 0, fetch_stats: bool = False) -> dict:
    """Read the topic from the beginning until ``want`` records (or the high watermarks, if larger) arrived."""
    conf = {"bootstrap.servers": bootstrap, "group.id": C.unique("bench-tp-g"), "enable.auto.commit": False,
            # librdkafka's default (1000 ms) parks the fetcher for a whole second each time its local queue
            # passes queued.min.messages, which caps 100 B consumption near 270k rec/s whatever the broker
            # does; 10 ms keeps the figure about the broker.  Override with --consumer-config.
            "fetch.queue.backoff.ms": 10}
    conf.update(extra)
    windows: list[tuple[float, dict]] = []  # (perf_counter when delivered, statistics)
    if fetch_stats:  # librdkafka's statistics every 20 ms: Fetch requests, bytes, round trips
        conf["statistics.interval.ms"] = 20
        conf["stats_cb"] = lambda text: windows.append((time.perf_counter(), json.loads(text)))
    c = Consumer(conf)
    try:
        watermark = 0
        for part in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
            watermark += hi - lo
        expected = max(want, watermark)
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(partitions)])
        got = errs = 0
        last_progress = time.monotonic()
        first_err = None
        cons = c.consume
        while got < expected:
            msgs = cons(10000, 0.5)
            if msgs:
                last_progress = time.monotonic()
                for m in msgs:
                    if m.error() is None:
                        got += 1
                    else:
                        errs += 1
                        first_err = first_err or str(m.error())
            elif time.monotonic() - last_progress > idle_timeout:
                break
        secs = time.perf_counter() - t0
        during = [w for w in windows if w[0] <= t0 + secs]  # not the idle long polls after the last record
    finally:
        c.close()
    out = {"secs": secs, "expected": expected, "watermark": watermark, "got": got, "errors": errs,
           "first_error": first_err}
    if during:
        out["fetch"] = fetch_summary([w for _, w in during], during[-1][0] - t0)
    return out


def fetch_summary(windows: list[dict], secs: float) -> dict:
    """What librdkafka's statistics say about the Fetch requests to the (data) brokers while the records
    came (the windows delivered up to the last record; ``secs`` from assign to the last of them): how
    many, bytes received per Fetch, the round trip (send to answer, every request to the broker, nearly
    all Fetches here; averaged over the windows' sums, the largest window p99), and the share of the
    time spent in round trips (the rest is the client handing records to the Python loop)."""
    last = windows[-1]["brokers"]
    data = [b for b in last.values() if b.get("nodeid", -1) >= 0]
    fetches = sum(b["req"].get("Fetch", 0) for b in data)
    rx = sum(b["rxbytes"] for b in data)
    names = {b["name"] for b in data}
    rtt_sum = rtt_cnt = 0
    p99 = 0
    for w in windows:
        for b in w["brokers"].values():
            if b["name"] in names and b["rtt"]["cnt"]:
                rtt_sum += b["rtt"]["sum"]
                rtt_cnt += b["rtt"]["cnt"]
                p99 = max(p99, b["rtt"]["p99"])
    rtt_ms = rtt_sum / rtt_cnt / 1000 if rtt_cnt else float("nan")
    return {"fetches": fetches, "KB/fetch": rx / fetches / 1e3 if fetches else float("nan"),
            "rtt_avg_ms": rtt_ms, "rtt_p99_ms": p99 / 1000,
            "rtt_share": fetches * rtt_ms / 1000 / secs if fetches and secs else float("nan")}


def run_size(bp, size: int, n: int, args) -> list[dict]:
    topic = C.unique(f"bench-tp-{size}")
    C.create_topic(bp.bootstrap, topic, args.partitions)
    mb = n * size / 1e6
    rows = []

    cpu0, ccpu0 = bp.cpu(), C.client_cpu()
    pr = produce(bp.bootstrap, topic, n, size, args.pconf, args.timeout)
    cpu1, ccpu1 = bp.cpu(), C.client_cpu()
    if pr["unflushed"] or pr["errors"]:
        print(f"!! {bp.name} {size}B produce: {pr['unflushed']} unflushed, {pr['errors']} failed "
              f"{pr['first_errors']}", file=sys.stderr)
    rows.append({"broker": bp.name, "size": size, "phase": "produce", "records": n, "secs": pr["secs"],
                 "rec/s": n / pr["secs"], "MB/s": mb / pr["secs"], "broker_cpu_s": cpu1 - cpu0,
                 "cpu_ms/MB": 1000 * (cpu1 - cpu0) / mb, "client_cpu_s": ccpu1 - ccpu0})

    cr = consume(bp.bootstrap, topic, args.partitions, args.cconf, args.idle_timeout,
                 want=n - pr["errors"] - pr["unflushed"], fetch_stats=args.fetch_stats)
    cpu2, ccpu2 = bp.cpu(), C.client_cpu()
    got = cr["got"]
    if got != n or cr["errors"]:
        print(f"!! {bp.name} {size}B consume: got {got} of {n} (high watermark right after produce: {cr['watermark']}), "
              f"{cr['errors']} errors {cr['first_error'] or ''}", file=sys.stderr)
    gmb = got * size / 1e6
    rows.append({"broker": bp.name, "size": size, "phase": "consume", "records": got, "secs": cr["secs"],
                 "rec/s": got / cr["secs"], "MB/s": gmb / cr["secs"], "broker_cpu_s": cpu2 - cpu1,
                 "cpu_ms/MB": 1000 * (cpu2 - cpu1) / gmb if gmb else float("nan"), "client_cpu_s": ccpu2 - ccpu1,
                 **cr.get("fetch", {})})
    return rows


COLS = ["broker", "size", "phase", "records", "secs", "rec/s", "MB/s", "broker_cpu_s", "cpu_ms/MB", "client_cpu_s"]
FETCH_COLS = ["fetches", "KB/fetch", "rtt_avg_ms", "rtt_p99_ms", "rtt_share"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_target_args(ap)
    ap.add_argument("--records-100", type=int, default=DEFAULT_N_100, help="100 B records (0 skips)")
    ap.add_argument("--records-1k", type=int, default=DEFAULT_N_1K, help="1 KiB records (0 skips)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply both record counts (e.g. 0.1 for a quick run)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--producer-config", action="append", default=[], metavar="K=V", help="extra producer setting")
    ap.add_argument("--consumer-config", action="append", default=[], metavar="K=V", help="extra consumer setting")
    ap.add_argument("--timeout", type=float, default=120.0, help="producer flush timeout, s")
    ap.add_argument("--fetch-stats", action="store_true",
                    help="consume: Fetch requests, KB per Fetch and round trips from librdkafka's statistics")
    ap.add_argument("--idle-timeout", type=float, default=15.0, help="give up consuming after this long without data")
    args = ap.parse_args(argv)
    cols = COLS + (FETCH_COLS if args.fetch_stats else [])
    args.pconf, args.cconf = _kv(args.producer_config), _kv(args.consumer_config)
    plan = [(100, int(args.records_100 * args.scale)), (1024, int(args.records_1k * args.scale))]
    plan = [(s, n) for s, n in plan if n > 0]

    rows: list[dict] = []
    brokers: list[str] = []
    for bp in C.each_broker(args):
        brokers.append(bp.name)
        for size, n in plan:
            try:
                new = run_size(bp, size, n, args)
            except Exception as e:  # noqa: BLE001 -- keep going with the other sizes/brokers
                print(f"!! {bp.name} {size}B failed: {e!r}", file=sys.stderr, flush=True)
                continue
            C.table(new, cols)
            rows += new
        cur, peak = bp.rss()
        print(f"   {bp.name} broker RSS now {C.fmt(cur, 1)} MiB, peak {C.fmt(peak, 1)} MiB", flush=True)

    print("\n# throughput (MB = 1e6 bytes of values; cpu_ms/MB = broker CPU milliseconds per MB)")
    C.table(rows, cols)
    ratios = []
    if len(brokers) >= 2:
        a, b = brokers[0], brokers[1]
        for size, _ in plan:
            for phase in ("produce", "consume"):
                ra = [r for r in rows if r["broker"] == a and r["size"] == size and r["phase"] == phase]
                rb = [r for r in rows if r["broker"] == b and r["size"] == size and r["phase"] == phase]
                if ra and rb:
                    ratios.append({"size": size, "phase": phase,
                                   f"rec/s {a}/{b}": C.ratio(ra[0]["rec/s"], rb[0]["rec/s"]),
                                   f"cpu_ms/MB {a}/{b}": C.ratio(ra[0]["cpu_ms/MB"], rb[0]["cpu_ms/MB"])})
        if ratios:
            print(f"\n# ratio {a}/{b} (rec/s > 1 means {a} is faster; cpu_ms/MB > 1 means {a} burns more CPU)")
            C.table(ratios, list(ratios[0].keys()))
    C.write_json(args.json, {"bench": "throughput", "rows": rows, "ratios": ratios})
    return 0


if __name__ == "__main__":
    sys.exit(main())
