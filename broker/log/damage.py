"""Damage at rest in stored segments: find the batches that fail their checks, and step past them.

Kafka checks batches on produce only: a fetch serves a segment's bytes as they are, so bytes that
rotted on disk reach consumers, which stop at the batch (a CRC32C failure) until the application
seeks past it. Here a sealed segment is checked once, on the background worker, the first time a
read touches it (``DamageWatch.touch``), in pieces of ``CHECK_PIECE`` bytes so that fsyncs queued
behind it wait for one piece only. A batch that fails (bad header, offsets going backwards, CRC32C
mismatch, cut short) is logged once with the segment's path, position and offset, counted
(``sharebroker_log_corrupt_batches_total``), and from then on reads step over it: a fetch answers
the batches after it, so consumers see a gap of offsets (as after compaction) and go on (an error
answer for the partition, e.g. CORRUPT_MESSAGE, would stop every consumer there until someone seeks
past it by hand; the batch's records are lost either way). A
segment whose file became shorter than the broker wrote it (truncated under the running broker)
is noticed by the same touch (one ``fstat`` per sealed segment a read visits), logged, counted
(``sharebroker_log_truncated_segments_total``) and checked again; reads then end at the cut and go
on with the next segment. The active segment is checked the same way once, only when it held data
at a clean start (recovery after a crash checked it whole; what this run appends was checked on
produce); its check covers what it held then.

``check_segment`` is the same walk from start to end, for ``sharebroker-log-check``
(``admin/log_check.py``). After a damaged batch the walk finds the next good batch: the position
right after the damaged one when its length field still leads to a batch that passes every check,
else the first position further on that starts one (a header with magic 2, offsets in order and a
matching CRC32C); none: the rest of the segment is damaged.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from bisect import bisect_right
from typing import Callable, NamedTuple

from protocol.records import ATTRIBUTES_OFFSET, HEADER, HEADER_SIZE, LOG_OVERHEAD, crc32c

log = logging.getLogger("broker.log.damage")

CHECK_PIECE = 8 << 20  # bytes checked per background job (a queued fsync waits for one piece at most)
_CHUNK = 1 << 20
_MAGIC_AT_16 = re.compile(rb"(?s)(?=.{16}\x02)")  # positions whose byte 16 on is magic 2
_MAX_DELTA = 0x7FFFFFFF


class Damage(NamedTuple):
    """Bytes [position, resume) of a segment file hold no good batch; ``offset`` is the first offset
    expected there (the batch's own base offset when its header could be read)."""
    position: int
    resume: int
    offset: int
    reason: str


class Walk:
    """Where a check of one segment file stands (resumable: the broker checks a piece at a time)."""

    __slots__ = ("position", "expected", "batches", "damage")

    def __init__(self, base_offset: int):
        self.position = 0
        self.expected = base_offset  # every later batch's base offset is at least this
        self.batches = 0
        self.damage: list[Damage] = []


def _problem(hdr: tuple, pos: int, end: int, expected: int) -> str:
    """Why the batch with header ``hdr`` at ``pos`` cannot be good ("" when the header is fine)."""
    if hdr[3] != 2:
        return f"invalid magic {hdr[3]}"
    size = hdr[1] + LOG_OVERHEAD
    if size < HEADER_SIZE:
        return f"invalid batch length {hdr[1]}"
    if pos + size > end:
        return f"batch of {size} bytes cut short by the end of the file at {end}"
    if hdr[0] < expected:
        return f"offset {hdr[0]} below the expected {expected}"
    if hdr[6] < 0 or hdr[12] < 0:
        return f"invalid lastOffsetDelta {hdr[6]} / record count {hdr[12]}"
    return ""


def _crc_problem(fd: int, pos: int, hdr: tuple) -> str:
    size = hdr[1] + LOG_OVERHEAD
    data = os.pread(fd, size, pos)
    if len(data) < size:
        return f"batch cut short: {len(data)} of {size} bytes readable"
    actual = crc32c(memoryview(data)[ATTRIBUTES_OFFSET:])
    if actual != hdr[4]:
        return f"CRC32C mismatch (stored 0x{hdr[4]:08x}, computed 0x{actual:08x})"
    return ""


def _good_at(fd: int, pos: int, end: int, expected: int) -> bool:
    head = os.pread(fd, HEADER_SIZE, pos)
    if len(head) < HEADER_SIZE:
        return False
    hdr = HEADER.unpack(head)
    return (not _problem(hdr, pos, end, expected) and hdr[0] - expected <= _MAX_DELTA
            and not _crc_problem(fd, pos, hdr))


def resync(fd: int, damaged: int, end: int, expected: int, hint: int = -1) -> int:
    """The first position after ``damaged`` where a good batch starts (``end`` if none); ``hint``
    (where the damaged batch's length field points) is tried first."""
    if damaged < hint == end:
        return end
    if damaged < hint < end and _good_at(fd, hint, end, expected):
        return hint
    pos = damaged + 1
    while pos + HEADER_SIZE <= end:
        chunk = os.pread(fd, min(_CHUNK + HEADER_SIZE, end - pos), pos)
        for m in _MAGIC_AT_16.finditer(chunk, 0, min(_CHUNK, len(chunk))):
            q = pos + m.start()
            if q + HEADER_SIZE > end:
                return end
            if _good_at(fd, q, end, expected):
                return q
        pos += _CHUNK
    return end


def check_piece(fd: int, end: int, walk: Walk, limit: int = 1 << 62,
                on_batch: Callable[[int, tuple], None] | None = None) -> bool:
    """Check batches from ``walk.position`` on, about ``limit`` bytes; True when ``end`` is reached."""
    stop = walk.position + limit
    chunk, cstart = b"", 0
    while walk.position < end:
        if walk.position >= stop:
            return False
        pos = walk.position
        off = pos - cstart
        if off < 0 or off + HEADER_SIZE > len(chunk):
            chunk, cstart, off = os.pread(fd, _CHUNK, pos), pos, 0
        if len(chunk) - off < HEADER_SIZE:
            reason = f"{end - pos} bytes after the last batch, too few for a batch header"
            walk.damage.append(Damage(pos, end, walk.expected, reason))
            walk.position = end
            return True
        hdr = HEADER.unpack_from(chunk, off)
        size = hdr[1] + LOG_OVERHEAD
        reason = _problem(hdr, pos, end, walk.expected)
        if not reason:
            if off + size <= len(chunk):
                actual = crc32c(memoryview(chunk)[off + ATTRIBUTES_OFFSET:off + size])
                if actual != hdr[4]:
                    reason = f"CRC32C mismatch (stored 0x{hdr[4]:08x}, computed 0x{actual:08x})"
            else:
                reason = _crc_problem(fd, pos, hdr)
        if reason:
            resume = resync(fd, pos, end, walk.expected, pos + size if size >= HEADER_SIZE else -1)
            offset = hdr[0] if hdr[3] == 2 and walk.expected <= hdr[0] <= walk.expected + _MAX_DELTA \
                else walk.expected
            walk.damage.append(Damage(pos, resume, offset, reason))
            walk.position = resume
            continue
        walk.batches += 1
        if on_batch is not None:
            on_batch(pos, hdr)
        walk.expected = hdr[0] + hdr[6] + 1
        walk.position = pos + size
    return True


def check_segment(path: str, base_offset: int, on_batch=None) -> tuple[Walk, int]:
    """Check a whole segment file: (its walk, its size)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        walk = Walk(base_offset)
        check_piece(fd, size, walk, on_batch=on_batch)
        return walk, size
    finally:
        os.close(fd)


# ------------------------------------------------------------------ the running broker
UNCHECKED, CHECKING, CHECKED = None, "checking", "checked"


def skip(damage: tuple[list[int], list[int]], pos: int) -> int:
    """``pos`` or, when it lies in a damaged range, where that range ends (a walker's hot path)."""
    starts, resumes = damage
    j = bisect_right(starts, pos) - 1
    return resumes[j] if j >= 0 and pos < resumes[j] else pos


class DamageWatch:
    """One partition's damage bookkeeping (owned by its ``PartitionLog``; loop thread only).

    Per segment: ``seg.check`` (UNCHECKED, CHECKING or CHECKED; written here and by recovery, which
    checks what it re-scans) and ``seg.damage`` (None, or (starts, resumes) of its damaged ranges,
    sorted; written only by ``_found``). ``corrupt_batches`` and ``truncated_segments`` are the
    metrics' counters (since start-up)."""

    __slots__ = ("name", "background", "corrupt_batches", "truncated_segments", "checking")

    def __init__(self, name: str, background):
        self.name = name
        self.background = background
        self.corrupt_batches = 0
        self.truncated_segments = 0
        self.checking: set = set()  # segments whose check runs (added by touch, removed by its last piece)

    def recovered(self, segs: list, i: int, truncated: int) -> int:
        """Start-up recovery truncated ``segs[i]`` (not the last) at damage, or found it running into
        the next one: log it and return the index of the first later segment to keep. Kafka drops
        every later segment; here only those overlapping what is left of ``segs[i]`` go."""
        seg = segs[i]
        j = next((k for k in range(i + 1, len(segs)) if segs[k].base_offset >= seg.next_offset), len(segs))
        gap = f"; offsets {seg.next_offset}..{segs[j].base_offset - 1} are a gap" if j < len(segs) else ""
        log.error("%s: damaged segment %s: %d bytes from offset %d on dropped; %d later segment(s) overlapping "
                  "it dropped, %d kept%s", self.name, seg.log_path, truncated, seg.next_offset, j - i - 1,
                  len(segs) - j, gap)
        self.corrupt_batches += 1
        return j

    def touch(self, seg, active: bool = False) -> None:
        """A read is about to walk ``seg``: start its check unless done. A sealed segment is checked
        again when its file was cut or written under us (nothing of ours writes a sealed segment's log
        file: its mtime stays); the active one only needs a check when it held data at start-up that
        recovery did not check (``PartitionLog`` marks what it wrote and what recovery checked)."""
        if seg.closed:
            return
        st = os.fstat(seg.fd)
        if not active:
            self._notice_changes(seg, st)
        if seg.check is UNCHECKED:  # damage found earlier stays (found and logged once)
            seg.check, seg.check_mtime = CHECKING, st.st_mtime_ns
            self.checking.add(seg)
            self._next_piece(seg, Walk(seg.base_offset), seg.size)

    def _notice_changes(self, seg, st: os.stat_result) -> None:
        if st.st_size < seg.size:
            log.error("%s: segment %s is %d bytes on disk but %d were written: it was truncated under the "
                      "running broker; reads stop at the cut and go on with the next segment", self.name,
                      seg.log_path, st.st_size, seg.size)
            self.truncated_segments += 1
            seg.size = st.st_size
            if seg.check is CHECKED:
                seg.check = UNCHECKED  # check again: the batch at the cut is incomplete
        elif seg.check is CHECKED and seg.check_mtime != st.st_mtime_ns:
            if seg.check_mtime is not None:
                log.warning("%s: segment %s was written under the running broker; checking it again",
                            self.name, seg.log_path)
                seg.check = UNCHECKED
            seg.check_mtime = st.st_mtime_ns  # None: checked by start-up recovery

    def verify(self, refs: list) -> list:
        """``refs`` a read is about to answer, without the damaged batches of segments whose check is still
        running (their CRC32C is computed here: until the check is done no batch goes out unchecked).
        A damaged batch is recorded as the check would; when the good batch after it cannot be told
        at once (its length field is damaged too), the answer ends before it (the check finds it)."""
        by_fd = {seg.held_fd: seg for seg in self.checking}  # the refs' segments hold theirs (same callback)
        out = []
        for r in refs:
            seg = by_fd.get(r.fd)
            if seg is not None:
                data = r.data
                hdr = HEADER.unpack_from(data, 0)
                actual = crc32c(data[ATTRIBUTES_OFFSET:])
                if actual != hdr[4]:
                    end = r.position + r.size
                    if end < seg.size and not _good_at(seg.fd, end, seg.size, r.last_offset + 1):
                        break
                    reason = f"CRC32C mismatch (stored 0x{hdr[4]:08x}, computed 0x{actual:08x})"
                    self._found(seg, [Damage(r.position, end, r.base_offset, reason)])
                    continue
            out.append(r)
        return out

    def _next_piece(self, seg, walk: Walk, end: int) -> None:
        """Check the next piece on the worker. The job opens the file by name when it runs and checks
        it is the same file (device, inode), so a queue of checks holds no descriptor and never reads
        a reused descriptor number."""
        try:
            st = os.fstat(seg.fd)
        except OSError as e:
            log.warning("%s: cannot check segment %s: %r", self.name, seg.log_path, e)
            seg.check = UNCHECKED
            self.checking.discard(seg)
            return
        path, ident = seg.log_path, (st.st_dev, st.st_ino)
        found = len(walk.damage)

        def job():
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != ident:
                    raise FileNotFoundError(errno.ENOENT, "replaced since its check started", path)
                return check_piece(fd, end, walk, CHECK_PIECE)
            finally:
                os.close(fd)

        def done(finished, exc):
            if seg.closed or seg.check is not CHECKING or exc is not None:  # deleted, closed, failed,
                self.checking.discard(seg)  # or to be checked again (touch starts that)
                if exc is not None:
                    log.warning("%s: checking segment %s failed: %r", self.name, seg.log_path, exc)
                    seg.check = UNCHECKED
                return
            if len(walk.damage) > found:
                self._found(seg, walk.damage[found:])
            if finished:
                seg.check = CHECKED
                self.checking.discard(seg)
            else:
                self._next_piece(seg, walk, end)
        self.background.submit(job, done)

    def _found(self, seg, damage: list[Damage]) -> None:
        starts, resumes = seg.damage if seg.damage is not None else ([], [])
        for d in damage:
            j = bisect_right(starts, d.position)
            if j and starts[j - 1] == d.position:
                continue  # already found (by a read, before the check got there)
            log.error("%s: damaged batch in %s at position %d (offset %d): %s; fetches skip its %d bytes "
                      "(consumers see a gap of offsets)", self.name, seg.log_path, d.position, d.offset,
                      d.reason, d.resume - d.position)
            starts.insert(j, d.position)
            resumes.insert(j, d.resume)
            self.corrupt_batches += 1
        seg.damage = (starts, resumes)
