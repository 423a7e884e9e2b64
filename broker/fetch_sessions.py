"""Incremental fetch sessions (KIP-227) for consumer Fetch requests.

SessionId / SessionEpoch as in Kafka's FetchMetadata:
- (0, -1): sessionless full fetch;          (0, 0): full fetch that opens a session;
- (id, 0): close ``id`` and open a new one; (id, -1): close ``id``, sessionless full fetch;
- (id, n>0): incremental fetch on ``id``; unknown id -> FETCH_SESSION_ID_NOT_FOUND,
  wrong epoch -> INVALID_FETCH_SESSION_EPOCH.
An incremental request carries only changed partitions and forgotten ones; its
response lists only partitions with records, an error, or a changed high watermark,
last stable offset or log start offset.  The cache holds
``max.incremental.fetch.session.cache.slots`` sessions (default 1000); when full,
the least recently used session is evicted, and when none can be, a full fetch
gets session id 0 (sessionless), as Kafka does.
"""
from __future__ import annotations

import random
from collections import OrderedDict

from protocol.errors import Errors


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
    __slots__ = ("id", "epoch", "partitions", "by_id")

    def __init__(self, session_id: int, by_id: bool):
        self.id = session_id
        self.epoch = 1
        self.by_id = by_id
        # key: (topic name or topic id, partition) in request order
        self.partitions: dict[tuple, SessionPartition] = {}


class FetchSessionCache:
    def __init__(self, slots: int = 1000):
        self.slots = slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def _new_id(self) -> int:
        while True:
            sid = random.randint(1, 0x7FFFFFFF)
            if sid not in self._sessions:
                return sid

    def open(self, by_id: bool) -> FetchSession | None:
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots:
            self._sessions.popitem(last=False)
        s = FetchSession(self._new_id(), by_id)
        self._sessions[s.id] = s
        return s

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def resolve(self, session_id: int, epoch: int) -> tuple[int, FetchSession | None, bool]:
        """Return (error, session, full) for a request's session id and epoch.

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
        self._sessions.move_to_end(session_id)
        s.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        return Errors.NONE, s, False
