"""Record batch v2: build, validate (Kafka error codes), in-place rewrites, decoding."""

import struct

import pytest
from crc32c import crc32c

from protocol import records as R
from protocol.records import RecordsError, build_batch, iter_records, validate_records


def recrc(buf: bytearray, pos: int = 0) -> bytearray:
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    struct.pack_into(">I", buf, pos + R.CRC_OFFSET, crc32c(bytes(buf[pos + R.ATTRIBUTES_OFFSET:pos + size])))
    return buf


def patched(batch: bytes, fmt: str, offset: int, value, fix_crc: bool = True) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(recrc(buf) if fix_crc else buf)


def code_of(data, **kw) -> int:
    with pytest.raises(RecordsError) as exc:
        validate_records(data, **kw)
    return exc.value.code


RECS = [(b"k1", b"v1", [("h1", b"x"), ("h2", None)]), (None, b"v2", []), (b"k3", None, []),
        (b"", b"v" * 300, [])]


def test_header_layout():
    assert R.HEADER.size == R.HEADER_SIZE == 61
    b = build_batch(RECS, timestamp=1_700_000_000_000, producer_id=7, producer_epoch=2, base_sequence=11)
    info = R.read_header(b)
    assert (info.base_offset, info.magic, info.last_offset_delta, info.records_count) == (0, 2, 3, 4)
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence) == (7, 2, 11, 14)
    assert info.size == len(b)
    assert info.crc == crc32c(b[21:])


def test_build_validate_decode_round_trip():
    b = build_batch(RECS, base_offset=0, timestamp=1000)
    [info] = validate_records(b)
    assert info.position == 0 and info.size == len(b)
    assert info.compression == R.COMPRESSION_NONE and info.timestamp_type == R.CREATE_TIME
    assert not info.is_transactional and not info.is_control and not info.has_producer_id
    assert info.base_timestamp == info.max_timestamp == 1000
    decoded = list(iter_records(b))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (0, 1000, b"k1", b"v1", [("h1", b"x"), ("h2", None)]), (1, 1000, None, b"v2", []),
        (2, 1000, b"k3", None, []), (3, 1000, b"", b"v" * 300, [])]


def test_per_record_timestamps_and_large_varints():
    recs = [(b"a", b"1", [], 5000), (b"b", b"2", [], 1000), (b"c", b"x" * 70000, [], 2**40)]
    b = build_batch(recs, base_offset=123)
    info = validate_records(b, client=False)[0]
    assert info.base_timestamp == 5000 and info.max_timestamp == 2**40
    assert [(r.offset, r.timestamp, len(r.value)) for r in iter_records(b)] == [
        (123, 5000, 1), (124, 1000, 1), (125, 2**40, 70000)]


def test_flags_and_control_batch():
    b = build_batch([(b"k", b"v", [])], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    assert validate_records(b)[0].is_transactional
    c = R.build_control_batch(5, 3, commit=True, coordinator_epoch=9)
    info = validate_records(c, single_batch=False, client=False)[0]
    assert info.is_control and info.is_transactional and info.producer_id == 5
    assert R.control_record_type(c) == R.CONTROL_COMMIT and R.control_coordinator_epoch(c) == 9
    assert R.control_record_type(R.build_control_batch(5, 3, commit=False)) == R.CONTROL_ABORT
    assert code_of(c) == R.INVALID_RECORD  # clients may not write control batches


def test_crc_corruption_detected():
    b = bytearray(build_batch(RECS))
    b[-3] ^= 0x01
    assert code_of(bytes(b)) == R.CORRUPT_MESSAGE
    assert not R.batch_crc_valid(b)
    c = bytearray(build_batch(RECS))
    c[R.ATTRIBUTES_OFFSET + 5] ^= 0xFF  # inside the CRC-covered header part
    assert code_of(bytes(c)) == R.CORRUPT_MESSAGE


def test_magic_and_size_errors():
    b = build_batch(RECS)
    assert code_of(patched(b, ">b", R.MAGIC_OFFSET, 1)) == R.INVALID_RECORD
    assert code_of(patched(b, ">b", R.MAGIC_OFFSET, 1), single_batch=False) == R.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert code_of(patched(b, ">b", R.MAGIC_OFFSET, 3)) == R.CORRUPT_MESSAGE
    assert code_of(patched(b, ">b", R.MAGIC_OFFSET, -1)) == R.CORRUPT_MESSAGE
    assert code_of(patched(b, ">i", R.LENGTH_OFFSET, 13, fix_crc=False)) == R.CORRUPT_MESSAGE
    small = patched(b, ">i", R.LENGTH_OFFSET, 30, fix_crc=False)[:42]
    assert code_of(small) == R.CORRUPT_MESSAGE  # complete but shorter than a v2 header
    assert code_of(b, max_message_bytes=len(b) - 1) == R.RECORD_TOO_LARGE
    assert validate_records(b, max_message_bytes=len(b))


def test_batch_count_rules():
    assert code_of(b"") == R.INVALID_RECORD
    b = build_batch(RECS)
    assert code_of(b[:-1]) == R.INVALID_RECORD  # an incomplete batch is no batch
    assert code_of(b + b) == R.INVALID_RECORD  # Produce v3+: exactly one batch
    infos = validate_records(b + b, single_batch=False)
    assert [(i.position, i.size) for i in infos] == [(0, len(b)), (len(b), len(b))]
    # trailing bytes that do not form a batch are ignored (Kafka trims them)
    assert len(validate_records(b + b"\x00" * 11)) == 1
    assert len(validate_records(b + b[:40])) == 1
    # ... unless their size field is already impossible
    assert code_of(b + b"\x00" * 12) == R.CORRUPT_MESSAGE


def test_client_batch_checks():
    b = build_batch(RECS)
    assert code_of(patched(b, ">q", 0, 5)) == R.INVALID_RECORD  # baseOffset must be 0
    assert validate_records(patched(b, ">q", 0, 5), client=False)
    assert code_of(patched(b, ">i", R.RECORDS_COUNT_OFFSET, 3)) == R.INVALID_RECORD
    assert code_of(patched(b, ">i", R.RECORDS_COUNT_OFFSET, 0)) == R.INVALID_RECORD
    assert code_of(patched(b, ">i", R.LAST_OFFSET_DELTA_OFFSET, -1)) == R.INVALID_RECORD
    idem = build_batch(RECS, producer_id=3, producer_epoch=0, base_sequence=-1)
    assert code_of(idem) == R.INVALID_RECORD
    assert code_of(patched(b, ">h", R.ATTRIBUTES_OFFSET, 7)) == R.UNSUPPORTED_COMPRESSION_TYPE


def test_timestamp_checks():
    b = build_batch(RECS, timestamp=10_000)
    ok = dict(now_ms=10_000, timestamp_before_max_ms=100, timestamp_after_max_ms=100)
    assert validate_records(b, **ok)
    assert code_of(b, now_ms=10_200, timestamp_before_max_ms=100, timestamp_after_max_ms=100) == R.INVALID_TIMESTAMP
    assert code_of(b, now_ms=9_800, timestamp_before_max_ms=100, timestamp_after_max_ms=100) == R.INVALID_TIMESTAMP
    lat = bytearray(b)
    R.set_log_append_time(lat, 0, len(lat), 10_000)
    assert code_of(bytes(lat), timestamp_type=R.LOG_APPEND_TIME, **ok) == R.INVALID_TIMESTAMP


def test_offset_and_epoch_rewrite_keep_crc():
    b = bytearray(build_batch(RECS, timestamp=1))
    crc_before = bytes(b[R.CRC_OFFSET:R.CRC_OFFSET + 4])
    R.set_base_offset(b, 0, 987654321)
    R.set_partition_leader_epoch(b, 0, 42)
    assert bytes(b[R.CRC_OFFSET:R.CRC_OFFSET + 4]) == crc_before
    assert R.batch_crc_valid(b)
    info = validate_records(b, client=False)[0]
    assert (info.base_offset, info.partition_leader_epoch) == (987654321, 42)
    assert [r.offset for r in iter_records(b)] == [987654321 + i for i in range(4)]


def test_log_append_time_rewrites_crc():
    b = bytearray(build_batch(RECS, timestamp=1000))
    before = bytes(b)
    R.set_log_append_time(b, 0, len(b), 5555)
    assert b != before and R.batch_crc_valid(b)
    info = R.read_header(b)
    assert info.timestamp_type == R.LOG_APPEND_TIME and info.max_timestamp == 5555
    assert info.base_timestamp == 1000  # Kafka only rewrites maxTimestamp
    assert {r.timestamp for r in iter_records(b)} == {5555}


def test_rewrite_at_position_in_larger_buffer():
    one = build_batch(RECS)
    buf = bytearray(one + one)
    R.set_base_offset(buf, len(one), 4)
    R.set_log_append_time(buf, len(one), len(one), 77)
    assert R.batch_crc_valid(buf, 0) and R.batch_crc_valid(buf, len(one))
    assert [i.base_offset for i in validate_records(buf, single_batch=False, client=False)] == [0, 4]


def test_sequence_wraparound():
    assert R.increment_sequence(5, 3) == 8
    assert R.increment_sequence(R.INT32_MAX, 1) == 0
    assert R.increment_sequence(R.INT32_MAX - 1, 3) == 1
    b = build_batch(RECS, producer_id=1, producer_epoch=0, base_sequence=R.INT32_MAX - 1)
    assert R.read_header(b).last_sequence == 1  # MAX-1, MAX, 0, 1


def test_iter_records_rejects_compressed_and_truncated():
    b = build_batch(RECS)
    with pytest.raises(RecordsError):
        list(iter_records(patched(b, ">h", R.ATTRIBUTES_OFFSET, R.COMPRESSION_GZIP)))
    with pytest.raises(RecordsError):
        list(iter_records(b[:-5]))
    with pytest.raises(ValueError):
        build_batch([])
