"""State that start-up no longer rebuilds from the whole log, checked right after a restart (clean and kill -9).

Producer state comes from the latest producer snapshot plus the batches after it, and sealed segments'
indexes are mapped on first use; a client must not see any difference: idempotent sequences continue
(duplicates answered with their original offsets, gaps refused) for producers whose batches lie in old
segments as well as in the active one, and reads and timestamp lookups land on the right batch in every
segment. Batches are written over the socket with the project's codec, so the test controls producer ids,
sequences and timestamps.
"""
from __future__ import annotations

import time

import pytest

from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.produce import ProduceRequest
from protocol.records import build_batch
from tests.support import create_topic
from tests.wire import WireClient

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
EARLY, BUSY = 6001, 6002
T0 = int(time.time() * 1000) - 3_600_000


def produce(w: WireClient, topic: str, pid: int, seq: int, ts: int, n: int = 2) -> tuple[int, int]:
    records = build_batch([(None, b"%d-%d" % (pid, seq + i) + b"x" * 20_000, []) for i in range(n)], timestamp=ts,
                          producer_id=pid, producer_epoch=0, base_sequence=seq)
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    part = w.request(req, 9).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def offset_for(w: WireClient, topic: str, ts: int) -> int:
    T, P = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition
    r = w.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        T(name=topic, partitions=[P(partition_index=0, timestamp=ts)])]), 7)
    return r.topics[0].partitions[0].offset


@pytest.mark.parametrize("restart", ["clean", "kill9"])
def test_sequences_and_lookups_right_after_restart(broker_factory, consume_range, restart):
    b = broker_factory()
    topic = create_topic(b.bootstrap, segment_bytes=1 << 20, index_interval_bytes=4096)
    with WireClient(b.bootstrap) as w:
        assert produce(w, topic, EARLY, 0, T0) == (0, 0)  # only in the first segment
        for i in range(150):  # 40 KB per batch: 26 batches per segment, 6 segments
            assert produce(w, topic, BUSY, 2 * i, T0 + 1000 * (i + 1)) == (0, 2 + 2 * i)
    end = 302
    if restart == "clean":
        b.stop()
    else:
        b.kill9()
    b.start()
    with WireClient(b.bootstrap) as w:
        # duplicates of BUSY's last batches get their original offsets; a gap is refused
        assert produce(w, topic, BUSY, 298, T0) == (0, 300)
        assert produce(w, topic, BUSY, 290, T0) == (0, 292)
        assert produce(w, topic, BUSY, 310, T0)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        # EARLY's only batch is many segments back: its state came from a snapshot
        assert produce(w, topic, EARLY, 0, T0) == (0, 0)
        assert produce(w, topic, EARLY, 5, T0)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        # timestamp lookups through every segment's time index
        for i in (1, 17, 60, 149):
            assert offset_for(w, topic, T0 + 1000 * i) == 2 * i
        assert produce(w, topic, BUSY, 300, T0 + 10**6) == (0, end)  # sequences continue
        assert produce(w, topic, EARLY, 2, T0 + 10**6) == (0, end + 2)
    for start in (0, 1, 57, 133, 250, 301):  # offset index lookups in sealed and active segments
        got = consume_range(b.bootstrap, topic, 0, start, min(start + 3, end))
        assert [m.offset() for m in got] == list(range(start, min(start + 3, end)))
