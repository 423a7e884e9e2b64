"""Pure logic of ``sharebroker-dlq-redrive`` (admin/redrive.py): Kafka's murmur2 partitioner, the
read_committed view of fetched batches (aborted transactions, control batches, every codec), DLQ header
parsing, filters and argument checks."""
from __future__ import annotations

import struct

import pytest

from admin.client import AdminError
from admin.redrive import (
    Filters, TopicInfo, build_parser, committed_records, destination_partition, murmur2, parse_dlq_record,
    partition_for_key, validate)
from protocol.messages.fetch import FetchResponse
from protocol import compression
from protocol.records import HEADER_SIZE, Record, build_batch, build_control_batch, read_header
from tests.unit.test_batch_filter import CODECS, kp_batch


# Kafka's UtilsTest.testMurmur2 vectors.
@pytest.mark.parametrize("data,expected", [
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), (b"abc", 479470107)])
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_partition_for_key_is_to_positive_modulo():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert partition_for_key(b"abc", 4) == 479470107 % 4


def _batch(base: int, n: int, **kw) -> bytes:
    raw = bytearray(build_batch([(b"k%d" % i, b"v%d" % (base + i), []) for i in range(n)], timestamp=1000, **kw))
    struct.pack_into(">q", raw, 0, base)
    return bytes(raw)


def _values(records) -> list[bytes]:
    return [r.value for r in records]


def test_committed_records_window_and_next_position():
    blob = _batch(0, 3) + _batch(3, 3) + _batch(6, 3)[:-5]  # the last batch is incomplete
    recs, nxt = committed_records(blob, None, 1, 100)
    assert _values(recs) == [b"v1", b"v2", b"v3", b"v4", b"v5"] and nxt == 6
    recs, nxt = committed_records(blob, None, 0, 4)
    assert [r.offset for r in recs] == [0, 1, 2, 3] and nxt == 4


def test_committed_records_skip_aborted_transactions_and_markers():
    pid_a, pid_b = 7, 8
    blob = (_batch(0, 2, producer_id=pid_a, producer_epoch=0, base_sequence=0, transactional=True)
            + _batch(2, 1, producer_id=pid_b, producer_epoch=0, base_sequence=0, transactional=True)
            + _control(3, pid_a, commit=False) + _control(4, pid_b, commit=True)
            + _batch(5, 1, producer_id=pid_a, producer_epoch=0, base_sequence=2, transactional=True)
            + _control(6, pid_a, commit=True))
    aborted = [FetchResponse.AbortedTransaction(producer_id=pid_a, first_offset=0)]
    recs, nxt = committed_records(blob, aborted, 0, 7)
    assert [r.offset for r in recs] == [2, 5] and nxt == 7


def _control(offset: int, pid: int, commit: bool) -> bytes:
    raw = bytearray(build_control_batch(pid, 0, commit))
    struct.pack_into(">q", raw, 0, offset)
    return bytes(raw)


@pytest.mark.parametrize("codec", CODECS)
def test_committed_records_decode_every_codec(codec):
    """Batches compressed by kafka-python's own codecs (snappy / lz4 / zstd: the optional extra)."""
    values = [b"v%d-" % (10 + i) + b"x" * 64 for i in range(3)]  # compressible: kafka-python keeps it compressed
    batch = kp_batch([(b"k%d" % i, v, [], i) for i, v in enumerate(values)], codec=codec, base_offset=10)
    assert read_header(batch).compression == codec
    recs, nxt = committed_records(batch, None, 10, 13)
    assert _values(recs) == values and [r.offset for r in recs] == [10, 11, 12] and nxt == 13


def test_a_codec_without_the_extra_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(compression, "_cramjam", None)
    batch = kp_batch([(b"k", b"v" * 100, [], 0)], codec=compression.ZSTD, base_offset=0)
    assert read_header(batch).compression == compression.ZSTD
    with pytest.raises(AdminError, match=r"offset 0 cannot be read: zstd .*sharebroker\[compression\]"):
        committed_records(batch, None, 0, 1)


def test_undecodable_batches_are_one_line_errors():
    raw = build_batch([(b"k", b"v", [("h\u00e9", b"x")])], timestamp=1000)
    raw = raw.replace("h\u00e9".encode(), b"h\xff\xfe")
    with pytest.raises(AdminError, match="cannot be decoded"):  # a header key that is not UTF-8
        committed_records(raw, None, 0, 1)
    with pytest.raises(AdminError, match="cannot be decoded"):
        committed_records(raw[:HEADER_SIZE] + b"\x7f" * (len(raw) - HEADER_SIZE), None, 0, 1)


def _dlq(headers, key=b"k", value=b"v", offset=4, ts=5000) -> Record:
    return Record(offset, ts, key, value, headers)


def test_parse_dlq_record_strips_dlq_headers():
    rec = parse_dlq_record(_dlq([("__dlq.errors.topic", b"orders"), ("trace", b"1"), ("__dlq.errors.partition", b"3"),
                                 ("__dlq.errors.offset", b"42"), ("__dlq.errors.message", b"x"), ("__dlq.other", b"y")]))
    assert (rec.source_topic, rec.source_partition, rec.source_offset) == ("orders", 3, 42)
    assert rec.headers == [("trace", b"1")] and rec.is_dlq_record and not rec.headers_only
    assert parse_dlq_record(_dlq([("__dlq.errors.topic", b"orders")], key=None, value=None)).headers_only


@pytest.mark.parametrize("headers", [
    [],
    [("__dlq.errors.topic", b"t"), ("__dlq.errors.partition", b"x"), ("__dlq.errors.offset", b"1")],
    [("__dlq.errors.topic", b"t"), ("__dlq.errors.partition", b"-1"), ("__dlq.errors.offset", b"1")],
    [("__dlq.errors.topic", None), ("__dlq.errors.partition", b"0"), ("__dlq.errors.offset", b"1")],
    [("__dlq.errors.topic", b"\xff"), ("__dlq.errors.partition", b"0"), ("__dlq.errors.offset", b"1")],
])
def test_records_without_valid_dlq_headers(headers):
    assert not parse_dlq_record(_dlq(headers)).is_dlq_record


def test_filters():
    rec = parse_dlq_record(_dlq([("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"3"),
                                 ("__dlq.errors.offset", b"42")], ts=5000))
    assert Filters().selects(rec)
    assert Filters(partitions=frozenset({1, 3}), from_offset=42, to_offset=42, from_time=5000, to_time=5000,
                   topics=frozenset({"orders"})).selects(rec)
    for f in (Filters(partitions=frozenset({1})), Filters(from_offset=43), Filters(to_offset=41),
              Filters(from_time=5001), Filters(to_time=4999), Filters(topics=frozenset({"other"}))):
        assert not f.selects(rec)


def test_destination_partition():
    topic = TopicInfo("orders", bytes(16), {0: None, 1: None, 2: None})
    keyed = parse_dlq_record(_dlq([("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"5"),
                                   ("__dlq.errors.offset", b"1")], key=b"21"))
    assert destination_partition(keyed, topic) == (-973932308 & 0x7FFFFFFF) % 3
    keyed.source_partition = 1
    assert destination_partition(keyed, topic) == 1
    keyless = parse_dlq_record(_dlq([("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"7"),
                                     ("__dlq.errors.offset", b"1")], key=None))
    assert destination_partition(keyless, topic) == 1


@pytest.mark.parametrize("argv,problem", [
    (["--dry-run"], 'Missing required argument "[dlq-topic]"'),
    (["--dlq-topic", "d"], "Command must include exactly one of --dry-run or --execute"),
    (["--dlq-topic", "d", "--dry-run", "--execute"], "Command must include exactly one of --dry-run or --execute"),
    (["--dlq-topic", "d", "--dry-run", "--to-offset", "-1"], "--to-offset must not be negative"),
    (["--dlq-topic", "d", "--dry-run", "--from-time", "2026-01-02T00:00:00Z", "--to-time", "2026-01-01T00:00:00Z"],
     "--from-time must not be later than --to-time"),
    (["--dlq-topic", "d", "--dry-run", "--from-time", "yesterday"], "Error parsing timestamp 'yesterday'"),
    (["--dlq-topic", "d", "--dry-run", "--source-topic", ","], "--source-topic needs at least one topic"),
    (["--dlq-topic", "d", "--execute", "--source-partition", "0,2", "--from-time", "1000"], None),
])
def test_validate(argv, problem):
    got = validate(build_parser().parse_args(["--bootstrap-server", "h:1"] + argv))
    assert (got is None) if problem is None else (problem in got)
