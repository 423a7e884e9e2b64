"""What requests read but not yet handled may cost, and where their bytes live.

- :class:`RequestMemory` meters the bytes (``queued.max.request.bytes``) and decides,
  per connection, whether it may read more; ``broker.server.Connection`` asks it and
  pauses reading when the answer is no.
- :class:`FrameBuffers` hands out the buffers large frames are read into: anonymous
  mappings, reused while they are warm (a fresh mapping costs a page fault per 4 KiB
  the frame fills) and unmapped when the load goes away.
- :func:`trim_heap` gives freed heap memory back to the system (glibc ``malloc_trim``).

Owned by ``broker.server.Server``: one of each per broker, shared by every listener.
"""
from __future__ import annotations

import collections
import mmap

# Frames up to this size are one bytearray (counted whole from their first byte); larger
# frames are read into a mapping from FrameBuffers, counted by the bytes received.
SMALL_FRAME_BYTES = 64 * 1024
POOLED_FRAME_BYTES = 8 * 1024 * 1024  # larger mappings are not reused
# A frame up to this size that the partial budget refuses may take its whole size from the room kept
# for complete requests (RequestMemory.admits), as a complete frame would: an ordinary request (a
# producer's batch) is not made to wait behind large partial frames.
SMALL_REQUEST_BYTES = 1024 * 1024
_MIN_CLASS = 128 * 1024


class RequestMemory:
    """Bytes of requests read but not yet handled, across all connections.

    ``capacity`` is ``queued.max.request.bytes``.  Three rules, checked before every read:

    - a complete frame may take memory while any is left (non-strict, as Kafka's memory
      pool), unless its connection already holds ``share`` bytes; partial frames count
      against it only up to their budget, so the last quarter of the pool is there for
      complete requests whatever partial frames hold, even a lone frame larger than the
      pool (issue 29: with a 10 MB pool, 50 partial frames went past their budget and
      new clients' first requests waited for them);
    - a partial frame (announced, not all received) holds only the bytes it received,
      and partial frames together hold at most ``partial_capacity`` (three quarters of
      the pool): a read into one is at most what is left of that budget
      (:meth:`partial_room`), so many frames reading at once do not overshoot it;
    - one connection holds at most ``share`` (a quarter of that) before its partial
      frame must *reserve* the rest of itself, which it gets only when the rest fits
      in the partial budget, or when no other frame is partial (so a frame larger than
      the pool can still complete alone, as with Kafka's pool);
    - a frame up to SMALL_REQUEST_BYTES that the partial budget refuses takes its whole
      size as a complete frame does (:meth:`promote`), so requests up to 1 MiB are read
      while larger partial frames wait (issue 35: 50 partial 9.9 MB frames in a 10 MB
      pool held back a producer's 100 KB Produce).

    A connection refused waits (:meth:`wait`) and is called back
    (``memory_available()``) when bytes are given back; it asks again then.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.partial_capacity = max(1, capacity - capacity // 4)
        self.share = max(1, self.partial_capacity // 4)
        self.used = 0  # every byte taken: complete frames, partial frames, reservations
        self.partial = 0  # of which: bytes of partial frames and their reservations
        self.released = 0  # bytes given back since start (Server.trim decides on it)
        self._waiting: collections.deque = collections.deque()

    def _seen_by_complete(self) -> int:
        """The bytes a complete frame finds taken: partial frames count up to their budget only."""
        return self.used - self.partial + min(self.partial, self.partial_capacity)

    def admits(self, held: int) -> bool:
        """May a connection holding ``held`` bytes take a complete frame?"""
        return self._seen_by_complete() < self.capacity and held < self.share

    def admits_partial(self, held: int) -> bool:
        """May a connection holding ``held`` bytes read more of a partial frame without a reservation?"""
        return self.used < self.capacity and self.partial < self.partial_capacity and held < self.share

    def partial_room(self, held: int) -> int:
        """How many bytes a connection holding ``held`` may read into its partial frame without a reservation."""
        return min(self.partial_capacity - self.partial, self.share - held, self.capacity - self.used)

    def reserve(self, rest: int, own: int) -> bool:
        """Reserve the ``rest`` of a partial frame that already counts ``own`` partial bytes (True if done)."""
        fits = self.used < self.capacity and self.partial + rest <= self.partial_capacity
        if fits or self.partial == own:  # or no other frame is partial: it may go past the bounds alone
            self.used += rest
            self.partial += rest
            return True
        return False

    def take(self, nbytes: int, partial: bool = False) -> None:
        self.used += nbytes
        if partial:
            self.partial += nbytes

    def promote(self, own: int, rest: int) -> None:
        """A partial frame counting ``own`` partial bytes takes the ``rest`` of itself as a complete frame
        does: all its bytes stop counting against the partial budget."""
        self.used += rest
        self.partial -= own

    def completed(self, nbytes: int) -> None:
        """A partial frame of ``nbytes`` became complete: its bytes stop counting as partial."""
        self.partial -= nbytes
        self._wake()

    def give(self, nbytes: int, partial: int = 0) -> None:
        """``nbytes`` are given back, ``partial`` of them from a partial frame (a connection closed)."""
        self.used -= nbytes
        self.partial -= partial
        self.released += nbytes
        self._wake()

    def wait(self, conn) -> None:
        self._waiting.append(conn)

    def _wake(self) -> None:
        """Let every waiting connection ask again (each waits again if still refused)."""
        if self._seen_by_complete() >= self.capacity:  # nothing waiting could be admitted
            return
        for _ in range(len(self._waiting)):
            conn = self._waiting.popleft()
            if not conn.closed:
                conn.memory_available()


class FrameBuffers:
    """Buffers for frames over SMALL_FRAME_BYTES: anonymous mappings, reused while warm.

    ``get(size)`` returns a writable memoryview of exactly ``size`` bytes over a mapping
    of the next power-of-two size (at least 128 KiB); ``put(view)`` takes it back once
    the request is handled.  A mapping is kept for reuse only when nothing else still
    refers to it (a handler that kept a slice keeps the whole mapping alive, and it is
    unmapped with its last view), at most ``keep`` bytes in all, and only up to
    POOLED_FRAME_BYTES; ``trim()`` unmaps what is kept (the server calls it when no
    large frame came for a while).  Pages of a fresh mapping are committed only as
    bytes arrive, so a client announcing a large frame and sending little costs little.
    """

    def __init__(self, keep: int = 16 * 1024 * 1024):
        self.keep = keep
        self.kept = 0
        self.handed_out = 0  # large frames handed out since start (the server's idle test reads it)
        self._free: dict[int, list[mmap.mmap]] = {}

    @staticmethod
    def _class(size: int) -> int:
        return max(_MIN_CLASS, 1 << (size - 1).bit_length())

    def get(self, size: int) -> memoryview:
        self.handed_out += 1
        cls = self._class(size)
        if cls > POOLED_FRAME_BYTES:
            return memoryview(mmap.mmap(-1, size))
        free = self._free.get(cls)
        if free:
            mm = free.pop()
            self.kept -= cls
        else:
            mm = mmap.mmap(-1, cls)
        return memoryview(mm)[:size]

    def put(self, view: memoryview) -> None:
        mm = view.obj
        try:
            view.release()
        except BufferError:  # still exported by C code: leave it to the garbage collector
            return
        size = len(mm)
        if size != self._class(size) or size > POOLED_FRAME_BYTES or self.kept + size > self.keep:
            _unmap(mm)
            return
        try:
            mm.resize(size)  # a no-op that fails while any slice of the mapping is alive
        except BufferError:
            return
        self._free.setdefault(size, []).append(mm)
        self.kept += size

    def trim(self) -> int:
        """Unmap every kept mapping; returns the bytes given back."""
        freed, self.kept = self.kept, 0
        for free in self._free.values():
            for mm in free:
                mm.close()
        self._free.clear()
        return freed


def _unmap(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:  # a slice is still alive: unmapped with its last view
        pass


_malloc_trim = None  # glibc's malloc_trim, loaded at the first trim (ctypes costs start-up time)


def _load_malloc_trim():
    try:
        import ctypes
    except OSError:  # the import opens files: at the open-file limit, try again at the next trim
        return None

    try:
        fn = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return False
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def trim_heap() -> None:
    """Give free heap pages back to the system (glibc keeps freed memory for reuse otherwise)."""
    global _malloc_trim
    if _malloc_trim is None:
        _malloc_trim = _load_malloc_trim()
    if _malloc_trim:
        _malloc_trim(0)
