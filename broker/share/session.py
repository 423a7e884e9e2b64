"""Share sessions (KIP-932) as Kafka 4.4's ShareSessionCache / SharePartitionManager keep them.

A session is keyed by (group_id, member_id) and holds the member's share
partitions (topic_id, partition) in the order they were added, its epoch, the
connection it was opened on and when it was last used. The epoch rules:

ShareFetch (`fetch_context`):
- 0: opens a session (a full fetch). Acknowledgements in it -> INVALID_REQUEST.
  An existing session for the key is replaced; as in Kafka its records are not
  released here (the member may still acknowledge them). More than
  `max_sessions` (group.share.max.share.sessions, 2000) -> SHARE_SESSION_LIMIT_REACHED.
  The new session's epoch is 1.
- 1..2^31-1: incremental. Unknown key -> SHARE_SESSION_NOT_FOUND; epoch other than
  the session's -> INVALID_SHARE_SESSION_EPOCH; else partitions are added/forgotten
  and the epoch moves on (after 2^31-1 comes 1).
- -1: final. Unknown key -> SHARE_SESSION_NOT_FOUND. The handler processes the
  acknowledgements, releases the member's records and calls `close()`.
ShareAcknowledge (`acknowledge_context`):
- 0 -> INVALID_SHARE_SESSION_EPOCH (a session cannot be opened by it);
- -1: final, the session must exist (SHARE_SESSION_NOT_FOUND), no epoch check;
- else as incremental ShareFetch, without partition changes.
Any other negative epoch is an incremental epoch that never matches.

Closing: `close()` (final epoch; the caller releases the records it awaits),
`connection_closed()` (the client disconnected) and `evict_idle()` (only when
`idle_timeout_ms` is set: Kafka 4.4 evicts on disconnect only, KIP-932 named
120 s) call `on_close(session)` so the broker releases the member's records.

Errors are raised as ShareError(code).
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

from protocol.errors import Errors

from broker.share.errors import ShareError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

PartitionKey = tuple[bytes, int]  # (topic_id, partition)


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch` (Kafka's ShareRequestMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class ShareSession:
    """One member's share session on this broker."""

    __slots__ = ("group_id", "member_id", "epoch", "partitions", "connection_id", "last_used_ms")

    def __init__(self, group_id: str, member_id: str, partitions: Iterable[PartitionKey],
                 connection_id: Hashable | None, now_ms: int):
        self.group_id, self.member_id = group_id, member_id
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions: dict[PartitionKey, None] = dict.fromkeys(partitions)
        self.connection_id = connection_id
        self.last_used_ms = now_ms

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id

    def update(self, added: Iterable[PartitionKey], forgotten: Iterable[PartitionKey]) -> None:
        for tp in added:
            self.partitions.setdefault(tp, None)
        for tp in forgotten:
            self.partitions.pop(tp, None)

    def __repr__(self) -> str:
        return (f"ShareSession({self.group_id!r}, {self.member_id!r}, epoch={self.epoch}, "
                f"partitions={len(self.partitions)})")


class ShareSessionCache:
    """All share sessions of the broker, with the connection each one was opened on."""

    __slots__ = ("max_sessions", "idle_timeout_ms", "_now_ms", "_on_close", "_sessions",
                 "_by_connection")

    def __init__(self, max_sessions: int = 2000, *, now_ms: Callable[[], int] = lambda: 0,
                 idle_timeout_ms: int | None = None,
                 on_close: Callable[[ShareSession], None] | None = None):
        self.max_sessions = max_sessions
        self.idle_timeout_ms = idle_timeout_ms
        self._now_ms = now_ms
        self._on_close = on_close
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[Hashable, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def group_session_count(self, group_id: str) -> int:
        return sum(1 for g, _ in self._sessions if g == group_id)

    def fetch_context(self, group_id: str, member_id: str, epoch: int, *,
                      partitions: Iterable[PartitionKey] = (), forgotten: Iterable[PartitionKey] = (),
                      has_acks: bool = False, connection_id: Hashable | None = None) -> ShareSession:
        """Apply a ShareFetch's session epoch; returns the session the request runs in."""
        key = (group_id, member_id)
        now = self._now_ms()
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise ShareError(Errors.INVALID_REQUEST,
                                 "acknowledgements are not allowed in a request opening a share session")
            self._remove(key)
            if len(self._sessions) >= self.max_sessions and self.idle_timeout_ms is not None:
                self.evict_idle()
            if len(self._sessions) >= self.max_sessions:
                raise ShareError(Errors.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(group_id, member_id, partitions, connection_id, now)
            self._sessions[key] = session
            if connection_id is not None:
                self._by_connection.setdefault(connection_id, set()).add(key)
            return session
        session = self._existing(key)
        if epoch == FINAL_EPOCH:
            return session
        if session.epoch != epoch:
            raise ShareError(Errors.INVALID_SHARE_SESSION_EPOCH,
                             f"expected share session epoch {session.epoch}, got {epoch}")
        session.update(partitions, forgotten)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now
        return session

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """Apply a ShareAcknowledge's session epoch; returns the session it runs in."""
        if epoch == INITIAL_EPOCH:
            raise ShareError(Errors.INVALID_SHARE_SESSION_EPOCH,
                             "a ShareAcknowledge request cannot open a share session")
        session = self._existing((group_id, member_id))
        if epoch == FINAL_EPOCH:
            return session
        if session.epoch != epoch:
            raise ShareError(Errors.INVALID_SHARE_SESSION_EPOCH,
                             f"expected share session epoch {session.epoch}, got {epoch}")
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self._now_ms()
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """Remove the session (final epoch). The caller releases the member's records."""
        return self._remove((group_id, member_id))

    def connection_closed(self, connection_id: Hashable) -> list[ShareSession]:
        """Close the sessions opened on a connection that went away (on_close is called)."""
        closed = []
        for key in self._by_connection.pop(connection_id, ()):
            # a session reopened on another connection was already moved off this one
            closed.append(self._remove(key))
        self._closed(closed)
        return closed

    def evict_idle(self) -> list[ShareSession]:
        """Close sessions unused for idle_timeout_ms (on_close is called); none when it is None."""
        if self.idle_timeout_ms is None:
            return []
        deadline = self._now_ms() - self.idle_timeout_ms
        closed = [self._remove(key) for key, s in list(self._sessions.items())
                  if s.last_used_ms <= deadline]
        self._closed(closed)
        return closed

    def _existing(self, key: tuple[str, str]) -> ShareSession:
        session = self._sessions.get(key)
        if session is None:
            raise ShareError(Errors.SHARE_SESSION_NOT_FOUND, f"no share session for {key}")
        return session

    def _remove(self, key: tuple[str, str]) -> ShareSession | None:
        session = self._sessions.pop(key, None)
        if session is not None and session.connection_id is not None:
            keys = self._by_connection.get(session.connection_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection_id]
        return session

    def _closed(self, sessions: list[ShareSession]) -> None:
        if self._on_close is not None:
            for session in sessions:
                self._on_close(session)
