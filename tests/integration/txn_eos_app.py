"""An exactly-once consume-transform-produce application (run as a process by test_transactions_eos.py).

Usage: python txn_eos_app.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PARTITIONS TOTAL

Reads INPUT with read_committed from the group's committed offsets, writes
``out-<value>`` for each record to the same partition of OUTPUT and commits the
input offsets in the same transaction (``send_offsets_to_transaction``).  On an
abortable error it aborts and rewinds to the committed offsets; on a fatal one it
exits with status 3 (a new instance with the same transactional id takes over).
Exits 0 once the committed offsets reach TOTAL records.  Prints ``committed N`` after
each transaction (N = records committed so far by this instance).
"""
from __future__ import annotations

import os
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

BATCH = 2000


def main() -> int:
    bootstrap, src, dst, group, tid, partitions, total = sys.argv[1:8]
    parts = [TopicPartition(src, p) for p in range(int(partitions))]
    total = int(total)
    # librdkafka 2.16 re-bootstraps when every broker is down, and its decommissioned broker handle then
    # never terminates while the transaction coordinator holds it: the producer hangs (seen with a
    # one-broker cluster restarted under it). Without re-bootstrap it reconnects to the same address.
    common = {"bootstrap.servers": bootstrap, "metadata.recovery.strategy": "none"}
    consumer = Consumer({**common, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50,
                         "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
    producer = Producer({**common, "transactional.id": tid, "linger.ms": 5,
                         "transaction.timeout.ms": 30000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 200,
                         "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
                         **({"debug": os.environ["TXN_APP_DEBUG"]} if os.environ.get("TXN_APP_DEBUG") else {})})
    producer.init_transactions(60)
    consumer.assign([TopicPartition(src, p.partition) for p in parts])  # positions: the committed offsets
    done = 0

    def rewind() -> None:
        for tp in consumer.committed(parts, 30):
            consumer.seek(TopicPartition(src, tp.partition, tp.offset if tp.offset >= 0 else 0))

    while True:
        committed = consumer.committed(parts, 30)
        if sum(max(tp.offset, 0) for tp in committed) >= total:
            return 0
        msgs = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
        if not msgs:
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, b"out-" + m.value(), key=m.key(), partition=m.partition())
            positions = consumer.position([TopicPartition(src, p.partition) for p in parts])
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            done += len(msgs)
            print(f"committed {done}", flush=True)
        except KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():
                producer.abort_transaction(60)
                rewind()
            elif err.fatal():
                print(f"fatal: {err}", flush=True)
                return 3
            else:
                print(f"retriable: {err}", flush=True)
                try:
                    producer.abort_transaction(60)
                except KafkaException:
                    return 3
                rewind()


if __name__ == "__main__":
    sys.exit(main())
