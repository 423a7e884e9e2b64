"""Segment files open on use and close when idle or past the bound (broker/log/faults.py, OpenFiles):
a read's descriptor is never closed in the callback that got it, a released file opens again by name,
the index mappings go with it, and the descriptors a log holds do not grow with its segments."""
from __future__ import annotations

import asyncio
import errno
import os

import pytest

from broker.log import LogError, PartitionLog
from broker.log.faults import OPEN_FILES
from broker.log.fileio import FaultInjector
from protocol.records import build_batch, iter_records, validate_records

SEGMENT = {"internal.segment.bytes": 1024, "index.interval.bytes": 256}


@pytest.fixture
def bounded():
    """OPEN_FILES as the broker enables it, with a bound of 2 descriptors."""
    OPEN_FILES.enable(2)
    try:
        yield OPEN_FILES
    finally:
        OPEN_FILES.disable()


def _fds() -> set[str]:
    out = set()
    for n in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{n}"))
        except OSError:
            pass
    return out


def _log(path) -> PartitionLog:
    plog = PartitionLog(str(path), "t", 0, SEGMENT)
    for i in range(60):
        data = build_batch([(b"k", b"v%03d" % i * 30, [])])
        plog.append(data, validate_records(data))
    assert plog.segment_count > 8
    return plog


def _values(plog) -> list[bytes]:
    return [r.value for ref in plog.read(0, 1 << 30) for r in iter_records(ref.data)]


def _segment_files(plog) -> set[str]:
    return {p for p in _fds() if p.startswith(plog.dir)}


def test_released_files_open_again_and_the_count_stays_under_the_bound(tmp_path, bounded):
    plog = _log(tmp_path / "t-0")
    bounded.trim()
    assert len(_segment_files(plog)) <= 2 and bounded.held <= 2
    before = bounded.reopened
    values = _values(plog)  # every segment read again, from its start (index lookups map the files)
    assert len(values) == 60 and values[7] == b"v007" * 30
    assert bounded.reopened > before
    bounded.trim()  # a safe point: no read's descriptor is in use
    assert len(_segment_files(plog)) <= 2 and bounded.held <= 2
    appended = build_batch([(b"k", b"after", [])])
    plog.append(appended, validate_records(appended))  # the active segment opens again if released
    assert _values(plog)[-1] == b"after"
    plog.close()
    assert not _segment_files(plog) and bounded.held == 0


def test_a_read_keeps_its_descriptors_until_its_callback_ends(tmp_path, bounded):
    """At the open-file limit room is made from files unused since the last tick, never from those the
    running callback read (their numbers may be in its BatchRefs, about to be sent)."""
    plog = _log(tmp_path / "t-0")

    async def scenario():
        bounded.enable(1000)
        other = _log(tmp_path / "t-1")
        _values(other)
        await asyncio.sleep(0)  # the tick after the callbacks that used them
        await asyncio.sleep(0)
        refs = plog.read(0, 1 << 30, lazy=True)  # one descriptor per segment
        assert len({r.fd for r in refs}) > 8
        assert bounded.make_room(100) > 0  # the other log's files
        assert not _segment_files(other) and len(_segment_files(plog)) > 8
        data = [os.pread(r.fd, r.size, r.position) for r in refs]  # what a sender does, same callback
        assert [rec.value for d in data for rec in iter_records(d)] == _values(plog)
        bounded.enable(2)
        await asyncio.sleep(0)  # the callback ended: the tick trims to the bound
        await asyncio.sleep(0)
        assert bounded.held <= 2 and len(_segment_files(plog)) <= 2
        other.close()

    asyncio.run(scenario())
    plog.close()


def test_idle_files_close_after_a_sweep_without_use(tmp_path, bounded):
    bounded.enable(1000)
    plog = _log(tmp_path / "t-0")
    _values(plog)
    assert len(_segment_files(plog)) > 8
    bounded.sweep()  # used since the previous sweep: kept
    assert len(_segment_files(plog)) > 8
    bounded.sweep()  # unused for a whole interval: closed, the active segment's file too
    assert not _segment_files(plog)
    assert len(_values(plog)) == 60
    plog.close()


def test_a_segment_closed_for_good_never_opens_again(tmp_path, bounded):
    plog = _log(tmp_path / "t-0")
    first = plog.segments[0]
    plog.delete_records(plog.segments[2].base_offset)
    assert first.closed and first.fd is None
    plog.close()


def test_recovery_and_a_full_producer_state_scan_keep_to_the_bound(tmp_path, bounded):
    """An unclean start re-scans every segment (and with no producer snapshot reads every batch
    header): the files are released as it goes, not all held until the partition is loaded."""
    plog = _log(tmp_path / "t-0")
    for seg in plog.segments:
        seg.drop_descriptors()  # kill -9
    for name in os.listdir(plog.dir):
        if name.endswith((".snapshot", "checkpoint")):
            os.unlink(os.path.join(plog.dir, name))
    again = PartitionLog(str(tmp_path / "t-0"), "t", 0, SEGMENT)
    assert again.producer_state_load.snapshot_offset is None and again.producer_state_load.batches_scanned == 60
    assert len(_segment_files(again)) <= 3
    assert len(_values(again)) == 60
    again.close()


def test_a_failed_write_left_uncut_is_cut_after_its_file_was_released(tmp_path, bounded):
    """The next append cuts what a failed write left (the cut failed too) even when the segment's
    descriptor was released in between: it opens the file again first."""
    plog = _log(tmp_path / "t-0")
    plog.roll()
    seg = plog.segments[-1]  # empty: the append below writes first, no roll
    data = build_batch([(b"k", b"x" * 500, [])])
    with FaultInjector(fail_at=1, error=errno.EIO, sticky=True):  # the write (half of it), then the cut
        with pytest.raises(LogError):
            plog.append(data, validate_records(data))
    assert os.path.getsize(seg.log_path) > seg.size
    bounded.sweep()
    bounded.sweep()  # unused since the previous sweep: released
    assert seg.held_fd is None
    plog.append(data, validate_records(data))
    assert os.path.getsize(seg.log_path) == seg.size
    assert _values(plog)[-1] == b"x" * 500 and len(_values(plog)) == 61
    plog.close()
