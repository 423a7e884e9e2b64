"""Time from ShareConsumer.subscribe() to the first record, with Kafka's default group settings.

Per broker (ours by default, started with its defaults: 5 s share heartbeat interval, 1 s assignment
interval, 100 ms initial assignment delay), ``--trials`` times: a fresh 2-partition topic with 10 records and a fresh share group
(share.auto.offset.reset=earliest); one confluent_kafka.ShareConsumer with default settings subscribes
and polls until it has a record.  Also the time until a consumer that switches to another topic
(subscribe() with a new topic list) receives that topic's first record.  Prints min / median / max.

    python bench/share_first_record.py --start ours
    python bench/share_first_record.py --bootstrap 127.0.0.1:9092 --name main --trials 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from .share_throughput import set_earliest  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    from share_throughput import set_earliest  # type: ignore[no-redef]

from confluent_kafka import Producer, ShareConsumer


def topic_with_records(bootstrap: str) -> str:
    topic = C.unique("first")
    C.create_topic(bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, partition=i % 2)
    if p.flush(30):
        raise RuntimeError("produce did not complete")
    return topic


def first_record(c: ShareConsumer, topic: str, limit: float) -> float:
    """Seconds until ``c`` returns a record of ``topic`` (nan after ``limit``)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        for m in c.poll(0.05) or []:
            if m.error() is None and m.topic() == topic:
                return time.monotonic() - start
    return float("nan")


def trial(bootstrap: str, limit: float) -> dict:
    a, b = topic_with_records(bootstrap), topic_with_records(bootstrap)
    group = C.unique("g")
    set_earliest(bootstrap, group)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        c.subscribe([a])
        join = first_record(c, a, limit)
        c.subscribe([b])
        switch = first_record(c, b, limit)
    finally:
        c.close()
    return {"join": join, "switch": switch}


def summary(label: str, vals: list[float]) -> dict:
    ok = sorted(v for v in vals if v == v)
    row = {"broker": label, "trials": len(vals), "failed": len(vals) - len(ok)}
    if ok:
        row.update({"min_s": ok[0], "median_s": statistics.median(ok), "max_s": ok[-1]})
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_target_args(ap, default_start="ours")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--limit", type=float, default=30.0, help="give up on one measurement after this long")
    args = ap.parse_args(argv)
    rows = []
    for bp in C.each_broker(args):
        runs = [trial(bp.bootstrap, args.limit) for _ in range(args.trials)]
        for what in ("join", "switch"):
            rows.append({**summary(bp.name, [r[what] for r in runs]), "what": what})
    print("seconds from subscribe() to the first record (join: new consumer; switch: subscribe() to another topic)")
    C.table(rows, ["broker", "what", "trials", "failed", "min_s", "median_s", "max_s"])
    C.write_json(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
