"""producer.id.expiration.ms: idle producer ids are forgotten, and stay forgotten across a restart.

Kafka's rule (ProducerStateManager.removeExpiredProducers): a producer with no open
transaction whose last batch timestamp is ``producer.id.expiration.ms`` or more in
the past is removed, every ``producer.id.expiration.check.interval.ms``. A forgotten
producer id may then write with any sequence; a live one keeps its sequence state
(duplicates answered with the original offsets, gaps refused). Producer state is
rebuilt from the log at start-up with the same rule, so after a clean restart or
kill -9 expired ids stay expired and live ones keep their sequences.

The batches are written with the project's codec over the socket (tests/wire.py),
so the test controls producer ids, sequences and batch timestamps exactly.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.messages.produce import ProduceRequest
from protocol.records import build_batch
from tests.support import until
from tests.wire import WireClient

EXPIRATION_MS = 60_000
OLD = 10 * 60_000  # batches stamped 10 minutes ago: idle longer than the expiration
NONE, OUT_OF_ORDER_SEQUENCE_NUMBER = 0, 45
STALE, LIVE = 4001, 4002
TOPIC = "pid-expiry"


def produce(bootstrap: str, pid: int, seq: int, n: int = 2, age_ms: int = 0) -> tuple[int, int]:
    """Write one idempotent batch; returns (error code, base offset)."""
    ts = int(time.time() * 1000) - age_ms
    records = build_batch([(None, b"pid %d seq %d" % (pid, seq + i), []) for i in range(n)], timestamp=ts,
                          producer_id=pid, producer_epoch=0, base_sequence=seq)
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    with WireClient(bootstrap) as w:
        part = w.request(req, 9).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


@pytest.mark.parametrize("restart", ["clean", "kill9"])
def test_idle_producer_ids_expire_and_stay_expired_across_restart(broker_factory, restart):
    b = broker_factory({"producer.id.expiration.ms": EXPIRATION_MS,
                        "producer.id.expiration.check.interval.ms": 100})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
    assert produce(b.bootstrap, STALE, 0, age_ms=OLD) == (NONE, 0)  # idle for 10 minutes already
    assert produce(b.bootstrap, LIVE, 0) == (NONE, 2)

    # the periodic check forgets STALE: a sequence gap is then accepted (a new producer state);
    # until then it is refused and nothing is written
    def stale_forgotten():
        code, base = produce(b.bootstrap, STALE, 50, age_ms=OLD)
        assert code in (NONE, OUT_OF_ORDER_SEQUENCE_NUMBER), code
        return code == NONE and base
    assert until(stale_forgotten, 15, "STALE's producer id to expire") == 4
    # LIVE keeps its state: a retry of its batch is a duplicate with the original offsets; a gap is refused
    assert produce(b.bootstrap, LIVE, 0) == (NONE, 2)
    assert produce(b.bootstrap, LIVE, 7)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER

    if restart == "clean":
        b.stop()
    else:
        b.kill9()
    b.start()

    # STALE (last batch seq 50-51, stamped 10 minutes ago) is expired straight after start-up:
    # without expiry the rebuilt state would refuse sequence 200
    assert produce(b.bootstrap, STALE, 200, age_ms=OLD) == (NONE, 6)
    # LIVE kept its sequences across the restart
    assert produce(b.bootstrap, LIVE, 0) == (NONE, 2)
    assert produce(b.bootstrap, LIVE, 7)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(b.bootstrap, LIVE, 2) == (NONE, 8)
