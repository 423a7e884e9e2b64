"""Copy rate of ``sharebroker-migrate sync``: sharebroker -> a 3-node Apache Kafka 4.4 cluster.

Starts a sharebroker (``broker.testing.BrokerProcess``), fills ``--partitions`` partitions with
``--records`` records of ``--size`` bytes, starts the 3-node KRaft cluster of ``tests/kafka_ref``
(or uses ``--target``), then times one full ``sync`` (``python -m admin.migrate``, replication
factor 3) and a second ``sync`` with nothing new, and prints records/s and MB/s (keys + values);
then commits ``--groups`` consumer groups on the source and times the ``cutover``.

    python bench/migrate.py [--records 200000] [--size 200] [--partitions 4] [--groups 100] [--target HOST:PORT,...]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from broker.testing import BrokerProcess  # noqa: E402
from tests.kafka_ref.launcher import KafkaRef  # noqa: E402


def fill(bootstrap: str, records: int, size: int, partitions: int) -> str:
    topic = f"bench-migrate-{os.getpid()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                p.produce(topic, key=b"%d" % i, value=value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return topic


def commit_groups(bootstrap: str, topic: str, groups: int, partitions: int, records: int) -> None:
    """``groups`` consumer groups, half at the end of every partition, half in the middle."""
    from confluent_kafka import Consumer, TopicPartition

    per = records // partitions
    for g in range(groups):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-group-{os.getpid()}-{g}"})
        at = per if g % 2 == 0 else per // 2
        c.commit(offsets=[TopicPartition(topic, p, at) for p in range(partitions)], asynchronous=False)
        c.close()


def sync(source: str, target: str) -> tuple[float, str]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "admin.migrate", "sync", "--source", source, "--target", target,
                          "--replication-factor", "3", "--timeout", "120"],
                         capture_output=True, text=True, check=True).stdout
    return time.monotonic() - t0, out.strip().splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--size", type=int, default=200, help="value bytes")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--groups", type=int, default=100, help="consumer groups to cut over (0: none)")
    ap.add_argument("--target", help="an already running Kafka cluster (default: start 3 nodes here)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, BrokerProcess(os.path.join(d, "source")) as src:
        topic = fill(src.bootstrap, args.records, args.size, args.partitions)
        ref = None if args.target else KafkaRef(nodes=3).start()
        try:
            target = args.target or ref.bootstrap
            took, line = sync(src.bootstrap, target)
            mb = sum(len(b"%d" % i) + args.size for i in range(args.records)) / 1e6
            print(f"first sync : {args.records} records, {mb:.1f} MB in {took:.1f} s (command wall time) -> "
                  f"{args.records / took:.0f} records/s, {mb / took:.2f} MB/s")
            print(f"             the command's own figure: {line}")
            took2, line2 = sync(src.bootstrap, target)
            print(f"second sync: nothing new, {took2:.1f} s ({line2})")
            if args.groups:
                commit_groups(src.bootstrap, topic, args.groups, args.partitions, args.records)
                t0 = time.monotonic()
                subprocess.run([sys.executable, "-m", "admin.migrate", "cutover", "--source", src.bootstrap,
                                "--target", target, "--timeout", "120"], capture_output=True, text=True, check=True)
                print(f"cutover    : {args.groups} consumer groups x {args.partitions} partitions in "
                      f"{time.monotonic() - t0:.1f} s (command wall time)")
        finally:
            if ref is not None:
                ref.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
