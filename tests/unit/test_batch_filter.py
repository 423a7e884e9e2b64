"""The batch filter (``protocol.records.filter_batch`` and friends) and the codecs it uses.

Batches are built by kafka-python 3.0's own ``DefaultRecordBatchBuilder`` (an independent
implementation, with its own codec packages) and every result is read back by kafka-python's
``DefaultRecordBatch``: CRC, offsets, keys, values, headers and timestamps must be what the kept
records had, and offsets must never move (Kafka's ``MemoryRecords.filterTo``)."""

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import compression
from protocol import records as R

CODECS = [R.COMPRESSION_NONE, R.COMPRESSION_GZIP, R.COMPRESSION_SNAPPY, R.COMPRESSION_LZ4, R.COMPRESSION_ZSTD]
T0 = 1_700_000_000_000


def kp_batch(records, codec=0, base_offset=1000, producer_id=-1, producer_epoch=-1, base_sequence=-1,
             transactional=False) -> bytes:
    """A batch built by kafka-python; ``records`` are (key, value, headers, ts_offset_ms)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 30)
    for i, (k, v, h, dt) in enumerate(records):
        b.append(i, timestamp=T0 + dt, key=k, value=v, headers=h)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)  # outside the CRC
    return bytes(buf)


def kp_read(batch: bytes):
    kb = DefaultRecordBatch(bytes(batch))
    assert kb.validate_crc()
    return kb, [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in kb]


RECS = [(f"k{i % 7}".encode() if i % 5 else None, (b"v%d" % i) * (i % 4) if i % 6 else None,
         [("h", b"x%d" % i)] if i % 3 == 0 else [], i * 3) for i in range(40)]


@pytest.mark.parametrize("codec", CODECS)
def test_filter_keeps_offsets_and_bodies(codec):
    batch = kp_batch(RECS, codec, producer_id=42, producer_epoch=3, base_sequence=100)
    _, before = kp_read(batch)
    wanted = {1, 2, 3, 17, 30, 39}
    out = R.filter_batch(batch, lambda s: s.offset_delta in wanted)
    kb, after = kp_read(out)
    assert after == [r for r in before if r[0] - 1000 in wanted]
    info = R.read_header(out)
    assert (info.base_offset, info.last_offset_delta, info.records_count) == (1000, 39, len(wanted))
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 3, 100)
    assert info.compression == codec
    assert info.max_timestamp == T0 + 39 * 3
    # the result is itself a valid batch for the produce-path checks (offsets and count may differ)
    R.validate_records(out, client=False)


@pytest.mark.parametrize("codec", CODECS)
def test_filter_all_none_and_unchanged(codec):
    batch = kp_batch(RECS, codec)
    assert R.filter_batch(batch, lambda s: True) is batch
    assert R.filter_batch(batch, lambda s: False) is None


def test_filter_one_record_and_max_timestamp_of_kept_records():
    batch = kp_batch(RECS)
    out = R.filter_batch(batch, lambda s: s.offset_delta == 5)
    _, after = kp_read(out)
    assert after == [(1005, None, b"v5", [], T0 + 15)]  # RECS[5]: no key, no headers
    assert R.read_header(out).max_timestamp == T0 + 15


def test_scan_records_reports_keys_and_tombstones():
    batch = kp_batch(RECS)
    spans = R.scan_records(R.batch_body(batch), 40)
    assert [s.offset_delta for s in spans] == list(range(40))
    assert [None if s.key is None else bytes(s.key) for s in spans] == [r[0] for r in RECS]
    assert [s.has_value for s in spans] == [r[1] is not None for r in RECS]
    assert [s.timestamp_delta for s in spans] == [r[3] for r in RECS]


@pytest.mark.parametrize("codec", [R.COMPRESSION_NONE, R.COMPRESSION_GZIP, R.COMPRESSION_ZSTD])
def test_delete_horizon_rewrites_timestamp_deltas(codec):
    batch = kp_batch(RECS, codec)
    _, before = kp_read(batch)
    horizon = T0 + 86_400_000
    keep = {0, 6, 7, 12}  # 0 and 6 and 12 are tombstones (value None), 7 is not
    out = R.filter_batch(batch, lambda s: s.offset_delta in keep, delete_horizon_ms=horizon)
    info = R.read_header(out)
    assert info.attributes & R.DELETE_HORIZON_MASK
    assert info.base_timestamp == horizon
    # records keep their absolute timestamps, now relative to the horizon
    assert [(r.offset, r.key, r.value, r.timestamp) for r in R.iter_records(out)] == \
        [(o, k, v, t) for o, k, v, _h, t in before if o - 1000 in keep]
    # a horizon once set is kept as it is
    again = R.filter_batch(out, lambda s: s.offset_delta != 7, delete_horizon_ms=horizon + 5)
    assert R.read_header(again).base_timestamp == horizon
    assert [r.offset for r in R.iter_records(again)] == [1000, 1006, 1012]


def test_delete_horizon_only_when_a_tombstone_is_kept_unless_forced():
    batch = kp_batch(RECS)
    out = R.filter_batch(batch, lambda s: s.offset_delta in (1, 2), delete_horizon_ms=T0 + 10)
    assert not R.read_header(out).attributes & R.DELETE_HORIZON_MASK
    forced = R.filter_batch(batch, lambda s: True, delete_horizon_ms=T0 + 10, force_delete_horizon=True)
    assert forced is not batch and R.read_header(forced).attributes & R.DELETE_HORIZON_MASK
    assert [r.timestamp for r in R.iter_records(forced)] == [T0 + r[3] for r in RECS]


def test_empty_batch_keeps_producer_state():
    batch = kp_batch(RECS, R.COMPRESSION_GZIP, producer_id=9, producer_epoch=1, base_sequence=500,
                     transactional=True)
    out = R.empty_batch(batch)
    info = R.read_header(out)
    assert len(out) == R.HEADER_SIZE and info.size == R.HEADER_SIZE
    assert (info.base_offset, info.last_offset, info.records_count) == (1000, 1039, 0)
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence) == (9, 1, 500, 539)
    assert info.is_transactional and info.compression == R.COMPRESSION_NONE
    assert info.base_timestamp == R.NO_TIMESTAMP and info.max_timestamp == T0 + 39 * 3
    assert R.batch_crc_valid(out)
    kb, after = kp_read(out)
    assert after == [] and kb.last_offset == 1039


@pytest.mark.parametrize("codec", CODECS)
def test_uncompressed_batch_and_iter_records_of_any_codec(codec):
    batch = kp_batch(RECS, codec)
    _, before = kp_read(batch)
    plain = R.uncompressed_batch(batch)
    assert R.read_header(plain).compression == R.COMPRESSION_NONE
    _, after = kp_read(plain)
    assert after == before
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in R.iter_records(batch)] == before


def test_corrupt_compressed_data_is_a_records_error():
    batch = bytearray(kp_batch(RECS, R.COMPRESSION_GZIP))
    batch[R.HEADER_SIZE + 20:R.HEADER_SIZE + 30] = b"\xff" * 10
    with pytest.raises(R.RecordsError) as e:
        R.filter_batch(bytes(batch), lambda s: True)
    assert e.value.code == R.CORRUPT_MESSAGE


def test_truncated_record_is_a_records_error():
    body = R.batch_body(kp_batch(RECS))
    with pytest.raises(R.RecordsError):
        R.scan_records(body[:len(body) - 3], 40)


# ------------------------------------------------------------------- codecs
DATA = b"".join(b"record %d " % i * (i % 9) for i in range(3000))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_codec_round_trip(codec):
    assert compression.available(codec)
    assert compression.decompress(codec, compression.compress(codec, DATA)) == DATA
    assert compression.decompress(codec, compression.compress(codec, b"")) == b""


def test_gzip_concatenated_members_read_as_one_stream():
    two = compression.compress(1, DATA[:1000]) + compression.compress(1, DATA[1000:])
    assert compression.decompress(1, two) == DATA


def test_snappy_xerial_framing_and_raw_blocks_both_read():
    import snappy  # python-snappy, as kafka-python uses it

    framed = compression.compress(2, DATA)
    assert framed.startswith(b"\x82SNAPPY\x00") and len(framed) < len(DATA)
    assert compression.decompress(2, snappy.compress(DATA)) == DATA  # raw, as librdkafka writes it


def test_lz4_frames_have_independent_blocks_as_kafka_requires():
    import lz4.frame

    framed = compression.compress(3, DATA)
    flg = framed[4]
    assert flg >> 6 == 1 and flg & 0x20, "version 01 and block independence (Kafka's Lz4BlockInputStream)"
    assert framed[5] >> 4 & 0x7 == 4, "64 KiB blocks"
    assert lz4.frame.decompress(framed) == DATA


def test_zstd_interop():
    import zstandard

    assert zstandard.ZstdDecompressor().decompress(compression.compress(4, DATA), max_output_size=len(DATA)) == DATA
    assert compression.decompress(4, zstandard.ZstdCompressor().compress(DATA)) == DATA


def test_unknown_codec_and_missing_extra(monkeypatch):
    with pytest.raises(compression.CodecError):
        compression.decompress(6, b"x")
    monkeypatch.setattr(compression, "_cramjam", None)
    assert compression.available(1) and not compression.available(3)
    with pytest.raises(compression.CodecUnavailable, match=r"sharebroker\[compression\]"):
        compression.compress(4, b"x")
    batch = kp_batch(RECS, R.COMPRESSION_LZ4)
    with pytest.raises(R.RecordsError) as e:
        R.batch_body(batch)
    assert e.value.code == R.UNSUPPORTED_COMPRESSION_TYPE


# ---------------------------------------------------------------- contiguous slices (share sub-batches)
BIG = [(b"k%d" % i, b"v" * (i % 50) + b"%d" % i, [("h", b"%d" % i)] if i % 9 == 0 else [], (i * 7) % 1000)
       for i in range(2000)]


def test_slice_is_what_the_filter_keeps_byte_for_byte():
    batch = kp_batch(BIG, producer_id=7, producer_epoch=1, base_sequence=5)
    for ranges in ([(1000, 1049)], [(1000, 1000), (1500, 1599), (2999, 2999)], [(1300, 2999)]):
        wanted = {o - 1000 for lo, hi in ranges for o in range(lo, hi + 1)}
        expected = R.filter_batch(batch, lambda s: s.offset_delta in wanted)
        assert R.slice_batch(batch, ranges) == expected
        kb, after = kp_read(expected)
        assert [r[0] for r in after] == sorted(o + 1000 for o in wanted)
    assert R.slice_batch(batch, [(1000, 2999)]) is batch


def test_slice_with_log_append_time_keeps_the_batch_timestamp():
    buf = bytearray(kp_batch(BIG[:100]))
    R.set_log_append_time(buf, 0, len(buf), T0 + 5)
    out = R.slice_batch(bytes(buf), [(1010, 1019)])
    assert R.read_header(out).max_timestamp == T0 + 5 and R.batch_crc_valid(out)
    assert [r.timestamp for r in DefaultRecordBatch(out)] == [T0 + 5] * 10


def test_a_record_index_walks_a_batch_once_across_pieces():
    batch = kp_batch(BIG)
    index = R.RecordIndex(batch)
    for k in range(0, 2000, 50):
        piece = R.slice_batch(batch, [(1000 + k, 1049 + k)], index)
        assert [r.offset for r in DefaultRecordBatch(piece)] == list(range(1000 + k, 1050 + k))
        assert index.walked == k + 50      # only as far as the piece asked, never again from the start
    assert index.matches(batch) and not index.matches(kp_batch(BIG[:1999]))


def test_slices_of_batches_that_are_not_dense_go_through_the_filter():
    batch = kp_batch(BIG[:100])
    compacted = R.filter_batch(batch, lambda s: s.offset_delta % 2 == 0)    # offsets 1000, 1002, ...
    out = R.slice_batch(compacted, [(1010, 1020)])
    assert [r.offset for r in DefaultRecordBatch(out)] == [1010, 1012, 1014, 1016, 1018, 1020]
    gz = kp_batch(BIG[:100], R.COMPRESSION_GZIP)
    out = R.slice_batch(gz, [(1010, 1011)])
    assert [r.offset for r in DefaultRecordBatch(out)] == [1010, 1011] and R.read_header(out).compression == 1
    # Deltas that are not 0, 1, 2... although the count matches: found by the filter, not by position.
    odd = bytearray(kp_batch([(b"a", b"1", [], 0), (b"b", b"2", [], 0)]))
    odd[R.HEADER_SIZE + 3] = 4                     # record 0's offset delta (zigzag 2) -> 2
    struct.pack_into(">I", odd, R.CRC_OFFSET, R.crc32c(memoryview(odd)[R.ATTRIBUTES_OFFSET:]))
    with pytest.raises(R.RecordsError):
        R.slice_batch(bytes(odd), [(1000, 1000)])  # no record at offset 1000


def test_slicing_a_truncated_batch_raises():
    batch = bytearray(kp_batch(BIG[:10]))
    batch[R.HEADER_SIZE] = 0x7E                    # record 0 claims 63 bytes and more
    with pytest.raises(R.RecordsError):
        R.slice_batch(bytes(batch), [(1005, 1006)])


def _walked_one_by_one(batch):
    ref = R.RecordIndex(batch)
    ref._walk(batch, ref.count)
    return ref


def _uniform(n, size=1024, dt=lambda i: 0, value=lambda i, size: b"v" * size):
    return kp_batch([(None, value(i, size), [], dt(i)) for i in range(n)])


@pytest.mark.parametrize("batch", [
    _uniform(970),                                                    # one producer batch of 1 KiB values
    _uniform(300, dt=lambda i: i // 40),                              # small timestamp deltas
    _uniform(300, dt=lambda i: 30 - (i * 37) % 64),                   # negative ones too (odd zigzag bytes)
    _uniform(300, dt=lambda i: 0 if i < 150 else 70),                 # a two-byte timestamp delta from 150 on
    _uniform(300, value=lambda i, size: b"v" * (size + (i == 200))),  # one record a byte longer
    _uniform(300, dt=lambda i: 70 * (i == 150), value=lambda i, size: b"v" * (size - (i == 150))),  # same length
    _uniform(9000, 20, dt=lambda i: i // 1000),                       # offset deltas of 1, 2 and 3 bytes
    _uniform(70, 5),
    kp_batch(BIG),
], ids=["1k", "ts-deltas", "negative-ts-deltas", "long-ts-delta", "odd-length", "long-ts-delta-same-length", "9000", "tiny", "mixed"])
def test_a_record_index_finds_what_the_record_by_record_walk_finds(batch):
    ref = _walked_one_by_one(batch)
    for step in (1, 7, 500, ref.count):  # pieces of several sizes, as share fetches ask
        index = R.RecordIndex(batch)
        for k in list(range(0, ref.count, step)) + [ref.count]:
            assert index.start(batch, k) == ref.start(batch, k)
            assert index.walked == k         # only as far as asked
        assert list(index.timestamp_deltas) == list(ref.timestamp_deltas)
        assert index.out_of_order == ref.out_of_order == ref.count


def test_a_record_index_finds_an_offset_delta_out_of_order_inside_a_run():
    batch = bytearray(_uniform(100, 50))
    first = R.HEADER_SIZE
    length_bytes = 1 if batch[first] < 0x80 else 2
    record = (len(batch) - R.HEADER_SIZE) // 100
    at = first + 40 * record + length_bytes + 2     # record 40's offset delta (zigzag 80)
    assert batch[at] == 80
    batch[at] = 84
    struct.pack_into(">I", batch, R.CRC_OFFSET, R.crc32c(memoryview(batch)[R.ATTRIBUTES_OFFSET:]))
    index = R.RecordIndex(bytes(batch))
    assert index.start(bytes(batch), 100) == len(batch)
    assert index.out_of_order == 40
    with pytest.raises(R.RecordsError):
        R.slice_batch(bytes(batch), [(1040, 1040)])  # no record at offset 1040: found by the filter
