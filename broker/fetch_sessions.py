"""Incremental fetch sessions (KIP-227) for consumer Fetch requests.

SessionId / SessionEpoch as in Kafka's FetchMetadata:
- (0, -1): sessionless full fetch;          (0, 0): full fetch that opens a session;
- (id, 0): close ``id`` and open a new one; (id, -1): close ``id``, sessionless full fetch;
- (id, n>0): incremental fetch on ``id``; unknown id -> FETCH_SESSION_ID_NOT_FOUND,
  wrong epoch -> INVALID_FETCH_SESSION_EPOCH.
- an incremental request at a version whose topic addressing (names before v13, ids
  from v13) differs from the session's -> FETCH_SESSION_TOPIC_ID_ERROR;
- every error response carries session id 0 and leaves the session as it was.
An incremental request carries only changed partitions and forgotten ones; its
response lists only partitions with records, an error, or a changed high watermark,
last stable offset or log start offset; a session left with no partition is closed
and the response is sessionless.  A partition that returned records moves to the end
of the session's order, so a small MaxBytes does not starve the later ones.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (default
1000).  When it is full, a new session may evict (Kafka's ``tryEvict``) the least
recently used session if it was unused for 2 minutes, else the smallest session
created more than 2 minutes ago if it has no more partitions than the new one;
otherwise the fetch is served without a session (session id 0).  Kafka splits the
slots over 8 shards; here they are one pool.
"""
from __future__ import annotations

import random
import time
from collections import OrderedDict
from typing import Callable

from protocol.errors import Errors

EVICTION_MS = 120_000  # Kafka's FetchSessionCache eviction time


class SessionPartition:
    __slots__ = ("topic_id", "fetch_offset", "max_bytes", "log_start_offset", "last_hwm", "last_lso",
                 "last_lss")

    def __init__(self, topic_id: bytes, fetch_offset: int, max_bytes: int, log_start_offset: int):
        self.topic_id = topic_id
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.log_start_offset = log_start_offset
        self.last_hwm = self.last_lso = self.last_lss = -2


class FetchSession:
    __slots__ = ("id", "epoch", "partitions", "by_id", "created_ms", "used_ms", "size")

    def __init__(self, session_id: int, by_id: bool, size: int, now_ms: int):
        self.id = session_id
        self.epoch = 1
        self.by_id = by_id
        self.size = size  # partitions when created or last used (eviction value)
        self.created_ms = self.used_ms = now_ms
        # key: (topic name or topic id, partition) in request order
        self.partitions: dict[tuple, SessionPartition] = {}


class FetchSessionCache:
    def __init__(self, slots: int = 1000, now_ms: Callable[[], int] | None = None):
        self.slots = slots
        self.now_ms = now_ms or (lambda: int(time.monotonic() * 1000))
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def _new_id(self) -> int:
        while True:
            sid = random.randint(1, 0x7FFFFFFF)
            if sid not in self._sessions:
                return sid

    def open(self, by_id: bool, size: int) -> FetchSession | None:
        """A new session for ``size`` partitions, or None when there is no slot for it."""
        if self.slots <= 0:
            return None
        now = self.now_ms()
        if len(self._sessions) >= self.slots and not self._evict_for(size, now):
            return None
        s = FetchSession(self._new_id(), by_id, size, now)
        self._sessions[s.id] = s
        return s

    def _evict_for(self, size: int, now: int) -> bool:
        lru = next(iter(self._sessions.values()))
        if now - lru.used_ms > EVICTION_MS:
            del self._sessions[lru.id]
            return True
        old = [s for s in self._sessions.values() if now - s.created_ms > EVICTION_MS]
        if old:
            victim = min(old, key=lambda s: s.size)
            if victim.size <= size:
                del self._sessions[victim.id]
                return True
        return False

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def resolve(self, session_id: int, epoch: int, by_id: bool) -> tuple[int, FetchSession | None, bool]:
        """Return (error, session, full) for a request's session id, epoch and topic addressing.

        ``session`` is the session to update (None for sessionless); ``full`` says
        whether the request lists every partition.
        """
        if epoch in (0, -1):
            if session_id:
                self.close(session_id)
            return Errors.NONE, None, True
        s = self._sessions.get(session_id) if session_id else None
        if s is None:
            return Errors.FETCH_SESSION_ID_NOT_FOUND, None, False
        if s.epoch != epoch:
            return Errors.INVALID_FETCH_SESSION_EPOCH, None, False
        if s.by_id != by_id:
            return Errors.FETCH_SESSION_TOPIC_ID_ERROR, None, False
        self._sessions.move_to_end(session_id)
        s.used_ms = self.now_ms()
        s.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        return Errors.NONE, s, False
