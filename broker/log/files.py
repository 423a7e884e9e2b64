"""Small files replaced whole (checkpoints, topic metadata, configs, credentials): one helper.

:func:`atomic_write` replaces a file so that a crash leaves either the old or the new content,
and makes the rename durable (the directory is fsynced too). Segment index files are the one
tmp-then-rename write that does not use it: they are derived from the log, checked at open and
rebuilt when wrong (see ``Segment._rewrite_indexes``).
"""
from __future__ import annotations

import logging
import os
from typing import Callable

from . import fileio
from .background import Sync
from .faults import STORAGE

log = logging.getLogger(__name__)


def fsync_dir(path: str) -> None:
    fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_path(path: str, flags: int = os.O_RDONLY) -> None:
    fd = fileio.open(path, flags)
    try:
        fileio.fsync(fd)
    finally:
        os.close(fd)


def fsync_path_and_dir(path: str) -> None:
    """fsync a (just renamed) file and its directory; a file already replaced or removed is fine."""
    for p, flags in ((path, os.O_RDONLY), (os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)):
        try:
            fd = fileio.open(p, flags)
        except FileNotFoundError:
            return
        try:
            fileio.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str, data: bytes, background=None, mode: int = 0o644,
                 on_error: Callable[[object, BaseException | None], None] | None = None, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``, set before any byte is written) so that a
    crash leaves either the old or the new content.

    Without ``background`` (or with an inline one): tmp, fsync, rename, fsync of the directory,
    all here. With a threaded ``Background`` worker (``LogManager.background``): tmp and rename
    here, so the new content survives kill -9 when this returns, and the fsyncs of the file and
    of its directory run on the worker (in order after earlier jobs; ``on_error(result, exc)``
    hears how they went, default: an error is logged). ``await background.barrier()`` waits until
    they are done. Between the rename and that fsync a power failure can leave the old content
    or, on file systems without ext4's rename-over data ordering (auto_da_alloc), an empty file.
    If a step here fails, the tmp file is removed, ``path`` keeps its old content and the OSError
    is raised. ``sync=False`` (synchronous only) leaves both fsyncs to the caller, who syncs the
    whole file system once after many such writes (``LogManager.close``).
    """
    threaded = background is not None and background.threaded
    tmp = path + ".tmp"
    fd = fileio.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # a tmp file left by a crash keeps its old mode through O_TRUNC
            view = memoryview(data)
            while view:
                view = view[fileio.write(fd, view):]
            if sync and not threaded:
                fileio.fsync(fd)
        finally:
            os.close(fd)
        fileio.replace(tmp, path)
    except OSError:  # the old content stays; no partial tmp file is left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if threaded:
        # only fsyncs: queued beside partitions' fsyncs it may share their syncfs (background.py, "Merged syncs")
        background.submit(Sync(lambda: fsync_path_and_dir(path)),
                          on_error or (lambda r, exc: log_bg_error(r, exc, path)))
    elif sync:
        fsync_dir(os.path.dirname(path) or ".")


def log_bg_error(_result, exc, path: str = "") -> None:
    """The default outcome callback of a background metadata fsync: an error is reported to
    ``faults.STORAGE`` (logged once with the path, counted)."""
    if exc is not None:
        STORAGE.report("metadata sync", path or "(metadata)", exc)
