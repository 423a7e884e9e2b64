"""One log segment: ``<base>.log`` plus sparse ``<base>.index`` / ``<base>.timeindex``.

The log file holds v2 batches byte-for-byte. Index formats (ours, big-endian):
  * offset index: (relative base offset u32, file position u32) every
    ``index.interval.bytes``; the first batch (position 0) is implicit;
  * time index: (max timestamp so far i64, relative base offset u32 of the
    first batch carrying it), appended at the same points when the maximum
    grew, and once more when the segment is sealed (roll/close).

Where the entries live (RSS does not grow with retained data):
  * the active segment (and a segment being recovered) keeps them in compact
    ``array``s (4 bytes per offset, 12 per time entry) searched with bisect;
    it appends them to its files (``fileio.write``, the files opened for that write
    only) once INDEX_WRITE_BATCH of them are pending (one write per ~64 batches
    instead of two per batch), and always before a seal, an fsync or a close. A
    crash can leave the files short of the log: recovery re-scans from the last
    entry on disk and adds the missing ones (as after any torn index);
  * a sealed segment drops its arrays: on its first lookup the files are
    memory-mapped read-only (stdlib ``mmap``) and searched in place (the
    pages are page cache, not heap); its largest timestamp is the time
    index's last entry, read with one pread when first asked for.
Opening a segment reads no index and opens no file: the log file is opened on first
use (``fd``) and closed again when idle or past the bound (``faults.OpenFiles``; README.md,
"Descriptors"); ``open_for_append`` / ``recover`` load the entries of the segments that need them. Indexes are rebuilt by a header scan
when missing or inconsistent. Segments are not preallocated.

A segment written by the log cleaner carries a file-name suffix (``suffix``:
``.cleaned`` while it is written, ``.swap`` while it replaces older segments,
as Kafka's ``LogFileUtils``); ``change_suffix`` renames its three files (the log
file last, so a ``.log.swap`` implies its index files are ``.swap`` too) and
``rename_segment_files`` does the same for a segment that has no object here
(see partition_log.py, "Segment replacement").
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right


from protocol.records import ATTRIBUTES_OFFSET, HEADER, HEADER_SIZE, LOG_OVERHEAD, crc32c

from . import fileio
from .faults import FD_RESERVE, OPEN_FILES, OUT_OF_FDS, STORAGE

log = logging.getLogger(__name__)

OFFSET_ENTRY = struct.Struct(">II")
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX = ".cleaned", ".swap", ".deleted"
TIME_ENTRY = struct.Struct(">qI")
SCAN_CHUNK = 256 * 1024
INDEX_WRITE_BATCH = 64  # pending index entries written at once by the active segment
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# Before Python 3.13 an mmap object keeps a duplicate of the file's descriptor (3.13's trackfd=False
# drops it): a sealed segment's two mappings then hold two descriptors, counted in OPEN_FILES.
_MAP_HOLDS_FD = sys.version_info < (3, 13)
_MAP_OPTIONS = {} if _MAP_HOLDS_FD else {"trackfd": False}


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def _write_all(fd: int, data) -> None:
    mv = memoryview(data)
    while mv:
        n = fileio.write(fd, mv)
        mv = mv[n:]


class _Column:
    """One field of a memory-mapped index file, as a read-only sequence (``bisect`` searches it)."""

    __slots__ = ("_mm", "_unpack", "_stride", "_off", "_n")

    def __init__(self, mm, fmt: struct.Struct, stride: int, off: int, n: int):
        self._mm, self._unpack, self._stride, self._off, self._n = mm, fmt.unpack_from, stride, off, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._unpack(self._mm, i * self._stride + self._off)[0]


_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class Segment:
    __slots__ = ("dir", "base_offset", "_fd", "_closed", "size", "idx_rel", "idx_pos", "time_ts", "time_rel",
                 "_max_ts", "_max_ts_offset", "bytes_since_index", "rolling_timestamp",
                 "created_ms", "_writes_indexes", "max_index_entries", "max_time_entries", "next_offset",
                 "_idx_written", "_time_written", "interval", "suffix", "_maps", "_torn", "_torn_tail",
                 "check", "damage", "check_mtime", "_index_changes", "_index_synced")

    def __init__(self, dir_path: str, base_offset: int, index_bytes: int, interval: int, now_ms: int,
                 suffix: str = ""):
        self.interval = interval  # index.interval.bytes
        self.suffix = suffix  # "" or the cleaner's ".cleaned" / ".swap" (written by change_suffix)
        self.dir = dir_path
        self.base_offset = base_offset
        # the log file's descriptor, None while released (faults.OPEN_FILES: ``fd`` opens it again)
        # or once closed for good (``_closed``: close, delete, drop_descriptors)
        self._fd: int | None = None
        self._closed = False
        self.size = 0
        # The index entries: arrays while the segment is appended to or recovered ("loaded"), read-only
        # columns over the memory-mapped files once sealed ("mapped", made on first lookup), None
        # in between. Written by _load_arrays / _track / recover; dropped by seal and close.
        self.idx_rel = self.idx_pos = self.time_ts = self.time_rel = None
        self._maps: list[mmap.mmap] = []  # the mappings behind mapped columns; closed by _drop_entries
        self._torn = False  # an index file did not hold whole entries when loaded (never sane)
        self._torn_tail = False  # a failed write could not be cut back (set by _cut_files; append retries)
        # largest batch timestamp and the base offset of its batch; None: not read yet (a sealed
        # segment reads them from its time index's last entry on first use)
        self._max_ts: int | None = -1
        self._max_ts_offset: int | None = -1
        # entries of idx_rel/idx_pos and time_ts/time_rel already in the files (written by
        # _write_pending_indexes, _rewrite_indexes and set on load/recovery)
        self._idx_written = 0
        self._time_written = 0
        # changes made to the index files (counted by every method that writes, cuts, replaces or
        # renames them) and how many of them the last fsync of the files covered (-1: never synced
        # by this object); sync_job fsyncs the index files only when they changed since, so a small
        # append that adds no index entry costs one fsync (each one a device flush), not three
        self._index_changes = 0
        self._index_synced = -1
        self.bytes_since_index = 0
        self.rolling_timestamp = -1  # max timestamp of the first batch (Kafka's rollingBasedTimestamp)
        self.created_ms = now_ms
        # the active segment (and a new one) appends its pending entries to the index files, which it
        # opens for each group of entries (no descriptor held between them); set by open_for_append
        # and create, cleared by seal
        self._writes_indexes = False
        self.max_index_entries = max(1, index_bytes // OFFSET_ENTRY.size)
        self.max_time_entries = max(1, index_bytes // TIME_ENTRY.size)
        self.next_offset = base_offset  # exact only for the active segment and after a scan
        # damage at rest (damage.py's DamageWatch writes both; recovery sets ``check`` on what it re-scans)
        self.check: str | None = None
        self.damage: tuple[list[int], list[int]] | None = None
        self.check_mtime: int | None = None  # st_mtime_ns of the log file when it was checked

    # ------------------------------------------------------------------ paths
    def path(self, suffix: str) -> str:
        return os.path.join(self.dir, segment_name(self.base_offset, suffix) + self.suffix)

    @property
    def log_path(self) -> str:
        return self.path(".log")

    # ---------------------------------------------------------- open / create
    @classmethod
    def create(cls, dir_path: str, base_offset: int, index_bytes: int, interval: int, now_ms: int,
               suffix: str = "") -> "Segment":
        """Create the three files (truncated) and open them; all or nothing: if one cannot be
        created, those made are closed and removed and the OSError is raised."""
        seg = cls(dir_path, base_offset, index_bytes, interval, now_ms, suffix)
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | _O_CLOEXEC
        try:
            seg._fd = fileio.open(seg.log_path, flags, 0o644)
            _create_empty([seg.path(".index"), seg.path(".timeindex")])
        except OSError:
            if seg._fd is not None:
                os.close(seg._fd)
                seg._fd = None
            unlink_all([seg.path(suffix) for suffix in SEGMENT_SUFFIXES])
            raise
        seg._new_arrays()
        seg._writes_indexes = True
        OPEN_FILES.used(seg)
        return seg

    @classmethod
    def adopt(cls, dir_path: str, base_offset: int, index_bytes: int, interval: int, now_ms: int,
              spare: "SpareFiles") -> "Segment":
        """Make ``spare`` (empty files made ahead of time) the segment at ``base_offset``: three
        renames, no file creation (creating files can wait for the journal while fsyncs run) and
        no descriptor (the log file opens on first use). All or nothing: if a rename fails, the
        spare files are removed (under either name) and the OSError is raised."""
        seg = cls(dir_path, base_offset, index_bytes, interval, now_ms)
        targets = [seg.path(suffix) for suffix in SEGMENT_SUFFIXES]
        try:
            for tmp, target in zip(spare.paths, targets):
                fileio.rename(tmp, target)
        except OSError:
            spare.discard()
            unlink_all(targets)
            raise
        return seg.made_empty()

    def made_empty(self) -> "Segment":
        """This segment's three files exist, empty (renamed from spare files, or made by
        ``loading.stage_partition``): it is the active one, with no system call (no descriptor: the
        log file opens on first use)."""
        self._new_arrays()
        self._writes_indexes = True
        return self

    @classmethod
    def open(cls, dir_path: str, base_offset: int, index_bytes: int, interval: int, now_ms: int,
             suffix: str = "") -> "Segment":
        """An existing segment; its log file is opened on first use (``fd``), its indexes are read when
        needed (``open_for_append`` / ``recover`` load them, a lookup on a sealed segment maps them).
        May run on the worker thread (the cleaner's segments): it only asks the file's size."""
        seg = cls(dir_path, base_offset, index_bytes, interval, now_ms, suffix)
        seg.size = os.stat(seg.log_path).st_size
        seg._max_ts = seg._max_ts_offset = None
        return seg

    # ---------------------------------------------------------- descriptor
    @property
    def fd(self) -> int | None:
        """The log file's descriptor, opened again if it was released (``faults.OpenFiles``); None
        once the segment is closed. Use it in the same loop callback only (see ``BatchRef``)."""
        fd = self._fd
        if fd is not None:
            OPEN_FILES.used(self)
            return fd
        return None if self._closed else self._reopen()

    @property
    def held_fd(self) -> int | None:
        """The descriptor if one is open now (never opens one)."""
        return self._fd

    @property
    def descriptors(self) -> int:
        """How many descriptors this segment holds: its log file's, and its index mappings' before 3.13."""
        return (self._fd is not None) + (len(self._maps) if _MAP_HOLDS_FD else 0)

    @property
    def closed(self) -> bool:
        """Closed for good (close, delete, drop_descriptors); a released descriptor is not closed."""
        return self._closed

    def _reopen(self) -> int:
        """Open the log file again by name (the name follows ``change_suffix``). At the open-file limit,
        idle descriptors are released and then the reserve makes room (faults.py)."""
        fd = self._fd = _open_at_limit(self.log_path, os.O_RDWR | os.O_APPEND | _O_CLOEXEC)
        OPEN_FILES.reopened += 1
        OPEN_FILES.add(self, 1)
        OPEN_FILES.used(self)
        return fd

    def release_fd(self) -> None:
        """Close the descriptor (and a sealed segment's mappings) until the next use (``faults.OpenFiles``
        decides when: never while a read's ``BatchRef.fd`` may still be in use)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            OPEN_FILES.add(self, -1)
        if not self.loaded:  # a sealed segment's mappings (the active one's entries stay in memory)
            self._drop_entries()

    # ---------------------------------------------------------- index entries
    @property
    def loaded(self) -> bool:
        """True while the index entries are in memory (active segment, recovery)."""
        return isinstance(self.idx_rel, array)

    def _new_arrays(self) -> None:
        self._drop_entries()
        self.idx_rel, self.idx_pos, self.time_ts, self.time_rel = array("I"), array("I"), array("q"), array("I")
        self._torn = False
        self._idx_written = self._time_written = 0

    def _load_arrays(self) -> None:
        """Read both index files into arrays (a segment about to be appended to or recovered)."""
        self._new_arrays()
        for suffix, entry, a, b in ((".index", OFFSET_ENTRY, self.idx_rel, self.idx_pos),
                                    (".timeindex", TIME_ENTRY, self.time_ts, self.time_rel)):
            data = _read_file(self.path(suffix))
            n = len(data) // entry.size
            for x, y in entry.iter_unpack(memoryview(data)[:n * entry.size]):
                a.append(x)
                b.append(y)
            if len(data) % entry.size:
                self._torn = True  # a torn index file: never sane
        if self.time_ts and self.time_ts[-1] >= 0:
            self._max_ts = self.time_ts[-1]
            self._max_ts_offset = self.base_offset + self.time_rel[-1]
        else:
            self._max_ts = self._max_ts_offset = -1
        self._idx_written, self._time_written = len(self.idx_rel), len(self.time_ts)

    def _map(self) -> None:
        """Sealed segment: map both index files read-only; the entries become columns over them."""
        self._drop_entries()
        cols = []
        for suffix, entry, fields in ((".index", OFFSET_ENTRY, ((_U32, 0), (_U32, 4))),
                                      (".timeindex", TIME_ENTRY, ((_I64, 0), (_U32, 8)))):
            mm, n = None, 0
            try:
                fd = os.open(self.path(suffix), os.O_RDONLY | _O_CLOEXEC)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    n = os.fstat(fd).st_size // entry.size
                    if n:
                        try:
                            mm = mmap.mmap(fd, n * entry.size, access=mmap.ACCESS_READ, **_MAP_OPTIONS)
                            self._maps.append(mm)
                        except OSError:  # e.g. vm.max_map_count reached: read the entries instead
                            mm = os.pread(fd, n * entry.size, 0)
                finally:
                    os.close(fd)
            cols += [_Column(mm, fmt, entry.size, off, n) for fmt, off in fields]
        self.idx_rel, self.idx_pos, self.time_ts, self.time_rel = cols
        if _MAP_HOLDS_FD:
            OPEN_FILES.add(self, len(self._maps))
        OPEN_FILES.used(self)  # the mappings are released with the log file's descriptor

    def _try_map(self) -> bool:
        """``_map``, False (nothing kept) when the files cannot be opened or mapped now."""
        try:
            self._map()
            return True
        except OSError as e:
            self._drop_entries()
            STORAGE.report("mapping a sealed segment's index (read from its start instead)", self.log_path, e)
            return False

    def _drop_entries(self) -> None:
        """Forget the entries (arrays or mappings); the next lookup maps the files."""
        self.idx_rel = self.idx_pos = self.time_ts = self.time_rel = None
        maps, self._maps = self._maps, []
        for mm in maps:
            mm.close()
        if _MAP_HOLDS_FD and maps:
            OPEN_FILES.add(self, -len(maps))

    def _read_max_timestamp(self) -> None:
        """A sealed segment's maximum: the last time-index entry (``seal`` wrote it there)."""
        self._max_ts = self._max_ts_offset = -1
        try:
            fd = os.open(self.path(".timeindex"), os.O_RDONLY | _O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            n = os.fstat(fd).st_size // TIME_ENTRY.size
            if n:
                ts, rel = TIME_ENTRY.unpack(os.pread(fd, TIME_ENTRY.size, (n - 1) * TIME_ENTRY.size))
                if ts >= 0:
                    self._max_ts, self._max_ts_offset = ts, self.base_offset + rel
        finally:
            os.close(fd)

    @property
    def max_timestamp(self) -> int:
        if self._max_ts is None:
            self._read_max_timestamp()
        return self._max_ts

    @property
    def offset_of_max_timestamp(self) -> int:
        if self._max_ts_offset is None:
            self._read_max_timestamp()
        return self._max_ts_offset

    def index_files_plausible(self) -> bool:
        """Kafka's index ``sanityCheck`` without reading the entries: both files exist and hold whole
        entries, and the last offset entry points inside the log (``indexes_sane`` checks them all)."""
        try:
            n_idx, n_time = (os.stat(self.path(suffix)).st_size for suffix in (".index", ".timeindex"))
        except FileNotFoundError:
            return False
        if n_idx % OFFSET_ENTRY.size or n_time % TIME_ENTRY.size:
            return False
        if not n_idx:
            return True
        fd = os.open(self.path(".index"), os.O_RDONLY | _O_CLOEXEC)
        try:
            rel, pos = OFFSET_ENTRY.unpack(os.pread(fd, OFFSET_ENTRY.size, n_idx - OFFSET_ENTRY.size))
        finally:
            os.close(fd)
        return rel > 0 and 0 < pos < self.size

    def indexes_sane(self) -> bool:
        if not self.loaded:
            self._load_arrays()
        if self._torn:
            return False
        rel, pos = self.idx_rel, self.idx_pos
        if len(rel) != len(pos) or len(self.time_ts) != len(self.time_rel):
            return False
        prev_r = prev_p = 0
        for r, p in zip(rel, pos):
            if r <= prev_r or p <= prev_p or p >= self.size:
                return False
            prev_r, prev_p = r, p
        prev_t, prev_r = -1, 0
        for t, r in zip(self.time_ts, self.time_rel):
            if t <= prev_t or r < prev_r:
                return False
            prev_t, prev_r = t, r
        return True

    def _rewrite_indexes(self) -> None:
        """Replace both index files with the in-memory entries (after recovery).

        tmp-then-rename without ``atomic_write``'s fsyncs, on purpose: the indexes are derived from
        the log, the segment's next ``sync_job`` fsyncs them, and an index that a power failure
        left old, empty or torn fails ``indexes_sane`` at the next open and is rebuilt."""
        for suffix, entry, a, b in ((".index", OFFSET_ENTRY, self.idx_rel, self.idx_pos),
                                    (".timeindex", TIME_ENTRY, self.time_ts, self.time_rel)):
            tmp = self.path(suffix + ".tmp")
            fd = fileio.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644)
            try:
                _write_all(fd, b"".join(entry.pack(x, y) for x, y in zip(a, b)))
            finally:
                os.close(fd)
            fileio.replace(tmp, self.path(suffix))
            self._index_changes += 1
        self._idx_written, self._time_written = len(self.idx_rel), len(self.time_ts)

    def open_for_append(self) -> None:
        """Make this the active segment: entries in memory, index files appended from now on."""
        if not self.loaded:
            self._load_arrays()
        self._writes_indexes = True

    def _write_pending_indexes(self, defer_without_fds: bool = False) -> None:
        """Append the entries not yet in the index files (the active segment only), opening them for
        this write. All or nothing: if a write fails, both files are cut back to the entries written
        before and the OSError is raised (the entries stay pending). With ``defer_without_fds`` an
        open that meets the open-file limit leaves them pending for the next group (the log is
        written: an index is only a way into it, rebuilt by recovery when short)."""
        if not self._writes_indexes:
            return
        i0, t0 = self._idx_written, self._time_written
        n_idx, n_time = len(self.idx_rel), len(self.time_ts)
        if n_idx == i0 and n_time == t0:
            return
        fds: list[int] = []
        self._index_changes += 1
        try:
            try:
                for suffix in (".index", ".timeindex"):
                    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _O_CLOEXEC
                    fds.append(fileio.open(self.path(suffix), flags, 0o644) if defer_without_fds
                               else _open_at_limit(self.path(suffix), flags, 0o644))
            except OSError as e:
                if defer_without_fds and e.errno in OUT_OF_FDS:
                    return
                raise
            try:
                if n_idx > i0:
                    _write_all(fds[0], b"".join(OFFSET_ENTRY.pack(self.idx_rel[k], self.idx_pos[k])
                                                for k in range(i0, n_idx)))
                    self._idx_written = n_idx
                if n_time > t0:
                    _write_all(fds[1], b"".join(TIME_ENTRY.pack(self.time_ts[k], self.time_rel[k])
                                                for k in range(t0, n_time)))
                    self._time_written = n_time
            except OSError:
                self._idx_written, self._time_written = i0, t0
                self._cut_files(fds)
                raise
        finally:
            for fd in fds:
                os.close(fd)

    def _cut_files(self, index_fds: list[int] | None = None) -> None:
        """Cut the log and index files back to what this object holds (``size``, the entries
        written), undoing a write step that failed (the index files through ``index_fds``, or
        opened here when a cut failed before). If that fails too, ``_torn_tail`` makes the
        next append try again first (the files are opened O_APPEND: data after the size this
        object knows would put the next batch at the wrong position)."""
        opened: list[int] = []
        self._index_changes += 1
        try:
            if not self._closed:
                fileio.ftruncate(self.fd, self.size)  # opened again if released since the failed write
            if index_fds is None and self._torn_tail and self._writes_indexes:
                for suffix in (".index", ".timeindex"):
                    opened.append(fileio.open(self.path(suffix), os.O_WRONLY | _O_CLOEXEC))
                index_fds = opened
            if index_fds:
                fileio.ftruncate(index_fds[0], self._idx_written * OFFSET_ENTRY.size)
                fileio.ftruncate(index_fds[1], self._time_written * TIME_ENTRY.size)
            self._torn_tail = False
        except OSError as e:  # said once per run of failures (a read-only disk fails every append)
            self._torn_tail = True
            STORAGE.report("cutting back a failed write (the next append tries again)", self.log_path, e)
        finally:
            for fd in opened:
                os.close(fd)

    # --------------------------------------------------------------- recovery
    def recover(self, verify_crc: bool, from_last_index_entry: bool, on_batch=None) -> int:
        """Re-scan batch headers, truncate a torn/corrupt tail, rebuild index entries.

        With ``from_last_index_entry`` only the part from the last offset-index
        entry on is re-scanned (earlier entries and the data they cover are
        trusted). ``on_batch(position, header)`` is called for every batch scanned.
        Returns the number of bytes truncated. The entries stay in memory
        (``seal`` or ``open_for_append`` decides what happens to them next).
        """
        if not self.loaded:
            self._load_arrays()
        before = (self.idx_rel.tobytes(), self.idx_pos.tobytes(), self.time_ts.tobytes(), self.time_rel.tobytes())
        if from_last_index_entry and self.idx_rel:
            k = len(self.idx_rel) - 1
            start, start_rel = self.idx_pos[k], self.idx_rel[k]
            del self.idx_rel[k:], self.idx_pos[k:]
            j = bisect_left(self.time_rel, start_rel)
            del self.time_ts[j:], self.time_rel[j:]
            if self.time_ts:
                self._max_ts = self.time_ts[-1]
                self._max_ts_offset = self.base_offset + self.time_rel[-1]
            else:
                self._max_ts = self._max_ts_offset = -1
            self.bytes_since_index = 1 << 62  # forces the entry at ``start`` to be re-added
            expected = self.base_offset + start_rel
        else:
            start = 0
            for a in (self.idx_rel, self.idx_pos, self.time_ts, self.time_rel):
                del a[:]
            self._max_ts = self._max_ts_offset = -1
            self.bytes_since_index = 0
            expected = self.base_offset

        def index(pos, hdr):
            self._track(hdr[0], hdr[8], pos, hdr[1] + LOG_OVERHEAD)
            if on_batch is not None:
                on_batch(pos, hdr)

        end, next_offset, reason = scan(self.fd, start, self.size, expected, verify_crc, index)
        self.next_offset = next_offset if end > 0 else self.base_offset
        truncated = self.size - end
        if truncated:
            log.warning("segment %s: %s at position %d; truncating %d bytes", self.log_path, reason, end, truncated)
            fileio.ftruncate(self.fd, end)
            self.size = end
        if not self._same_indexes(before):
            self._rewrite_indexes()
        self._idx_written, self._time_written = len(self.idx_rel), len(self.time_ts)
        self.rolling_timestamp = self._first_batch_max_timestamp()
        return truncated

    def _same_indexes(self, before: tuple[bytes, bytes, bytes, bytes]) -> bool:
        """True if the rebuilt entries equal the loaded files (then they are not rewritten).

        A sealed segment's time index ends with one extra entry (its maximum), which
        the rebuild does not produce; when that is the only difference the loaded
        entries are kept, exactly as ``seal`` would have written them.
        """
        rel, pos, ts, trel = before
        if self._torn or self.idx_rel.tobytes() != rel or self.idx_pos.tobytes() != pos:
            return False
        if self.time_ts.tobytes() == ts and self.time_rel.tobytes() == trel:
            return True
        if self._max_ts < 0 or self.time_ts and self._max_ts <= self.time_ts[-1]:
            return False
        sealed_ts, sealed_rel = array("q", self.time_ts), array("I", self.time_rel)
        sealed_ts.append(self._max_ts)
        sealed_rel.append(self._max_ts_offset - self.base_offset)
        if sealed_ts.tobytes() == ts and sealed_rel.tobytes() == trel:
            self.time_ts, self.time_rel = sealed_ts, sealed_rel
            return True
        return False

    def _first_batch_max_timestamp(self) -> int:
        if self.size < HEADER_SIZE:
            return -1
        return HEADER.unpack(os.pread(self.fd, HEADER_SIZE, 0))[8]

    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch, -1 if none (Kafka's ``getFirstBatchTimestamp``, which
        ``max.compaction.lag.ms`` is measured from); read once per inactive segment."""
        if self.rolling_timestamp < 0 and self.size >= HEADER_SIZE:
            self.rolling_timestamp = self._first_batch_max_timestamp()
        return self.rolling_timestamp

    def scan_headers(self, on_batch) -> None:
        """Call ``on_batch(position, header)`` for every batch (no CRC check)."""
        scan(self.fd, 0, self.size, self.base_offset, False, on_batch)

    # ----------------------------------------------------------------- append
    def _track(self, base_offset: int, max_ts: int, pos: int, size: int) -> None:
        """Index bookkeeping for a batch written at ``pos`` (Kafka's LogSegment.append order)."""
        if max_ts > self._max_ts:
            self._max_ts = max_ts
            self._max_ts_offset = base_offset
        if self.bytes_since_index > self.interval:
            self.idx_rel.append(base_offset - self.base_offset)
            self.idx_pos.append(pos)
            if self._max_ts >= 0 and (not self.time_ts or self._max_ts > self.time_ts[-1]):
                self.time_ts.append(self._max_ts)
                self.time_rel.append(self._max_ts_offset - self.base_offset)
            self.bytes_since_index = 0
        self.bytes_since_index += size

    def append(self, data, batches: list[tuple[int, int, int, int]]) -> None:
        """Write ``data`` (whole batches) at the end; ``batches`` = (rel_pos, base, max_ts, size).

        All or nothing: if a write of the batches or of index entries fails, the files are cut
        back to where they ended, every position of this object is left as it was, and the
        OSError is raised."""
        if self._torn_tail:
            self._cut_files()
            if self._torn_tail:
                raise OSError(errno.EIO, f"{self.log_path} holds the tail of a failed write that cannot be cut")
        fd = self.fd  # opened again if released: a failure here changes nothing
        pos0 = self.size
        before = (len(self.idx_rel), len(self.time_ts), self._max_ts, self._max_ts_offset, self.bytes_since_index,
                  self.rolling_timestamp)
        try:
            _write_all(fd, data)
            self.size = pos0 + len(data)
            if pos0 == 0 and batches:
                self.rolling_timestamp = batches[0][2]
            for rel_pos, base, max_ts, size in batches:
                self._track(base, max_ts, pos0 + rel_pos, size)
            if (len(self.idx_rel) - self._idx_written >= INDEX_WRITE_BATCH
                    or len(self.time_ts) - self._time_written >= INDEX_WRITE_BATCH):
                self._write_pending_indexes(defer_without_fds=True)
        except OSError:
            n_idx, n_time, self._max_ts, self._max_ts_offset, self.bytes_since_index, self.rolling_timestamp = before
            del self.idx_rel[n_idx:], self.idx_pos[n_idx:], self.time_ts[n_time:], self.time_rel[n_time:]
            self.size = pos0
            self._cut_files()  # never leave a partial batch or entry behind
            raise

    def index_full(self) -> bool:
        if not self.loaded:
            return False
        return len(self.idx_rel) >= self.max_index_entries or len(self.time_ts) >= self.max_time_entries

    def seal(self) -> None:
        """Make the last time-index entry the segment's maximum; stop writing indexes and let the
        entries go from memory (lookups map the files from now on)."""
        n_time = len(self.time_ts) if self.loaded else 0
        try:
            if self.loaded and self._max_ts >= 0 and (not self.time_ts or self._max_ts > self.time_ts[-1]):
                self.time_ts.append(self._max_ts)
                self.time_rel.append(self._max_ts_offset - self.base_offset)
                if not self._writes_indexes:
                    self._rewrite_indexes()
            self._write_pending_indexes()  # the maximum last; all or nothing
        except OSError:  # still active and usable: as before the call
            if self.loaded:
                del self.time_ts[n_time:], self.time_rel[n_time:]
            raise
        self._writes_indexes = False
        self._drop_entries()

    # ------------------------------------------------------------------ reads
    def lookup_position(self, offset: int) -> int:
        """File position of the indexed batch at or before ``offset`` (0 if none). When the index
        files cannot be opened (EMFILE, EIO) the answer is 0: the read scans the segment's batch
        headers from its start, slower but exact, and the next lookup maps them again."""
        if self.idx_rel is None and not self._try_map():
            return 0
        i = bisect_right(self.idx_rel, offset - self.base_offset) - 1
        return self.idx_pos[i] if i >= 0 else 0

    def lookup_time_position(self, timestamp: int) -> int:
        """Position from which a scan finds the first batch with max timestamp >= ``timestamp``."""
        if self.time_ts is None and not self._try_map():
            return 0
        i = bisect_left(self.time_ts, timestamp) - 1
        return self.lookup_position(self.base_offset + self.time_rel[i]) if i >= 0 else 0

    def headers_from(self, position: int):
        """Yield (position, header) for the batches from ``position`` on (no validation)."""
        chunk, cstart, end = b"", position, self.size
        while position + HEADER_SIZE <= end:
            off = position - cstart
            if off + HEADER_SIZE > len(chunk):
                chunk = os.pread(self.fd, SCAN_CHUNK, position)
                cstart, off = position, 0
                if len(chunk) < HEADER_SIZE:
                    return
            hdr = HEADER.unpack_from(chunk, off)
            if hdr[1] + LOG_OVERHEAD < HEADER_SIZE:
                return  # a damaged length field (damage.py): never walk backwards
            yield position, hdr
            position += hdr[1] + LOG_OVERHEAD

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def largest_timestamp(self) -> int:
        """Max batch timestamp, or the file's mtime when no batch has one (as Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        st = os.fstat(self._fd) if self._fd is not None else os.stat(self.log_path)
        return int(st.st_mtime * 1000)

    # -------------------------------------------------------------- lifecycle
    def flush(self) -> None:
        self.sync_job()()

    def sync_job(self):
        """A job that fsyncs this segment's log and index files as they are now.

        The index files are left out when nothing changed them since the last fsync of them
        (``_index_changes``): an fsync here is a device cache flush even for a clean file.
        The job opens the files by the names they have now, when it runs (on the worker),
        and closes them after the fsync: it never uses one of the segment's descriptor
        numbers, which may be closed and reused meanwhile, and a queue of fsync jobs holds no
        descriptors. A file gone by then (the segment deleted, its topic removed, replaced
        by the cleaner's fsynced segment) needs no sync. An fsync through a descriptor opened
        after the data was written covers it: it syncs the file, and Linux reports a
        writeback error not yet seen to the next fsync whatever descriptor it comes through.
        """
        if self._closed:
            return lambda: None
        self._write_pending_indexes()
        changes = self._index_changes
        if changes == self._index_synced:  # the index files are as the last fsync left them
            paths = [self.log_path]
            return lambda: _fsync_paths(paths)
        paths = [self.path(suffix) for suffix in SEGMENT_SUFFIXES]

        def job() -> None:
            _fsync_paths(paths)
            self._index_synced = changes  # on the worker: one int, read on the loop by the next sync_job
        return job

    def open_fds(self) -> list[int]:
        """The log file's descriptor (opened again if it was released), for an fsync that borrows
        descriptor numbers at the open-file limit (``faults.SyncFds``); none once closed."""
        return [] if self._closed else [self.fd]

    def drop_descriptors(self) -> None:
        """Close the files without writing the pending index entries (the disk is failing; recovery
        rebuilds what an index misses)."""
        self._writes_indexes = False
        self._shut()

    def close(self) -> None:
        self._write_pending_indexes()
        self._writes_indexes = False
        self._shut()

    def _shut(self) -> None:
        """Closed for good: the entries dropped, the descriptor closed and never opened again."""
        self._drop_entries()
        self._closed = True
        OPEN_FILES.forget(self)
        fd, self._fd = self._fd, None
        if fd is not None:
            OPEN_FILES.add(self, -1)
            try:
                os.close(fd)
            except OSError:
                pass

    def change_suffix(self, new_suffix: str) -> None:
        """Kafka's ``changeFileSuffixes``: rename the three files from this suffix to ``new_suffix``
        (index files first, the log file last; open descriptors stay valid)."""
        rename_segment_files(self.dir, self.base_offset, self.suffix, new_suffix)
        self.suffix = new_suffix
        self._index_changes += 1

    def delete(self, background=None) -> None:
        """Close and remove the files; with ``background`` the unlinks run there.

        Deferring is safe: no segment with the same base offset is created in this
        directory later (new segments start at the log end offset, above every
        deleted one; a deleted topic's directory is renamed away first; the log
        cleaner replaces a segment at the same base offset only while the old one is
        still in the log, renaming the old files to ``.deleted`` before deleting them).
        """
        self.close()
        paths = [self.path(suffix) for suffix in (".log", ".index", ".timeindex")]
        if background is None:
            unlink_all(paths)
        else:
            background.submit(lambda: unlink_all(paths))


class SpareFiles:
    """Empty log + index files under temporary names (no descriptor held: the segment opens its log
    file on first use, and opening an existing file does not wait for the journal as creating one can).

    Made on the background worker so that a roll only renames. Leftovers are
    ``*.tmp`` files, which start-up removes (they never hold data before the rename).
    """

    __slots__ = ("paths",)

    def __init__(self, dir_path: str):
        self.paths = [os.path.join(dir_path, f"spare{suffix}.tmp") for suffix in SEGMENT_SUFFIXES]
        try:
            _create_empty(self.paths)
        except OSError:
            self.discard()
            raise

    def discard(self) -> None:
        unlink_all(self.paths)


def _read_file(path: str) -> bytes:
    """Whole content of a small file, b"" if missing (os-level: cheaper than open() at start-up)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        size = os.fstat(fd).st_size
        if not size:
            return b""
        chunks = []
        while True:
            chunk = os.read(fd, max(size, 65536))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def fsync_all(fds: list[int]) -> None:
    for fd in fds:
        fileio.fsync(fd)


def _open_at_limit(path: str, flags: int, mode: int = 0o644) -> int:
    """``fileio.open``; at the open-file limit, again after idle segment files were released, and
    then in the room the descriptor reserve makes (faults.py)."""
    try:
        return fileio.open(path, flags, mode)
    except OSError as e:
        if e.errno not in OUT_OF_FDS:
            raise
    OPEN_FILES.make_room()
    return FD_RESERVE.run(lambda: fileio.open(path, flags, mode))


def _create_empty(paths: list[str]) -> None:
    """Create (or empty) the files, holding no descriptor afterwards."""
    for path in paths:
        os.close(fileio.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644))


def _fsync_paths(paths: list[str]) -> None:
    """fsync each file that exists (one descriptor at a time)."""
    for path in paths:
        try:
            fd = fileio.open(path, os.O_RDONLY | _O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fileio.fsync(fd)
        finally:
            os.close(fd)


def unlink_all(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def rename_segment_files(dir_path: str, base_offset: int, old_suffix: str, new_suffix: str) -> None:
    """Rename a segment's files from ``old_suffix`` to ``new_suffix``, index files first and the log
    file last (an index file that is missing is skipped: it is rebuilt when the segment is recovered)."""
    for suffix in (".index", ".timeindex", ".log"):
        name = os.path.join(dir_path, segment_name(base_offset, suffix))
        try:
            fileio.rename(name + old_suffix, name + new_suffix)
        except FileNotFoundError:
            if suffix == ".log":
                raise


def scan(fd: int, start: int, end: int, expected_offset: int, verify_crc: bool, on_batch) -> tuple[int, int, str]:
    """Walk batch headers from ``start``; stop at the first invalid/incomplete batch.

    Returns (valid end position, next offset, reason for stopping or "").
    """
    pos = start
    chunk = b""
    cstart = start
    next_offset = expected_offset
    while pos < end:
        off = pos - cstart
        if off + HEADER_SIZE > len(chunk):
            chunk = os.pread(fd, SCAN_CHUNK, pos)
            cstart, off = pos, 0
            if len(chunk) < HEADER_SIZE:
                return pos, next_offset, "incomplete batch header"
        hdr = HEADER.unpack_from(chunk, off)
        size = hdr[1] + LOG_OVERHEAD
        if hdr[3] != 2:
            return pos, next_offset, f"invalid magic {hdr[3]}"
        if size < HEADER_SIZE or pos + size > end:
            return pos, next_offset, "incomplete batch"
        if hdr[0] < next_offset or hdr[6] < 0:
            return pos, next_offset, f"invalid offsets (base {hdr[0]}, expected >= {next_offset})"
        if verify_crc:
            if off + size > len(chunk):
                chunk = os.pread(fd, max(SCAN_CHUNK, size), pos)
                cstart, off = pos, 0
                if len(chunk) < size:
                    return pos, next_offset, "incomplete batch"
            if crc32c(memoryview(chunk)[off + ATTRIBUTES_OFFSET:off + size]) != hdr[4]:
                return pos, next_offset, "CRC mismatch"
        on_batch(pos, hdr)
        next_offset = hdr[0] + hdr[6] + 1
        pos += size
    return pos, next_offset, ""
