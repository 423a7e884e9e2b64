"""The cleaner's worker process, and the broker's handle on it.

Cleaning is CPU work (decoding record framing, hashing keys, re-encoding batches); one
Python process has one GIL, so it runs in a child process (``python -m
broker.log.cleaner``) started by the broker when there is a log to clean.  The
child gets :class:`CleanJob` s on its stdin and answers on its stdout, frames of a 4-byte
length and a pickle: ``("group", job_id, GroupResult)`` for every rewritten group (the
broker swaps it in at once), then ``("done", job_id, (end_offset, stats, codecs))`` or
``("error", job_id, message)`` or, for an OSError, ``("storage-error", job_id, (errno, strerror, filename))``.  It reads the segment files itself and writes only
``*.cleaned`` files.

It dies with the broker: it asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), checks that the parent is still the one that started it,
and exits when its stdin reaches end of file; it runs at a lower CPU priority
(``nice`` +10) so the broker's own work comes first when cores are short.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import traceback

from .cleaner import Cleaner

log = logging.getLogger("sharebroker.cleaner")

_LEN = struct.Struct(">I")
PR_SET_PDEATHSIG = 1
NICE = 10


# ------------------------------------------------------------------ the child
def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: stdin's end of file still stops us
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _send(fd: int, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LEN.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def main() -> None:
    parent = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid()
    _die_with_parent(parent)
    try:
        os.nice(NICE)
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the broker, which stops us
    inp, out = sys.stdin.fileno(), sys.stdout.fileno()
    sys.stdout = sys.stderr  # nothing but frames on the result pipe
    try:
        _serve(inp, out)
    except BrokenPipeError:
        return  # the broker died or closed our result pipe (a kill -9 mid-pass): nobody to report to


def _serve(inp: int, out: int) -> None:
    """Clean the jobs read from ``inp`` one at a time, sending their frames to ``out``."""
    cleaners: dict[tuple, Cleaner] = {}
    while True:
        head = _read_exact(inp, _LEN.size)
        if head is None:
            return  # the broker closed the pipe (or died)
        body = _read_exact(inp, _LEN.unpack(head)[0])
        if body is None:
            return
        job, settings = pickle.loads(body)
        key = settings
        cleaner = cleaners.get(key)
        if cleaner is None:
            cleaners.clear()  # the settings changed: one map at a time
            cleaner = cleaners[key] = Cleaner(*settings)
        try:
            passes = cleaner.clean(job)
            while True:
                try:
                    group = next(passes)
                except StopIteration as stop:
                    end_offset, stats = stop.value
                    break
                _send(out, ("group", job.job_id, group))
            _send(out, ("done", job.job_id, (end_offset, stats.as_dict(), sorted(cleaner.unavailable_codecs))))
        except BrokenPipeError:
            raise
        except OSError as e:  # a storage fault (disk full, read-only, out of descriptors): retried later
            _send(out, ("storage-error", job.job_id, (e.errno, e.strerror or str(e), e.filename)))
        except Exception as e:  # reported; the broker marks the partition uncleanable
            _send(out, ("error", job.job_id, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))


# ----------------------------------------------------------------- the broker
class WorkerProcess:
    """The broker's side of one worker: start it, send a job, receive its frames on the loop.

    ``on_message(kind, job_id, payload)`` runs on the loop for every frame; ``on_exit()`` when the
    child's output ends (it died or was stopped).  Only one job is sent at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_message, on_exit):
        self._loop = loop
        self._on_message = on_message
        self._on_exit = on_exit
        self._buf = bytearray()
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.log.cleaner", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        loop.add_reader(self._out, self._readable)
        self.alive = True

    def send(self, job, settings: tuple) -> None:
        data = pickle.dumps((job, settings), protocol=pickle.HIGHEST_PROTOCOL)
        # a job is small and the child is idle, reading: this write does not wait
        self.proc.stdin.write(_LEN.pack(len(data)) + data)
        self.proc.stdin.flush()

    def _readable(self) -> None:
        try:
            chunk = os.read(self._out, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._closed()
            return
        self._buf += chunk
        while len(self._buf) >= _LEN.size:
            n = _LEN.unpack_from(self._buf, 0)[0]
            if len(self._buf) < _LEN.size + n:
                break
            kind, job_id, payload = pickle.loads(bytes(self._buf[_LEN.size:_LEN.size + n]))
            del self._buf[:_LEN.size + n]
            try:
                self._on_message(kind, job_id, payload)
            except Exception:
                log.exception("cleaner: handling a %s message failed", kind)

    def _closed(self) -> None:
        if not self.alive:
            return
        self.alive = False
        self._loop.remove_reader(self._out)
        self._on_exit()

    def stop(self, timeout: float = 5.0) -> None:
        """End the child (it may be in the middle of a job: its ``.cleaned`` files are removed at the
        next start) and reap it."""
        if self.alive:
            self.alive = False
            try:
                self._loop.remove_reader(self._out)
            except (RuntimeError, ValueError):  # the loop is closed
                pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("cleaner worker %d did not exit", self.proc.pid)
        self.proc.stdout.close()

