"""A segment rolls when its offset index is full (``segment.index.bytes``).

Kafka (``LogSegment.append`` / ``LogSegment.shouldRoll``, ``AbstractIndex``):
- the offset index holds ``segment.index.bytes // 8`` entries (8 bytes each: relative offset,
  position), the time index ``segment.index.bytes // 12``;
- an append adds an offset-index entry when more than ``index.interval.bytes`` were appended
  since the last entry (so with 0, every batch but a segment's first), and a time-index entry
  only when the batch raises the segment's maximum timestamp;
- before an append the log rolls if the offset index or the time index is full.
With every batch at the same timestamp the time index gets one entry, so the offset index
decides: a segment holds ``entries + 1`` batches and the next batch starts a new segment.
"""
from __future__ import annotations

import math
import time

from confluent_kafka.admin import AdminClient, NewTopic

from protocol.messages.produce import ProduceRequest as P
from protocol.records import build_batch
from tests.support import unique
from tests.wire import WireClient

INDEX_BYTES = 80                 # 10 offset-index entries, 6 time-index entries
ENTRIES = INDEX_BYTES // 8
BATCHES = 60


def produce_batches(bootstrap: str, topic: str, n: int, timestamp: int) -> list[int]:
    """``n`` single-record batches, one Produce each, all with the same timestamp; their offsets."""
    offsets = []
    with WireClient(bootstrap) as w:
        for i in range(n):
            batch = build_batch([(None, b"record-%04d" % i, [])], timestamp=timestamp)
            r = w.request(P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=topic, partition_data=[
                P.PartitionProduceData(index=0, records=batch)])]), 9)
            part = r.responses[0].partition_responses[0]
            assert part.error_code == 0, part
            offsets.append(part.base_offset)
    return offsets


def segments(broker, topic: str) -> list[int]:
    d = broker.data_dir / f"{topic}-0"
    return sorted(int(p.name[:-len(".log")]) for p in d.iterdir() if p.name.endswith(".log"))


def test_segment_rolls_when_the_offset_index_is_full(sharebroker, consume_range):
    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    small, control = unique("idx"), unique("idx-default")
    fs = admin.create_topics([NewTopic(small, 1, 1, config={"segment.index.bytes": str(INDEX_BYTES),
                                                            "index.interval.bytes": "0"}),
                              NewTopic(control, 1, 1, config={"index.interval.bytes": "0"})])
    for f in fs.values():
        f.result(15)
    ts = int(time.time() * 1000)
    assert produce_batches(sharebroker.bootstrap, small, BATCHES, ts) == list(range(BATCHES))
    assert produce_batches(sharebroker.bootstrap, control, BATCHES, ts) == list(range(BATCHES))

    per_segment = ENTRIES + 1
    expected = list(range(0, BATCHES, per_segment))  # 0, 11, 22, 33, 44, 55
    assert len(expected) == math.ceil(BATCHES / per_segment)
    assert segments(sharebroker, small) == expected
    assert segments(sharebroker, control) == [0], "with the default index size nothing rolls"

    d = sharebroker.data_dir / f"{small}-0"
    for f in d.iterdir():
        if f.name.endswith(".index"):
            assert f.stat().st_size <= INDEX_BYTES, f"{f.name}: {f.stat().st_size} bytes"

    # every record is still there, in order, across the segments
    got = consume_range(sharebroker.bootstrap, small, 0, 0, BATCHES)
    assert [m.value() for m in got] == [b"record-%04d" % i for i in range(BATCHES)]
