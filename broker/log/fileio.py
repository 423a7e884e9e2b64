"""The log's write-side file calls, in one place, so that a test can make any one of them fail.

The log writes through this module: ``fileio.write(fd, data)``, not ``os.write(fd, data)``, for
the appends, rolls, index entries, checkpoints, producer snapshots and small metadata files
(``files.atomic_write``). Each name is the ``os`` function itself, bound at import: the hot path
pays one module attribute lookup, no wrapper and no flag test.

A test arms a :class:`FaultInjector`, which swaps these names for counting wrappers while it is
active and puts the ``os`` functions back when it leaves::

    with FaultInjector() as probe:            # count the calls of a scenario
        run_scenario()
    for n in range(1, len(probe.calls) + 1):  # then fail each of them in turn
        with FaultInjector(fail_at=n, error=errno.ENOSPC) as fi:
            run_scenario()                    # call n raises OSError(ENOSPC)
            fi.lift()                         # the fault is gone: later calls succeed

``probe.calls`` lists (operation, target) of every call in order, so a failing step can be
named. A write chosen to fail first writes half of its bytes for real (as a disk that fills up
mid-write), so callers are tested on undoing a partial write too. ``sticky=True`` makes every
call from the Nth on fail until :meth:`FaultInjector.lift` (a disk that stays full). Only calls
made through this module are counted: reads, ``close`` and ``unlink`` are not wrapped (they are
not how a write step fails, and undoing a step uses ``unlink``).

Code that writes files of its own (coordinators through the log, the cleaner, other components)
adopts the layer by calling these names instead of ``os.*``.

Sync journal (test-only, for power-cut tests): with ``SHAREBROKER_SYNC_JOURNAL=PATH`` in the environment
of the process that imports this module (the broker and its cleaner worker), ``open``, ``fsync`` and
``ftruncate`` are bound to wrappers that append one line per call to PATH (``O_APPEND``, never fsynced:
it only has to survive kill -9, which the page cache does), keyed by inode:

- ``new DEV INO``: a file opened with ``O_CREAT`` that is empty (or ``O_TRUNC``): its inode is a new file;
- ``ok DEV INO SIZE``: an fsync succeeded; SIZE, taken before it started, is covered by it;
- ``fail DEV INO SIZE``: an fsync failed with the file SIZE long; ``trunc DEV INO SIZE``: a ftruncate;
- a ``syncfs`` that succeeded writes an ``ok`` line for every file below the directory it was called on,
  with the size each had before it started (a failed one writes nothing: no file is known to be affected;
  a faults rule for ``fsync`` fails it too).

A harness then models a power cut from the journal alone (``tests/integration/storage_torture.py``,
``PowerCut``). With it, ``PATH.faults`` holding ``ERRNO RATE OPS`` (e.g. ``EIO 0.02 write,fsync``) makes
each of those calls fail with that probability while the file exists (read at most every 50 ms); a write
chosen to fail writes half of its bytes first, as with :class:`FaultInjector`. Unset, nothing of this is
bound: the names are the ``os`` functions.
"""
from __future__ import annotations

import builtins as _builtins
import errno as _errno
import functools as _functools
import os as _os
import random as _random
import time as _time

open = _os.open  # noqa: A001 - the os function under its own name
write = _os.write
fsync = _os.fsync
ftruncate = _os.ftruncate
rename = _os.rename
replace = _os.replace
dup = _os.dup


@_functools.cache
def _libc_syncfs():
    """libc's ``syncfs`` and ctypes' ``get_errno``, bound at the first call (ctypes is not loaded at
    start-up); None where libc lacks it."""
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs, ctypes.get_errno
    except (OSError, AttributeError):
        return None


def syncfs(fd: int) -> None:
    """Linux ``syncfs(2)`` (not in ``os``): every dirty file and the journal of the file system that
    holds ``fd``, in one call; it reports writeback errors since Linux 5.8. OSError(ENOSYS) where libc
    lacks it."""
    bound = _libc_syncfs()
    if bound is None:
        raise OSError(_errno.ENOSYS, "syncfs(2) is not available")
    call, get_errno = bound
    if call(fd) != 0:
        err = get_errno()
        raise OSError(err, _os.strerror(err))

SYNC_JOURNAL_ENV = "SHAREBROKER_SYNC_JOURNAL"


class _SyncJournal:
    """The test-only sync journal and random faults (module docstring); ``install`` rebinds the names."""

    def __init__(self, path: str):
        self.fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT | _os.O_APPEND, 0o644)
        self.faults_path = path + ".faults"
        self.rule: tuple[int, float, frozenset] | None = None
        self.next_check = 0.0
        self.monotonic, self.random = _time.monotonic, _random.Random().random

    def note(self, what: str, fd: int, size: int | None = None) -> None:
        st = _os.fstat(fd)
        line = f"{what} {st.st_dev} {st.st_ino}" + ("" if size is None else f" {size}") + "\n"
        _os.write(self.fd, line.encode())

    def fault(self, op: str) -> int | None:
        """The errno this call fails with, when ``PATH.faults`` says so and the dice agree."""
        now = self.monotonic()
        if now >= self.next_check:
            self.next_check = now + 0.05
            try:
                with _builtins.open(self.faults_path) as f:  # this module's ``open`` is os.open
                    name, rate, ops = f.read().split()
                self.rule = (getattr(_errno, name), float(rate), frozenset(ops.split(",")))
            except (OSError, ValueError, AttributeError):
                self.rule = None
        rule = self.rule
        if rule is not None and op in rule[2] and self.random() < rule[1]:
            return rule[0]
        return None

    def install(self, names: dict) -> None:
        real_open, real_write, real_fsync, real_ftruncate = _os.open, _os.write, _os.fsync, _os.ftruncate

        def j_open(path, flags, *args, **kwargs):
            fd = real_open(path, flags, *args, **kwargs)
            if flags & _os.O_CREAT and (flags & _os.O_TRUNC or _os.fstat(fd).st_size == 0):
                self.note("new", fd)
            return fd

        def j_write(fd, data):
            err = self.fault("write")
            if err is None:
                return real_write(fd, data)
            if len(data) > 1:
                real_write(fd, memoryview(data)[:len(data) // 2])
            raise OSError(err, f"{_os.strerror(err)} (injected: {SYNC_JOURNAL_ENV} faults)")

        def j_fsync(fd):
            size = _os.fstat(fd).st_size
            err = self.fault("fsync")
            try:
                if err is not None:
                    raise OSError(err, f"{_os.strerror(err)} (injected: {SYNC_JOURNAL_ENV} faults)")
                real_fsync(fd)
            except OSError:
                try:
                    self.note("fail", fd, _os.fstat(fd).st_size)
                except OSError:  # a closed descriptor: nothing was written through it
                    pass
                raise
            self.note("ok", fd, size)

        def j_ftruncate(fd, length):
            real_ftruncate(fd, length)
            self.note("trunc", fd, length)

        real_syncfs = names["syncfs"]

        def j_syncfs(fd):
            before = []  # (device, inode, size) of every file below the directory, before the sync starts
            for d, _dirs, files in _os.walk(_os.readlink(f"/proc/self/fd/{fd}")):
                for name in files:
                    try:
                        st = _os.stat(_os.path.join(d, name))
                    except OSError:  # removed meanwhile
                        continue
                    before.append(f"ok {st.st_dev} {st.st_ino} {st.st_size}\n")
            err = self.fault("fsync")  # a rule for fsyncs holds for syncfs, the fsync of every file
            if err is not None:
                raise OSError(err, f"{_os.strerror(err)} (injected: {SYNC_JOURNAL_ENV} faults)")
            real_syncfs(fd)
            _os.write(self.fd, "".join(before).encode())

        names.update(open=j_open, write=j_write, fsync=j_fsync, ftruncate=j_ftruncate, syncfs=j_syncfs)


if _os.environ.get(SYNC_JOURNAL_ENV):
    _SyncJournal(_os.environ[SYNC_JOURNAL_ENV]).install(globals())

OPERATIONS = ("open", "write", "fsync", "ftruncate", "rename", "replace", "dup", "syncfs")
_ORIGINAL = {name: globals()[name] for name in OPERATIONS}


class FaultInjector:
    """Counts the calls made through this module and makes the ``fail_at``-th (1-based) raise
    ``OSError(error)`` (every one from it on with ``sticky``); only ``operations`` are counted.
    A context manager; one may be active at a time."""

    _active: "FaultInjector | None" = None

    def __init__(self, fail_at: int | None = None, error: int = _errno.ENOSPC, *, sticky: bool = False,
                 operations: tuple[str, ...] = OPERATIONS):
        unknown = set(operations) - set(OPERATIONS)
        if unknown:
            raise ValueError(f"not file operations of this layer: {sorted(unknown)}")
        self.fail_at = fail_at
        self.error = error
        self.sticky = sticky
        self.operations = operations
        self.calls: list[tuple[str, object]] = []  # (operation, path or fd) of every counted call
        self.failed: list[tuple[str, object]] = []  # the calls made to fail

    def lift(self) -> None:
        """The fault is gone: calls from now on succeed (and are still counted)."""
        self.fail_at = None

    def _should_fail(self) -> bool:
        n = len(self.calls)
        return self.fail_at is not None and (n == self.fail_at or (self.sticky and n > self.fail_at))

    def _wrap(self, name: str):
        real = _ORIGINAL[name]

        def call(*args, **kwargs):
            self.calls.append((name, args[0] if args else None))
            if not self._should_fail():
                return real(*args, **kwargs)
            self.failed.append(self.calls[-1])
            if name == "write" and len(args) == 2 and len(args[1]) > 1:
                real(args[0], memoryview(args[1])[:len(args[1]) // 2])  # a disk that filled up mid-write
            raise OSError(self.error, f"{_os.strerror(self.error)} (injected at call {len(self.calls)}: {name})")
        return call

    def __enter__(self) -> "FaultInjector":
        if FaultInjector._active is not None:
            raise RuntimeError("a FaultInjector is already active")
        FaultInjector._active = self
        g = globals()
        for name in self.operations:
            if _ORIGINAL[name] is not None:  # syncfs where libc lacks it, or under the sync journal
                g[name] = self._wrap(name)
        return self

    def __exit__(self, *exc) -> None:
        globals().update(_ORIGINAL)
        FaultInjector._active = None
