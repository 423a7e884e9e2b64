"""Loading a partition's directory at start-up (a part of ``PartitionLog``, kept apart for size):
interrupted cleaner swaps finished or rolled back, segments opened and recovered from the recovery
point (damaged ones cut, later intact ones kept: ``damage.py``), the checkpoint read, the producer
state rebuilt. Everything here runs once, from ``PartitionLog.__init__``."""
from __future__ import annotations

import logging
import os

from . import fileio
from .damage import CHECKED, UNCHECKED
from .errors import DataDirFormatError
from .faults import OPEN_FILES
from .producer_state import SnapshotFiles, load_producer_state
from .segment import (CLEANED_SUFFIX, DELETED_SUFFIX, SEGMENT_SUFFIXES, SWAP_SUFFIX, Segment, rename_segment_files, scan,
                      segment_name)

log = logging.getLogger("broker.log.partition_log")

CHECKPOINT_FILE = "checkpoint"


def stage_partition(path: str) -> None:
    """Make ``path`` an empty partition directory (on a worker): the first segment's three files and a
    checkpoint, so that ``PartitionLog(path, ..., staged=True)`` opens it without a system call."""
    os.makedirs(path)
    for suffix in SEGMENT_SUFFIXES:
        os.close(fileio.open(os.path.join(path, segment_name(0, suffix)), os.O_WRONLY | os.O_CREAT, 0o644))
    fd = fileio.open(os.path.join(path, CHECKPOINT_FILE), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fileio.write(fd, b"v1 0 0\n")
    finally:
        os.close(fd)


def unstage_partition(path: str) -> None:
    """Remove a partition directory ``stage_partition`` made (or began), never written since: its files are
    known, so no listing is needed, and no descriptor (at the open-file limit too). Anything else in it
    (ENOTEMPTY) raises."""
    for name in [segment_name(0, suffix) for suffix in SEGMENT_SUFFIXES] + [CHECKPOINT_FILE]:
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass


class LogLoading:
    """The start-up half of ``PartitionLog``; its state is ``PartitionLog``'s (see ``__init__`` there)."""

    __slots__ = ()

    def _load(self, clean: bool) -> None:
        cfg = self.config
        now = self.clock()
        names = os.listdir(self.dir)  # one listing per partition: what start-up pays most for many of them
        swapped = self._complete_swaps(names)
        if swapped is None or swapped:
            names = os.listdir(self.dir)  # files were removed or renamed
            swapped = swapped or set()
        bases = sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())
        for n in names:
            stem = n.split(".", 1)[0]
            if n.endswith(".tmp") or (n.endswith((".index", ".timeindex")) and stem.isdigit()
                                      and int(stem) not in bases):
                os.unlink(os.path.join(self.dir, n))
        ckpt_start, ckpt_point = self._read_checkpoint()
        self._recovery_point = ckpt_point
        if not bases:
            seg = Segment.create(self.dir, max(ckpt_start, 0), cfg.segment_index_bytes, cfg.index_interval_bytes, now)
            self._segments, self._bases = [seg], [seg.base_offset]
        else:
            for base in bases:
                self._segments.append(Segment.open(self.dir, base, cfg.segment_index_bytes,
                                                   cfg.index_interval_bytes, now))
            self._bases = list(bases)
            self._recover(clean, swapped)
        active = self._segments[-1]
        active.open_for_append()
        self._leo = active.next_offset
        self._log_start = min(max(ckpt_start, self._segments[0].base_offset), self._leo)
        promised = max(ckpt_start, ckpt_point)
        if promised > self._leo:
            self.startup_shortfall = promised - self._leo
            log.error("%s-%d: the files hold less than the checkpoint promises: log end offset %d, but the "
                      "checkpoint names log start offset %d and recovery point %d (%d offsets lost: the files "
                      "were truncated or lost outside the broker, e.g. by fsck)", self.topic, self.partition,
                      self._leo, ckpt_start, ckpt_point, self.startup_shortfall)
        self._load_producer_state(now, names)
        if clean:
            self._recovery_point = self._leo  # close() flushed everything
        else:
            # Kafka's LogLoader: only a flush moves the recovery point. Sealed segments above it were
            # re-scanned but never fsynced: the next maintenance pass syncs them before moving it.
            self._recovery_point = min(self._recovery_point, self._leo)
            self._pending_flush = [seg for seg, nxt in zip(self._segments, self._bases[1:])
                                   if nxt > self._recovery_point]
        self._try_checkpoint()  # a full disk must not keep the broker from starting

    def _load_staged(self) -> None:
        """The directory holds what ``stage_partition`` made, and nothing else: the state is known, so
        nothing is read (no system call: CreateTopics installs a thousand partitions on the loop)."""
        cfg = self.config
        seg = Segment(self.dir, 0, cfg.segment_index_bytes, cfg.index_interval_bytes, self.clock()).made_empty()
        self._segments, self._bases = [seg], [0]
        self._ckpt_written = (0, 0)
        self._snapshots = SnapshotFiles(self.dir, ())

    def _complete_swaps(self, names: list[str]) -> set[int] | None:
        """Finish or roll back a segment replacement a crash interrupted (see partition_log.py's docstring, "Segment replacement");
        returns the base offsets of the segments swapped in here (to be re-scanned), None when only leftover
        files were removed (``names``, the directory's listing, is then out of date too)."""
        swaps = sorted(int(n.split(".", 1)[0]) for n in names
                       if n.endswith(".log" + SWAP_SUFFIX) and n.split(".", 1)[0].isdigit())
        removed = False
        for n in names:
            stem = n.split(".", 1)[0]
            if n.endswith((CLEANED_SUFFIX, DELETED_SUFFIX)) or (
                    n.endswith(SWAP_SUFFIX) and not (stem.isdigit() and int(stem) in swaps)):
                os.unlink(os.path.join(self.dir, n))
                removed = True
        for base in swaps:
            path = os.path.join(self.dir, f"{base:020d}.log{SWAP_SUFFIX}")
            fd = os.open(path, os.O_RDONLY)
            try:
                _end, next_offset, _reason = scan(fd, 0, os.fstat(fd).st_size, base, False, lambda _p, _h: None)
            finally:
                os.close(fd)
            end = max(next_offset, base + 1)
            for n in os.listdir(self.dir):
                stem, dot, suffix = n.partition(".")
                if stem.isdigit() and base <= int(stem) < end and dot + suffix in SEGMENT_SUFFIXES:
                    os.unlink(os.path.join(self.dir, n))  # a replaced segment not yet renamed .deleted
            rename_segment_files(self.dir, base, SWAP_SUFFIX, "")
            log.info("%s-%d: completed the interrupted replacement by the cleaned segment at %d", self.topic,
                     self.partition, base)
        return None if removed and not swaps else set(swaps)

    def _recover(self, clean: bool, rescan: set[int] = frozenset()) -> None:
        segs = self._segments
        i = 0
        while i < len(segs):
            OPEN_FILES.trim()  # start-up holds no read's descriptor: a long recovery keeps to the bound
            seg = segs[i]
            last = i == len(segs) - 1
            trusted = seg.base_offset not in rescan and (
                clean or (not last and segs[i + 1].base_offset <= self._recovery_point))
            if last:
                whole = not (trusted and seg.indexes_sane())
                seg.recover(verify_crc=True, from_last_index_entry=not whole)
                seg.check = CHECKED if whole else UNCHECKED  # a clean start checks it on first read
            elif not trusted or not seg.index_files_plausible():
                truncated = seg.recover(verify_crc=True, from_last_index_entry=False)
                seg.seal()  # the maximum entry as a roll writes it; entries leave memory
                seg.check = CHECKED
                # compaction leaves gaps: a segment may end before the next one's base offset
                if truncated or seg.next_offset > segs[i + 1].base_offset:
                    j = self.damage.recovered(segs, i, truncated)  # the later segments kept: segs[j:]
                    for later in segs[i + 1:j]:
                        later.delete()
                    del segs[i + 1:j], self._bases[i + 1:j]
            i += 1

    def _load_producer_state(self, now: int, names: list[str]) -> None:
        """Kafka's rebuildProducerState (``producer_state.load_producer_state``); a snapshot at the log end
        is written when batches were read."""
        snaps = self._snapshots = SnapshotFiles(self.dir, names)
        snaps.remove_stray(self._bases)
        ps, start, self.producer_state_load = load_producer_state(snaps, self._segments, self._bases, self._leo)
        self.producer_state = ps
        ps.truncate_head(self._log_start)
        # expired producers stay expired across a restart: the same rule on the same timestamps
        ps.remove_expired(now, self.producer_id_expiration_ms)
        if start < self._leo:  # not fsynced: start-up would wait for one fsync per partition
            try:
                snaps.write(self._leo, ps.snapshot(), self._bg, sync=False)
            except OSError as e:  # an optimisation: the next start scans from an older snapshot
                log.warning("%s-%d: cannot write a producer snapshot: %s", self.topic, self.partition, e)

    def _read_checkpoint(self) -> tuple[int, int]:
        try:
            fd = os.open(os.path.join(self.dir, CHECKPOINT_FILE), os.O_RDONLY)
            try:
                parts = os.read(fd, 4096).split()
            finally:
                os.close(fd)
            if len(parts) == 3 and parts[0] == b"v1":
                self._ckpt_written = (int(parts[1]), int(parts[2]))
                return self._ckpt_written
            if parts and parts[0] != b"v1" and parts[0][:1] == b"v" and parts[0][1:].isdigit():  # another format
                raise DataDirFormatError(f"{os.path.join(self.dir, CHECKPOINT_FILE)}: {parts[0].decode()} is a "
                                         f"checkpoint format this release does not know (it reads v1)")
            log.warning("%s-%d: ignoring malformed checkpoint file", self.topic, self.partition)
        except FileNotFoundError:
            pass
        except ValueError:
            log.warning("%s-%d: ignoring malformed checkpoint file", self.topic, self.partition)
        return 0, 0

