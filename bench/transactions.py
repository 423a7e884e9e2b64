"""Transactional produce throughput as a ratio of idempotent produce, on the same broker.

confluent-kafka (librdkafka) producers write N records of SIZE bytes to a fresh
one-partition topic: once idempotent (``enable.idempotence``, no transactions), then
with a ``transactional.id`` in transactions of 100 records and of 10,000 records
(begin, produce, commit).  Prints records/s, the broker's CPU ms per MB and the ratio
to the idempotent run; then checks that a read_committed consumer sees every record.

    python bench/transactions.py                       # starts our broker in a temp dir
    python bench/transactions.py --records 500000 --size 1024
    python bench/transactions.py --bootstrap 127.0.0.1:9092 --pid 1234
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def new_topic(bootstrap: str) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def run(bootstrap: str, n: int, size: int, txn_size: int | None) -> float:
    """Seconds to write ``n`` records (``txn_size`` None: idempotent, no transactions)."""
    topic = new_topic(bootstrap)
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000}
    if txn_size is None:
        conf["enable.idempotence"] = True
    else:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    value = os.urandom(size)
    if txn_size is not None:
        p.init_transactions(30)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        chunk = min(txn_size or n, n - done)
        if txn_size is not None:
            p.begin_transaction()
        for i in range(chunk):
            while True:
                try:
                    p.produce(topic, value, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
            if not i & 0x3FF:
                p.poll(0)
        if txn_size is not None:
            p.commit_transaction(60)
        done += chunk
    assert p.flush(60) == 0
    secs = time.perf_counter() - t0
    check(bootstrap, topic, n)
    return secs


def check(bootstrap: str, topic: str, n: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-check", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, idle = 0, time.monotonic()
    while got < n and time.monotonic() - idle < 10:
        msgs = c.consume(10000, 0.5)
        if msgs:
            idle = time.monotonic()
            got += sum(1 for m in msgs if m.error() is None)
    c.close()
    if got != n:
        raise SystemExit(f"read_committed consumer saw {got} of {n} records of {topic}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=100, help="record value bytes")
    ap.add_argument("--bootstrap", help="an already running broker (default: start ours in a temp dir)")
    ap.add_argument("--pid", type=int, help="its pid, for broker CPU figures")
    args = ap.parse_args()
    broker = None
    if args.bootstrap:
        bootstrap, pid = args.bootstrap, args.pid
    else:
        from broker.testing import BrokerProcess

        broker = BrokerProcess().start()
        bootstrap, pid = broker.bootstrap, broker.proc.pid
    try:
        mb = args.records * args.size / 1e6
        rows = []
        for label, txn in (("idempotent, no transactions", None), ("transactions of 100 records", 100),
                           ("transactions of 10,000 records", 10_000)):
            c0 = cpu_seconds(pid)
            secs = run(bootstrap, args.records, args.size, txn)
            c1 = cpu_seconds(pid)
            rows.append((label, args.records / secs, 1000 * (c1 - c0) / mb))
        base = rows[0][1]
        print(f"{args.records:,} records of {args.size} B, one partition, confluent-kafka producers")
        print(f"{'workload':34} {'records/s':>12} {'broker CPU ms/MB':>17} {'ratio':>7}")
        for label, rate, cpu in rows:
            print(f"{label:34} {rate:12,.0f} {cpu:17.2f} {rate / base:7.2f}")
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
