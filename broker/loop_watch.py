"""Event-loop stall watch: how long the loop went without a turn, and where that time went.

Off by default; ``sharebroker.loop.stall.log.ms`` (ours) turns it on with that threshold.  Two parts:

* a ticker on the loop (``call_later`` every ``TICK_S``) that notes when it last ran, with the loop
  thread's scheduler counters (``/proc/thread-self/schedstat``: time on a CPU, time runnable but
  waiting for one) and the process's CPU time; a tick later than due by at least the threshold logs
  one line:
  ``event loop stalled 73 ms (loop thread: on CPU 2 ms, waiting for a CPU 60 ms, blocked 11 ms;
  process CPU 3 ms; garbage collection 1 ms (generation 0)): 6 x broker/log/files.py:63 atomic_write <- ...``
  (the collections that ran on the loop thread during the stall, from ``gc.callbacks``);
* a watcher thread that wakes every ``TICK_S``: while the loop is late by half the threshold or more it
  takes the loop thread's innermost frames of this repository (``sys._current_frames``), at most
  ``MAX_SAMPLES`` per stall, most frequent first in the line, and those of the other threads (logged
  when the process used more CPU than the loop thread: the GIL held elsewhere).

Reading a stall: "on CPU" is work on the loop and the frames say which; "waiting for a CPU" is the
machine's other processes (or our own threads and cleaner processes) holding the cores; "blocked" is
the loop thread asleep in a system call (file I/O, a page fault, a rename under a busy journal) or
waiting for the GIL.  The longest stall is logged at shutdown.  Nothing here touches broker state.
"""
from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time

log = logging.getLogger("sharebroker")

SETTING = "sharebroker.loop.stall.log.ms"
TICK_S = 0.005
MAX_SAMPLES = 50
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
_SITE = os.sep + "site-packages" + os.sep  # installed packages (a virtual environment inside the repository)
_CLI = os.path.join("broker", "cli.py")  # its main() runs the loop: the innermost frame while uvloop's C code runs


def _name(ident: int) -> str:
    t = threading._active.get(ident)  # noqa: SLF001 -- a name for the log line only
    return t.name if t is not None else str(ident)


def _where(frame, depth: int = 3) -> str:
    """The innermost ``depth`` frames of this repository (or the innermost frame when none is ours)."""
    if frame is not None and frame.f_code.co_name == "main" and frame.f_code.co_filename.endswith(_CLI):
        return "the event loop itself (no Python frame: polling, socket reads and writes, timers)"
    out = []
    f = frame
    while f is not None and len(out) < depth:
        path = f.f_code.co_filename
        if path.startswith(_HERE) and "loop_watch" not in path and _SITE not in path:
            out.append(f"{os.path.relpath(path, _HERE)}:{f.f_lineno} {f.f_code.co_name}")
        f = f.f_back
    if not out and frame is not None:
        out.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
    return " <- ".join(out) or "idle (in the event loop's poll)"


class LoopWatch:
    def __init__(self, threshold_ms: float):
        self.threshold = threshold_ms / 1000.0
        self.longest_ms = 0.0
        self.longest_where = ""
        self.stalls = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._last = 0.0            # perf_counter of the last tick; written by the loop, read by the watcher
        self._counters_last = (0.0, 0.0, 0.0)  # _counters() at the last tick
        self._samples: collections.Counter = collections.Counter()  # written by the watcher, drained by ticks
        self._others: collections.Counter = collections.Counter()   # other threads' frames, the same way
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ident = 0
        self._sched_fd: int | None = None  # the loop thread's schedstat, open from start() to stop()
        self._gc_started = 0.0  # perf_counter when the running collection started
        self._gc_ms = 0.0       # collections since the last tick: their time, the oldest generation
        self._gc_gen = -1

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ident = threading.get_ident()
        try:
            self._sched_fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:  # not Linux: the stall and its frames only
            self._sched_fd = None
        self._last, self._counters_last = time.perf_counter(), self._counters()
        self._handle = self._loop.call_later(TICK_S, self._tick)
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()
        gc.callbacks.append(self._on_gc)
        log.info("event-loop stall watch on: stalls of %.0f ms or more are logged", self.threshold * 1000)

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None:
            self._thread.join(1.0)
        if self._sched_fd is not None:
            os.close(self._sched_fd)
            self._sched_fd = None
        log.info("event-loop stall watch: %d stalls of %.0f ms or more, longest %.1f ms%s", self.stalls,
                 self.threshold * 1000, self.longest_ms, f" ({self.longest_where})" if self.longest_where else "")

    def _counters(self) -> tuple[float, float, float]:
        """(loop thread on a CPU, loop thread waiting for a CPU, process CPU), in seconds."""
        on = wait = 0.0
        if self._sched_fd is not None:
            fields = os.pread(self._sched_fd, 64, 0).split()
            on, wait = int(fields[0]) / 1e9, int(fields[1]) / 1e9
        return on, wait, time.process_time()

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif threading.get_ident() == self._ident:
            self._gc_ms += (time.perf_counter() - self._gc_started) * 1000
            self._gc_gen = max(self._gc_gen, info["generation"])

    def _tick(self) -> None:
        now, counters = time.perf_counter(), self._counters()
        late = now - self._last - TICK_S
        if late >= self.threshold:
            samples, others = self._samples, self._others
            self._samples, self._others = collections.Counter(), collections.Counter()
            where = "; ".join(f"{n} x {w}" for w, n in samples.most_common(4)) or "no sample"
            self.stalls += 1
            ms = late * 1000
            if ms > self.longest_ms:
                self.longest_ms, self.longest_where = ms, where
            on, wait, process = ((a - b) * 1000 for a, b in zip(counters, self._counters_last))
            blocked = max(ms + TICK_S * 1000 - on - wait, 0.0)
            gc_part = (f"; garbage collection {self._gc_ms:.0f} ms (generation {self._gc_gen})"
                       if self._gc_gen >= 0 else "")
            log.warning("event loop stalled %.0f ms (loop thread: on CPU %.0f ms, waiting for a CPU %.0f ms, "
                        "blocked %.0f ms; process CPU %.0f ms%s): %s%s", ms, on, wait, blocked, process, gc_part, where,
                        "; other threads: " + "; ".join(f"{n} x {w}" for w, n in others.most_common(3))
                        if others and process - on >= ms / 4 else "")
        elif self._samples or self._others:
            self._samples, self._others = collections.Counter(), collections.Counter()
        self._last, self._counters_last = now, counters
        self._gc_ms, self._gc_gen = 0.0, -1
        if not self._stop.is_set():
            self._handle = self._loop.call_later(TICK_S, self._tick)

    def _watch(self) -> None:
        half = self.threshold / 2
        while not self._stop.wait(TICK_S):
            if time.perf_counter() - self._last - TICK_S >= half and sum(self._samples.values()) < MAX_SAMPLES:
                frames = sys._current_frames()
                self._samples[_where(frames.pop(self._ident, None))] += 1
                frames.pop(threading.get_ident(), None)
                for ident, frame in frames.items():
                    self._others[f"{_name(ident)}: {_where(frame)}"] += 1


def start(config) -> LoopWatch | None:
    """A running :class:`LoopWatch` when ``sharebroker.loop.stall.log.ms`` is set above 0, else None."""
    ms = config.get_int(SETTING, 0)
    if ms <= 0:
        return None
    watch = LoopWatch(ms)
    watch.start()
    return watch
