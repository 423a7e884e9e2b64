"""Event-loop stall watch: how long the loop went without a turn, and what it was doing meanwhile.

Off by default; ``sharebroker.loop.stall.log.ms`` (ours) turns it on with that threshold.  Two parts:

* a ticker on the loop (``call_later`` every ``TICK_S``) that notes when it last ran and, when a tick
  comes later than due by at least the threshold, logs one line per stall:
  ``event loop stalled 73 ms (loop thread on CPU 70 ms, process 71 ms): 6 x broker/log/partition_log.py:512
  roll <- ...; other threads: ...`` (the stall, the CPU time of the loop thread and of the whole process
  during it, and the samples below, most frequent first);
* a watcher thread that wakes every ``TICK_S``: while the loop is late by half the threshold or more it
  takes the loop thread's innermost frames of this repository (``sys._current_frames``), at most
  ``MAX_SAMPLES`` per stall, and those of the broker's other threads that are not waiting.  A stall
  with the loop thread on the CPU for most of it is work on the loop, and the frames say which; one
  where another thread used the CPU is the GIL held by that thread; one with the process off the CPU
  is time it was not running (other processes on the cores, a blocking system call, page faults).

The longest stall since start-up is kept in :attr:`LoopWatch.longest_ms` (and logged at shutdown), so a
benchmark reads one line.  Nothing here touches broker state: the watcher only reads frames.
"""
from __future__ import annotations

import asyncio
import collections
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


_WAITING = frozenset({"wait", "get", "_wait_for_tstate_lock", "select", "poll", "accept", "recv_into", "readinto"})


def _name(ident: int) -> str:
    t = threading._active.get(ident)  # noqa: SLF001 -- a name for the log line only
    return t.name if t is not None else str(ident)


def _where(frame, depth: int = 3) -> str:
    """The innermost ``depth`` frames of this repository (or the innermost frame when none is ours)."""
    out = []
    f = frame
    while f is not None and len(out) < depth:
        path = f.f_code.co_filename
        if path.startswith(_HERE) and "loop_watch" not in path:
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
        self._cpu_last = (0.0, 0.0)  # the loop thread's and the process's CPU time at the last tick
        self._samples: collections.Counter = collections.Counter()  # written by the watcher, drained by ticks
        self._others: collections.Counter = collections.Counter()   # other threads' frames, the same way
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ident = 0
        self._cpu_clock: int | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ident = threading.get_ident()
        try:
            self._cpu_clock = time.pthread_getcpuclockid(self._ident)
        except (AttributeError, OSError):
            self._cpu_clock = None
        self._last, self._cpu_last = time.perf_counter(), self._cpu()
        self._handle = self._loop.call_later(TICK_S, self._tick)
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()
        log.info("event-loop stall watch on: stalls of %.0f ms or more are logged", self.threshold * 1000)

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None:
            self._thread.join(1.0)
        log.info("event-loop stall watch: %d stalls of %.0f ms or more, longest %.1f ms%s", self.stalls,
                 self.threshold * 1000, self.longest_ms, f" ({self.longest_where})" if self.longest_where else "")

    def _cpu(self) -> tuple[float, float]:
        thread = time.clock_gettime(self._cpu_clock) if self._cpu_clock is not None else 0.0
        return thread, time.process_time()

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), self._cpu()
        late = now - self._last - TICK_S
        if late >= self.threshold:
            samples, others = self._samples, self._others
            self._samples, self._others = collections.Counter(), collections.Counter()
            where = "; ".join(f"{n} x {w}" for w, n in samples.most_common(4)) or "no sample"
            self.stalls += 1
            ms = late * 1000
            if ms > self.longest_ms:
                self.longest_ms, self.longest_where = ms, where
            log.warning("event loop stalled %.0f ms (loop thread on CPU %.0f ms, process %.0f ms): %s%s", ms,
                        (cpu[0] - self._cpu_last[0]) * 1000, (cpu[1] - self._cpu_last[1]) * 1000, where,
                        "; other threads: " + "; ".join(f"{n} x {w}" for w, n in others.most_common(3))
                        if others else "")
        elif self._samples or self._others:
            self._samples, self._others = collections.Counter(), collections.Counter()
        self._last, self._cpu_last = now, cpu
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
                    if frame.f_code.co_name not in _WAITING:
                        self._others[f"{_name(ident)}: {_where(frame)}"] += 1


def start(config) -> LoopWatch | None:
    """A running :class:`LoopWatch` when ``sharebroker.loop.stall.log.ms`` is set above 0, else None."""
    ms = config.get_int(SETTING, 0)
    if ms <= 0:
        return None
    watch = LoopWatch(ms)
    watch.start()
    return watch
