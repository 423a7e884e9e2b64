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
"""
from __future__ import annotations

import errno as _errno
import os as _os

open = _os.open  # noqa: A001 - the os function under its own name
write = _os.write
fsync = _os.fsync
ftruncate = _os.ftruncate
rename = _os.rename
replace = _os.replace
dup = _os.dup

OPERATIONS = ("open", "write", "fsync", "ftruncate", "rename", "replace", "dup")
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
            g[name] = self._wrap(name)
        return self

    def __exit__(self, *exc) -> None:
        globals().update(_ORIGINAL)
        FaultInjector._active = None
