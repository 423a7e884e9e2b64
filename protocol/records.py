"""Record batch v2 (magic 2) handling without decoding record bodies.

Implemented:
  * batch header layout (61 bytes) as precompiled structs and field offsets;
  * ``validate_records``: walks a produced records blob and applies Kafka's
    produce-path checks in Kafka's order (ProduceRequest.validateRecords,
    UnifiedLog.analyzeAndValidateRecords, LogValidator.validateBatch) using
    batch headers and CRC32C only; failures raise ``RecordsError`` carrying
    the Kafka error code;
  * in-place rewrites: base offset, partition leader epoch, LogAppendTime
    (max timestamp + timestamp-type bit + CRC recomputed);
  * ``build_batch`` / ``build_control_batch`` (uncompressed) and
    ``iter_records`` (any codec ``protocol.compression`` has) for internal
    topics, the DLQ's copy-record, admin tools and tests;
  * the batch filter: ``scan_records`` walks a batch's records reading only
    their framing (length, offset and timestamp deltas, key, null value);
    ``filter_batch`` copies the chosen records of a batch into a new batch
    with the same base offset, last offset delta and producer fields, the
    header and CRC rewritten and record bodies copied as bytes, never decoded
    (Kafka's ``MemoryRecords.filterTo``); compressed batches are inflated,
    filtered and written with the same codec. It serves the log cleaner and
    share-fetch sub-batches. ``empty_batch`` is Kafka's
    ``DefaultRecordBatch.writeEmptyHeader``; ``uncompressed_batch`` inflates;
    ``keyless_records`` finds the records a compacted topic refuses;
  * contiguous slices: ``slice_batch`` keeps the records of offset ranges of
    an uncompressed batch reading only the kept records' framing, with a
    ``RecordIndex`` (record positions, walked once as far as needed) that a
    caller may keep for a big batch handed out in pieces (share fetches).

Not implemented: per-record validation of produced batches (Kafka decodes
uncompressed records to check per-record timestamps and record count; here
timestamps are checked on the batch's base/max timestamps only), and message
format conversion (magic 0/1 is rejected).
"""

from __future__ import annotations

import functools
import struct
import sys
import time
from array import array
from bisect import bisect_right
from typing import Iterator, NamedTuple

from protocol import compression

_crc32c = None  # crc32c.crc32c, imported on first use (crc32c)


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of ``data`` (the ``crc32c`` package), continuing ``value`` (the CRC of the bytes
    before it).  Imported on first use: the package's ``__init__`` reads its own distribution
    metadata (``importlib.metadata`` and ``email``: ~12 ms and ~2 MiB), which a broker that has
    checked no batch yet does not need."""
    f = _crc32c
    if f is None:
        f = _load_crc32c()
    return f(data, value)


def _load_crc32c():
    global _crc32c
    from crc32c import crc32c as f

    _crc32c = f
    return f

# ---------------------------------------------------------------- error codes
CORRUPT_MESSAGE = 2
RECORD_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87


class RecordsError(Exception):
    """A records blob was refused; ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# -------------------------------------------------------------- header layout
# baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32,
# attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64,
# producerId i64, producerEpoch i16, baseSequence i32, recordsCount i32
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: batch size == batchLength + 12
MIN_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
HEADER_SIZE_UP_TO_MAGIC = 17

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers attributes..end of batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
INT32_MAX = 0x7FFFFFFF

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_TS_TYPE_ATTRS = struct.Struct(">h")


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's int32 sequence arithmetic: wraps from INT32_MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class BatchInfo:
    """Header fields of one batch plus its position/size in the blob it came from."""

    __slots__ = ("position", "size", "base_offset", "partition_leader_epoch", "magic", "crc",
                 "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count")

    def __init__(self, position: int, header: tuple):
        (self.base_offset, length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence, self.records_count) = header
        self.position = position
        self.size = length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return CREATE_TIME if not self.attributes & TIMESTAMP_TYPE_MASK else LOG_APPEND_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def __repr__(self) -> str:
        return (f"BatchInfo(pos={self.position}, size={self.size}, base={self.base_offset}, "
                f"delta={self.last_offset_delta}, count={self.records_count}, attrs={self.attributes:#x}, "
                f"pid={self.producer_id}, epoch={self.producer_epoch}, seq={self.base_sequence})")


def read_header(buf, position: int = 0) -> BatchInfo:
    """Parse the header at ``position`` (no validation)."""
    return BatchInfo(position, HEADER.unpack_from(buf, position))


def _next_batch_size(mv: memoryview, pos: int, end: int) -> int:
    """Size of the complete batch at ``pos``, 0 if incomplete; raises on bad size/magic.

    Mirrors Kafka's ByteBufferLogInputStream.nextBatchSize.
    """
    remaining = end - pos
    if remaining < LOG_OVERHEAD:
        return 0
    length = _I32.unpack_from(mv, pos + LENGTH_OFFSET)[0]
    if length < MIN_RECORD_OVERHEAD:
        raise RecordsError(CORRUPT_MESSAGE, f"Record size {length} is less than the minimum "
                                            f"record overhead ({MIN_RECORD_OVERHEAD})")
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return 0
    magic = mv[pos + MAGIC_OFFSET]
    if magic > 2:  # a signed byte < 0 reads as > 127 here
        raise RecordsError(CORRUPT_MESSAGE, f"Invalid magic found in record: {magic - 256 if magic > 127 else magic}")
    size = length + LOG_OVERHEAD
    return size if remaining >= size else 0


def validate_records(buf, *, single_batch: bool = True, client: bool = True,
                     max_message_bytes: int | None = None,
                     timestamp_type: int = CREATE_TIME, now_ms: int | None = None,
                     timestamp_before_max_ms: int | None = None,
                     timestamp_after_max_ms: int | None = None) -> list[BatchInfo]:
    """Validate a records blob; return the info of every complete batch in it.

    ``single_batch`` applies the Produce v3+ rule (exactly one batch, magic 2).
    ``client`` applies the checks Kafka reserves for client appends (baseOffset 0,
    offset range / count consistency, no control batches, sequence set when
    idempotent). Trailing bytes that do not form a whole batch are ignored, as
    Kafka trims them; appenders must write only ``info.position .. +info.size``.
    Timestamps are checked against ``now_ms`` +- the before/after limits when
    ``now_ms`` is given (batch base/max timestamps only).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    if single_batch:  # ProduceRequest.validateRecords order: first batch, its magic, then "has next"
        size = _next_batch_size(mv, 0, end)
        if not size:
            raise RecordsError(INVALID_RECORD, "Produce requests must have at least one record batch per partition")
        if mv[MAGIC_OFFSET] != 2:
            raise RecordsError(INVALID_RECORD, "Produce requests are only allowed to contain record "
                                               "batches with magic version 2")
        if _next_batch_size(mv, size, end):
            raise RecordsError(INVALID_RECORD, "Produce requests are only allowed to contain exactly one "
                                               "record batch per partition")
        positions = [(0, size)]
    else:
        positions = []
        pos = 0
        while size := _next_batch_size(mv, pos, end):
            positions.append((pos, size))
            pos += size
        if not positions:
            raise RecordsError(INVALID_RECORD, "Record batch has no batches at all")

    infos = []
    for pos, size in positions:
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            raise RecordsError(UNSUPPORTED_FOR_MESSAGE_FORMAT, f"Record batches with magic {magic} are not supported")
        if size < HEADER_SIZE:
            raise RecordsError(CORRUPT_MESSAGE, f"Record batch is corrupt (the size {size} is smaller than "
                                                f"the minimum allowed overhead {HEADER_SIZE})")
        info = BatchInfo(pos, HEADER.unpack_from(mv, pos))
        if client and info.base_offset != 0:
            raise RecordsError(INVALID_RECORD, f"The baseOffset of the record batch should be 0, "
                                               f"but it is {info.base_offset}")
        if max_message_bytes is not None and size > max_message_bytes:
            raise RecordsError(RECORD_TOO_LARGE, f"The record batch size {size} bytes exceeds the maximum "
                                                 f"configured value of {max_message_bytes}")
        if crc32c(mv[pos + ATTRIBUTES_OFFSET:pos + size]) != info.crc:
            raise RecordsError(CORRUPT_MESSAGE, "Record is corrupt (stored crc does not match computed crc)")
        if info.compression > COMPRESSION_ZSTD:
            raise RecordsError(UNSUPPORTED_COMPRESSION_TYPE, f"Unknown compression type id {info.compression}")
        infos.append(info)

    for info in infos:
        if client:
            count_from_offsets = info.last_offset_delta + 1
            if count_from_offsets <= 0:
                raise RecordsError(INVALID_RECORD, f"Batch has an invalid offset range: [0, {info.last_offset_delta}]")
            if info.records_count <= 0:
                raise RecordsError(INVALID_RECORD, f"Invalid reported count for record batch: {info.records_count}")
            if count_from_offsets != info.records_count:
                raise RecordsError(INVALID_RECORD, f"Inconsistent batch offset range [0, {info.last_offset_delta}] "
                                                   f"and count of records {info.records_count}")
            if info.is_control:
                raise RecordsError(INVALID_RECORD, "Clients are not allowed to write control records")
            if info.producer_id >= 0 and info.base_sequence < 0:
                raise RecordsError(INVALID_RECORD, f"Invalid sequence number {info.base_sequence} in record batch "
                                                   f"with producerId {info.producer_id}")
        if now_ms is not None:
            _check_timestamps(info, timestamp_type, now_ms, timestamp_before_max_ms, timestamp_after_max_ms)
    return infos


def _check_timestamps(info: BatchInfo, topic_type: int, now: int, before: int | None, after: int | None) -> None:
    if topic_type == CREATE_TIME and info.max_timestamp != NO_TIMESTAMP:
        for ts in (info.base_timestamp, info.max_timestamp):
            if ts == NO_TIMESTAMP:
                continue
            if (before is not None and now - ts > before) or (after is not None and ts - now > after):
                lo = now - before if before is not None else "-inf"
                hi = now + after if after is not None else "+inf"
                raise RecordsError(INVALID_TIMESTAMP, f"Timestamp {ts} of message is out of range. "
                                                      f"The timestamp should be within [{lo}, {hi}]")
    elif info.timestamp_type == LOG_APPEND_TIME:
        raise RecordsError(INVALID_TIMESTAMP, "Invalid timestamp type in message. Producer should not set "
                                              "timestamp type to LogAppendTime.")


# ------------------------------------------------------------ in-place rewrite
def set_base_offset(buf: bytearray, position: int, base_offset: int) -> None:
    """Rewrite baseOffset; outside the CRC-covered range, so the CRC stays valid."""
    _I64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch; outside the CRC-covered range."""
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray, position: int, size: int, timestamp: int) -> None:
    """Set maxTimestamp and the LogAppendTime attribute bit, then recompute the CRC."""
    attrs = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    _U32.pack_into(buf, position + CRC_OFFSET,
                   crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:position + size]))


def batch_crc_valid(buf, position: int = 0) -> bool:
    """True if the batch at ``position`` is complete and its stored CRC matches."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if len(mv) - position < HEADER_SIZE:
        return False
    size = _I32.unpack_from(mv, position + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    if size < HEADER_SIZE or len(mv) - position < size:
        return False
    return crc32c(mv[position + ATTRIBUTES_OFFSET:position + size]) == _U32.unpack_from(mv, position + CRC_OFFSET)[0]


# ------------------------------------------------------------------- varints
def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)  # zigzag (value is within int64)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise RecordsError(CORRUPT_MESSAGE, "varint is too long")


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


# ------------------------------------------------------------------- builder
def build_batch(records, base_offset: int = 0, timestamp: int | None = None, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                control: bool = False, partition_leader_epoch: int = -1) -> bytes:
    """Encode an uncompressed v2 batch.

    A record is ``(key, value, headers)`` or ``(key, value, headers, timestamp)``;
    headers are ``[(str, bytes | None)]``. ``timestamp`` (default now) is used
    for records that carry none.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    stamps = [r[3] if len(r) > 3 and r[3] is not None else timestamp for r in records]
    base_ts = stamps[0]
    body = bytearray()
    rec = bytearray()
    for delta, (r, ts) in enumerate(zip(records, stamps)):
        key, value, headers = r[0], r[1], r[2]
        rec.clear()
        rec.append(0)  # record attributes
        _write_varint(rec, ts - base_ts)
        _write_varint(rec, delta)
        _write_bytes(rec, key)
        _write_bytes(rec, value)
        _write_varint(rec, len(headers or ()))
        for hkey, hvalue in headers or ():
            _write_bytes(rec, hkey.encode())
            _write_bytes(rec, hvalue)
        _write_varint(body, len(rec))
        body += rec
    attributes = (TRANSACTIONAL_MASK if transactional else 0) | (CONTROL_MASK if control else 0)
    size = HEADER_SIZE + len(body)
    out = bytearray(size)
    HEADER.pack_into(out, 0, base_offset, size - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
                     len(records) - 1, base_ts, max(stamps), producer_id, producer_epoch, base_sequence,
                     len(records))
    out[HEADER_SIZE:] = body
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


CONTROL_ABORT, CONTROL_COMMIT = 0, 1


def build_control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0,
                        base_offset: int = 0, timestamp: int | None = None) -> bytes:
    """An end-transaction marker batch (transactional + control, one record)."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([(key, value, [])], base_offset=base_offset, timestamp=timestamp,
                       producer_id=producer_id, producer_epoch=producer_epoch, transactional=True, control=True)


# ------------------------------------------------------------------- decoding
class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list


def iter_records(batch) -> Iterator[Record]:
    """Decode the records of one batch (internal topics, DLQ copy-record, admin tools, tests).

    A compressed batch is inflated first; a codec that is not installed or data that does not
    inflate raise ``RecordsError`` (UNSUPPORTED_COMPRESSION_TYPE / CORRUPT_MESSAGE)."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    if len(mv) < info.size:
        raise RecordsError(CORRUPT_MESSAGE, "batch is truncated")
    body = batch_body(mv, info)
    end = len(body)
    log_append = info.timestamp_type == LOG_APPEND_TIME
    pos = 0
    for _ in range(info.records_count):
        length, pos = _read_varint(body, pos)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise RecordsError(CORRUPT_MESSAGE, "record length exceeds the batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(body, pos)
        off_delta, pos = _read_varint(body, pos)
        klen, pos = _read_varint(body, pos)
        key = None if klen < 0 else bytes(body[pos:pos + klen])
        pos += max(klen, 0)
        vlen, pos = _read_varint(body, pos)
        value = None if vlen < 0 else bytes(body[pos:pos + vlen])
        pos += max(vlen, 0)
        nheaders, pos = _read_varint(body, pos)
        headers = []
        for _h in range(nheaders):
            hklen, pos = _read_varint(body, pos)
            hkey = bytes(body[pos:pos + hklen]).decode()
            pos += hklen
            hvlen, pos = _read_varint(body, pos)
            headers.append((hkey, None if hvlen < 0 else bytes(body[pos:pos + hvlen])))
            pos += max(hvlen, 0)
        if pos != rec_end:
            raise RecordsError(CORRUPT_MESSAGE, "record length does not match its content")
        ts = info.max_timestamp if log_append else info.base_timestamp + ts_delta
        yield Record(info.base_offset + off_delta, ts, key, value, headers)


def record_key_values(batch) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record of one batch, headers and timestamps skipped: what a
    coordinator's replay reads (several times faster than ``iter_records`` on small records).
    Raises ``RecordsError`` as ``iter_records``."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    if len(mv) < info.size:
        raise RecordsError(CORRUPT_MESSAGE, "batch is truncated")
    body = bytes(batch_body(mv, info))
    base, end, pos, out = info.base_offset, len(body), 0, []
    append = out.append
    try:
        for _ in range(info.records_count):
            # zigzag varints, inlined for one and two bytes (what coordinator records use)
            v = body[pos]
            if v < 0x80:
                pos += 1
            elif body[pos + 1] < 0x80:
                v = (v & 0x7F) | (body[pos + 1] << 7)
                pos += 2
            else:
                v, pos = _read_varint(body, pos)
                v = (v << 1) ^ (v >> 63)  # back to the raw form the inlined cases hold
            length = (v >> 1) ^ -(v & 1)
            rec_end = pos + length
            if length <= 0 or rec_end > end:
                raise RecordsError(CORRUPT_MESSAGE, "record length exceeds the batch")
            p = pos + 1  # attributes
            while body[p] >= 0x80:  # timestamp delta, not needed
                p += 1
            p += 1
            v = body[p]
            if v < 0x80:
                p += 1
            elif body[p + 1] < 0x80:
                v = (v & 0x7F) | (body[p + 1] << 7)
                p += 2
            else:
                v, p = _read_varint(body, p)
                v = (v << 1) ^ (v >> 63)
            delta = (v >> 1) ^ -(v & 1)
            v = body[p]
            if v < 0x80:
                klen = (v >> 1) ^ -(v & 1)
                p += 1
            else:
                klen, p = _read_varint(body, p)
            if klen < 0:
                key = None
            else:
                key = body[p:p + klen]
                p += klen
            v = body[p]
            if v < 0x80:
                vlen = (v >> 1) ^ -(v & 1)
                p += 1
            else:
                vlen, p = _read_varint(body, p)
            if p + vlen > rec_end:
                raise RecordsError(CORRUPT_MESSAGE, "record content exceeds its length")
            append((base + delta, key, None if vlen < 0 else body[p:p + vlen]))
            pos = rec_end
    except IndexError:
        raise RecordsError(CORRUPT_MESSAGE, "record is truncated") from None
    return out


def control_record_type(batch) -> int:
    """CONTROL_ABORT / CONTROL_COMMIT of a control batch, -1 if it has no (known) record."""
    for rec in iter_records(batch):
        if rec.key is not None and len(rec.key) >= 4:
            return struct.unpack_from(">h", rec.key, 2)[0]
        return -1
    return -1


def control_coordinator_epoch(batch) -> int:
    """Coordinator epoch carried in an end-transaction marker's value (-1 if absent)."""
    for rec in iter_records(batch):
        if rec.value is not None and len(rec.value) >= 6:
            return struct.unpack_from(">i", rec.value, 2)[0]
    return -1


# --------------------------------------------------------------- batch filter
class RecordSpan(NamedTuple):
    """One record of a batch body, read from its framing only (key and value are not copied).

    ``start``/``end`` bound the record (its length varint included) in the body;
    ``key`` is a memoryview into the body, None for a null key; ``has_value`` is
    False for a tombstone."""

    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: memoryview | None
    has_value: bool


def batch_body(batch, info: BatchInfo | None = None):
    """The records section of a complete batch at position 0, inflated when compressed.

    Raises ``RecordsError``: UNSUPPORTED_COMPRESSION_TYPE when the codec needs the optional
    extra (``protocol.compression.available`` tells beforehand), CORRUPT_MESSAGE when it does
    not inflate."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    if info is None:
        info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    body = mv[HEADER_SIZE:info.size]
    codec = info.compression
    if codec == COMPRESSION_NONE:
        return body
    try:
        return memoryview(compression.decompress(codec, body))
    except compression.CodecUnavailable as e:
        raise RecordsError(UNSUPPORTED_COMPRESSION_TYPE, str(e)) from None
    except compression.CodecError as e:
        raise RecordsError(CORRUPT_MESSAGE, str(e)) from None


def scan_records(body, count: int) -> list[RecordSpan]:
    """The spans of the ``count`` records in ``body`` (a batch's records section, inflated)."""
    mv = body if isinstance(body, memoryview) else memoryview(body)
    end = len(mv)
    out = []
    pos = 0
    try:
        for _ in range(count):
            length, p = _read_varint(mv, pos)
            rec_end = p + length
            if length <= 0 or rec_end > end:
                raise RecordsError(CORRUPT_MESSAGE, "record length exceeds the batch")
            ts_delta, p = _read_varint(mv, p + 1)  # after the attributes byte
            off_delta, p = _read_varint(mv, p)
            klen, p = _read_varint(mv, p)
            key = None if klen < 0 else mv[p:p + klen]
            p += max(klen, 0)
            vlen, p = _read_varint(mv, p)
            if p + max(vlen, 0) > rec_end:
                raise RecordsError(CORRUPT_MESSAGE, "record content exceeds its length")
            out.append(RecordSpan(pos, rec_end, off_delta, ts_delta, key, vlen >= 0))
            pos = rec_end
    except IndexError:
        raise RecordsError(CORRUPT_MESSAGE, "record is truncated") from None
    return out


def keyless_records(batch, info: BatchInfo | None = None) -> list[int]:
    """Indexes (in the batch) of the records that have no key: Kafka's ``LogValidator.validateKey``,
    which a compacted topic applies to every produced record. Raises ``RecordsError`` as
    :func:`batch_body` (a codec that needs the optional extra, data that does not inflate)."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    if info is None:
        info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    spans = scan_records(batch_body(mv, info), info.records_count)
    return [i for i, s in enumerate(spans) if s.key is None]


def filter_batch(batch, keep, *, spans: list[RecordSpan] | None = None, body=None,
                 delete_horizon_ms: int | None = None, force_delete_horizon: bool = False):
    """The records of one v2 batch for which ``keep(span)`` is true, as a batch of their own.

    The result keeps the base offset, the last offset delta (so producer sequence state and
    offsets are unchanged), the partition leader epoch, producer id/epoch/base sequence, the
    transactional/control flags, timestamp type and codec; the record count, max timestamp
    (CreateTime), length and CRC are rewritten. Record bytes are copied, never decoded.

    ``delete_horizon_ms`` (the log cleaner's now + delete.retention.ms) is written as KIP-534's
    delete horizon when the batch has none yet and a kept record is a tombstone (or
    ``force_delete_horizon``, for a marker of an empty transaction): the base timestamp becomes the
    horizon and each kept record's timestamp delta is re-encoded against it.

    Returns ``batch`` itself when every record is kept and nothing changes, None when no record
    is kept (see :func:`empty_batch`), else new bytes. ``spans``/``body`` may be passed when the
    caller already scanned the batch. Raises ``RecordsError`` as :func:`batch_body`.
    """
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    if body is None:
        body = batch_body(mv, info)
    if spans is None:
        spans = scan_records(body, info.records_count)
    kept = [s for s in spans if keep(s)]
    if not kept:
        return None
    has_horizon = bool(info.attributes & DELETE_HORIZON_MASK)
    set_horizon = (delete_horizon_ms is not None and not has_horizon
                   and (force_delete_horizon or any(not s.has_value for s in kept)))
    if len(kept) == len(spans) and len(spans) == info.records_count and not set_horizon:
        return batch
    log_append = info.timestamp_type == LOG_APPEND_TIME
    if log_append:
        max_ts = info.max_timestamp
    else:
        max_ts = info.base_timestamp + max(s.timestamp_delta for s in kept)
    base_ts = info.base_timestamp
    attributes = info.attributes
    out = bytearray()
    if set_horizon:
        attributes |= DELETE_HORIZON_MASK
        shift = info.base_timestamp - delete_horizon_ms  # new delta = old base + old delta - horizon
        base_ts = delete_horizon_ms
        rec = bytearray()
        for s in kept:
            _, p = _read_varint(body, s.start)  # skip the length
            _, after_ts = _read_varint(body, p + 1)  # skip attributes and the old timestamp delta
            rec.clear()
            rec.append(body[p])
            _write_varint(rec, s.timestamp_delta + shift)
            rec += body[after_ts:s.end]
            _write_varint(out, len(rec))
            out += rec
    else:
        start = None
        for s in kept:  # runs of adjacent kept records are copied as one slice
            if start is None:
                start, end = s.start, s.end
            elif s.start == end:
                end = s.end
            else:
                out += body[start:end]
                start, end = s.start, s.end
        out += body[start:end]
    if info.compression != COMPRESSION_NONE:
        try:
            out = compression.compress(info.compression, out)
        except compression.CodecUnavailable as e:  # batch_body would have refused already
            raise RecordsError(UNSUPPORTED_COMPRESSION_TYPE, str(e)) from None
    return _assemble(info, attributes, base_ts, max_ts, len(kept), out)


def empty_batch(batch) -> bytes:
    """A batch with no records that keeps ``batch``'s offsets and producer fields (Kafka's
    ``DefaultRecordBatch.writeEmptyHeader``): what the cleaner keeps of a producer's last batch
    when all its records are removed, so the producer's sequence state survives."""
    info = read_header(batch)
    attributes = info.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return _assemble(info, attributes, NO_TIMESTAMP, info.max_timestamp, 0, b"")


def uncompressed_batch(batch):
    """``batch`` with its records inflated and the codec bits cleared (``batch`` itself when
    uncompressed). Raises ``RecordsError`` as :func:`batch_body`."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    if info.compression == COMPRESSION_NONE:
        return batch
    body = batch_body(mv, info)
    return _assemble(info, info.attributes & ~COMPRESSION_MASK, info.base_timestamp, info.max_timestamp,
                     info.records_count, body)


def _assemble(info: BatchInfo, attributes: int, base_ts: int, max_ts: int, count: int, body) -> bytes:
    """A batch of ``info``'s producer fields and offsets around ``body`` (bytes, or a list of
    pieces, joined once: the CRC runs over the pieces where they are)."""
    return b"".join(_assemble_parts(info, attributes, base_ts, max_ts, count, body))


def _assemble_parts(info: BatchInfo, attributes: int, base_ts: int, max_ts: int, count: int, body) -> list:
    """``_assemble`` as the new header followed by the pieces, not joined."""
    pieces = body if isinstance(body, list) else [body]
    size = HEADER_SIZE + sum(len(p) for p in pieces)
    head = bytearray(HEADER_SIZE)
    HEADER.pack_into(head, 0, info.base_offset, size - LOG_OVERHEAD, info.partition_leader_epoch, 2, 0,
                     attributes, info.last_offset_delta, base_ts, max_ts, info.producer_id,
                     info.producer_epoch, info.base_sequence, count)
    crc = crc32c(memoryview(head)[ATTRIBUTES_OFFSET:])
    for p in pieces:
        crc = crc32c(p, crc)
    _U32.pack_into(head, CRC_OFFSET, crc)
    return [head, *pieces]


# ------------------------------------------------------ contiguous record slices
class RecordIndex:
    """Where the records of one uncompressed v2 batch start, and their timestamp deltas, found from
    the framing of each record (length, attributes, timestamp and offset deltas; never the body),
    and only as far as a caller asks: a big batch handed out in pieces (share fetches) is walked
    once in all, not once per piece. ``start(batch, k)`` is the position in the batch of record
    ``k`` (``k == count``: the end of the records); ``timestamp_deltas`` holds those of the records
    walked; ``out_of_order`` is the first record walked whose offset delta is not its index (count
    when none); ``matches(batch)`` tells whether ``batch`` is still the batch indexed (same CRC and
    size)."""

    __slots__ = ("crc", "size", "count", "_starts", "timestamp_deltas", "out_of_order")

    def __init__(self, batch):
        info = read_header(batch)
        self.crc, self.size, self.count = info.crc, info.size, info.records_count
        self._starts = array("q", [HEADER_SIZE])  # _starts[k]: position of record k, as far as walked
        self.timestamp_deltas = array("q")
        self.out_of_order = self.count

    def matches(self, batch) -> bool:
        return (_U32.unpack_from(batch, CRC_OFFSET)[0] == self.crc
                and _I32.unpack_from(batch, LENGTH_OFFSET)[0] + LOG_OVERHEAD == self.size)

    @property
    def walked(self) -> int:
        """Records whose start is known (for tests and measurements)."""
        return len(self._starts) - 1

    def start(self, batch, k: int) -> int:
        starts = self._starts
        if k < len(starts):
            return starts[k]
        if not 0 <= k <= self.count:
            raise IndexError(k)
        try:
            while len(starts) <= k:
                if not self._run(batch, k):
                    self._walk(batch, min(k, len(starts) + _SLOW_STRETCH))
        except IndexError:
            raise RecordsError(CORRUPT_MESSAGE, "record is truncated") from None
        return starts[k]

    def _run(self, batch, k: int) -> int:
        """Walk, up to record ``k``, a run of records framed alike (same length, a one-byte timestamp
        delta, offset deltas of one varint size), as a producer writes values of one size, checked
        byte column by byte column (a strided slice per framing byte: no per-record Python work).
        Every record of the run has its length varint's bytes, a timestamp delta byte under 0x80 and
        the offset delta bytes of its index checked, which is what the record-by-record walk reads.
        Returns the records walked: 0 when the next records are not such a run (the caller then walks
        some of them one by one)."""
        starts = self._starts
        i0, pos = len(starts) - 1, starts[-1]
        if i0 >= _OFFSET_DELTA_SPLIT[-1]:
            return 0
        length, p = _read_varint(batch, pos)
        ob = 1 if i0 < _OFFSET_DELTA_SPLIT[0] else 2
        size = (p - pos) + length  # the whole record, its length varint included
        if size < p - pos + 2 + ob:
            return 0
        m = min(k - i0, _OFFSET_DELTA_SPLIT[ob - 1] - i0, (self.size - pos) // size)
        if m < _MIN_RUN:
            return 0
        stop = pos + m * size
        for j in range(p - pos):
            if bytes(batch[pos + j:stop:size]) != bytes((batch[pos + j],)) * m:
                return 0
        at = p - pos + 1  # the timestamp delta, past the attributes byte
        deltas = bytes(batch[pos + at:stop:size])
        if not deltas.isascii():  # a byte of 0x80 or more: a timestamp delta of two bytes or more
            return 0
        columns = _offset_delta_columns(ob)
        for j in range(ob):
            if bytes(batch[pos + at + 1 + j:stop:size]) != columns[j][i0:i0 + m]:
                return 0
        self.timestamp_deltas.frombytes(_int64s_of_zigzag_bytes(deltas))
        starts.extend(range(pos + size, stop + 1, size))
        return m

    def _walk(self, batch, k: int) -> None:
        """Walk record by record until the start of record ``k`` is known."""
        starts = self._starts
        pos, end, n = starts[-1], self.size, len(starts)
        ts = self.timestamp_deltas
        # The walk of every record: its three varints decoded inline, on purpose (a loop over the
        # fields, or a call per varint, makes the walk a third slower).
        while n <= k:
            b = batch[pos]
            p, v, shift = pos + 1, b & 0x7F, 7
            while b >= 0x80:
                b = batch[p]
                p += 1
                v |= (b & 0x7F) << shift
                shift += 7
            length = (v >> 1) ^ -(v & 1)
            pos = p + length  # the next record
            if length <= 0 or pos > end:
                raise RecordsError(CORRUPT_MESSAGE, "record length exceeds the batch")
            b = batch[p + 1]  # past the attributes byte: the timestamp delta
            p, v, shift = p + 2, b & 0x7F, 7
            while b >= 0x80:
                b = batch[p]
                p += 1
                v |= (b & 0x7F) << shift
                shift += 7
            ts.append((v >> 1) ^ -(v & 1))
            b = batch[p]  # the offset delta: its zigzag encoding is 2 x (n - 1)
            p, v, shift = p + 1, b & 0x7F, 7
            while b >= 0x80:
                b = batch[p]
                p += 1
                v |= (b & 0x7F) << shift
                shift += 7
            if v != 2 * (n - 1) and self.out_of_order == self.count:
                self.out_of_order = n - 1
            starts.append(pos)
            n += 1


# One-byte zigzag varints (0..127) decoded, as the low byte and the sign-extension byte of an int64.
_ZIGZAG_LOW = bytes(((d >> 1) ^ -(d & 1)) & 0xFF for d in range(128)) + bytes(128)
_ZIGZAG_SIGN = bytes(0xFF if d & 1 else 0 for d in range(128)) + bytes(128)


def _int64s_of_zigzag_bytes(deltas: bytes) -> bytes:
    """The int64s (native order, as ``array("q").frombytes`` takes them) of one-byte zigzag varints:
    byte columns filled by strided slices, no per-record Python work."""
    m = len(deltas)
    out = bytearray(8 * m)
    if deltas.count(0) != m:
        low, sign = deltas.translate(_ZIGZAG_LOW), deltas.translate(_ZIGZAG_SIGN)
        low_at = 0 if sys.byteorder == "little" else 7  # the column of each int64's low byte
        for j in range(8):
            out[j::8] = low if j == low_at else sign
    return out


# Record indexes where the offset delta's varint grows from one byte to two, and from two to three
# (runs stop there: the records past it are a byte longer); records past the second are walked one by one.
_OFFSET_DELTA_SPLIT = (64, 8192)
_MIN_RUN = 8  # a shorter run is walked one record at a time
_SLOW_STRETCH = 16  # records walked one by one after a run was not found, before looking for one again


@functools.lru_cache(maxsize=None)
def _offset_delta_columns(width: int) -> tuple[bytes, ...]:
    """Byte ``j`` of the offset delta varint (zigzag 2 x i) of records i = 0.. while it is ``width``
    bytes long, one bytes per j, indexed by i: what a run's columns must equal."""
    values = range(0, 2 * _OFFSET_DELTA_SPLIT[width - 1], 2)
    if width == 1:
        return (bytes(values),)
    return bytes((v & 0x7F) | 0x80 for v in values), bytes(v >> 7 for v in values)


def slice_batch(batch, ranges: list[tuple[int, int]], index: RecordIndex | None = None):
    """:func:`slice_batch_parts` as one bytes (``batch`` itself when every record is kept)."""
    parts = slice_batch_parts(batch, ranges, index)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def slice_batch_parts(batch, ranges: list[tuple[int, int]], index: RecordIndex | None = None) -> list:
    """The records at the offsets of ``ranges`` ((first, last) ascending, non-overlapping, inside
    the batch) of an uncompressed v2 batch, as a batch of their own: what :func:`filter_batch`
    keeps, but only the kept records are read (their framing, never their bodies) when the
    batch's offsets are dense (records count = last offset delta + 1, as every producer writes
    them); ``index`` (a :class:`RecordIndex` of this batch) is reused across calls. A batch that
    is not dense, or whose offset deltas are not 0, 1, 2..., goes through ``filter_batch``.

    Returns the batch as a list of chunks to be sent one after the other, not joined: ``[batch]``
    when every record is kept; else a new header and the kept records' bytes where they lie in
    ``batch`` (memoryviews of it), or one new bytes (the filter). Raises ``RecordsError``."""
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    info = BatchInfo(0, HEADER.unpack_from(mv, 0))
    base = info.base_offset
    if info.compression != COMPRESSION_NONE or info.records_count != info.last_offset_delta + 1:
        return [_filter_offsets(batch, ranges, base)]
    if index is None:
        index = RecordIndex(mv)
    pieces, count, max_delta = [], 0, None
    ts = index.timestamp_deltas
    for lo, hi in ranges:
        ka, kb = lo - base, hi - base
        sa, sb = index.start(mv, ka), index.start(mv, kb + 1)
        if index.out_of_order <= kb:
            return [_filter_offsets(batch, ranges, base)]
        top = max(ts[ka:kb + 1])
        if max_delta is None or top > max_delta:
            max_delta = top
        pieces.append(mv[sa:sb])
        count += kb - ka + 1
    if count == info.records_count:
        return [batch]
    max_ts = info.max_timestamp if info.timestamp_type == LOG_APPEND_TIME else info.base_timestamp + max_delta
    return _assemble_parts(info, info.attributes, info.base_timestamp, max_ts, count, pieces)


def _filter_offsets(batch, ranges: list[tuple[int, int]], base: int):
    starts = [lo for lo, _ in ranges]

    def keep(span: RecordSpan) -> bool:
        off = base + span.offset_delta
        i = bisect_right(starts, off) - 1
        return i >= 0 and off <= ranges[i][1]

    kept = filter_batch(batch, keep)
    if kept is None:
        raise RecordsError(CORRUPT_MESSAGE, "no record at the offsets asked for")
    return kept
