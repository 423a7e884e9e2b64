"""Time of a /metrics scrape with many live share partitions.

Starts a broker with the metrics listener, creates ``--partitions`` partitions (over topics of
100 partitions), puts one record in each, lets one share consumer acquire and accept them all
(so every share partition is live in the broker), then scrapes ``/metrics`` and fetches the status
page ``/`` ``--scrapes`` times each and prints the median and maximum wall time and the size of each.

    python bench/metrics_scrape.py --partitions 1000
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402

from broker.testing import BrokerProcess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args()
    with BrokerProcess(config={"sharebroker.metrics.listener": "127.0.0.1:0"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topics = [f"scrape-{i}" for i in range((args.partitions + 99) // 100)]
        sizes = [min(100, args.partitions - 100 * i) for i in range(len(topics))]
        for f in admin.create_topics([NewTopic(t, n, 1) for t, n in zip(topics, sizes)]).values():
            f.result(60)
        group = ConfigResource(ConfigResource.Type.GROUP, "scrape", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([group])[group].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 50})
        for t, n in zip(topics, sizes):
            for part in range(n):
                p.produce(t, b"x", partition=part)
        p.flush(60)
        c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "scrape"})
        c.subscribe(topics)
        got, deadline = 0, time.monotonic() + 300
        while got < args.partitions and time.monotonic() < deadline:
            got += sum(1 for m in c.poll(1.0) or [] if m.error() is None)
        c.commit_sync()
        results = {}
        for what, url in (("/metrics", b.metrics_url), ("status page /", b.metrics_url.replace("/metrics", "/"))):
            times = []
            for _ in range(args.scrapes):
                t0 = time.perf_counter()
                with urllib.request.urlopen(url, timeout=30) as r:
                    body = r.read()
                times.append((time.perf_counter() - t0) * 1000)
            results[what] = (times, body)
        c.close()
        live = results["/metrics"][1].count(b"sharebroker_share_partition_lag{")
        print(f"{live} live share partitions ({got} records consumed), {args.scrapes} requests each:")
        for what, (times, body) in results.items():
            print(f"  {what:14} {len(body):>9,} bytes: median {statistics.median(times):.1f} ms, "
                  f"max {max(times):.1f} ms")


if __name__ == "__main__":
    main()
