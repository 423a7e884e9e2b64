"""Share sessions: every KIP-932 / Kafka 4.4 epoch rule, the cache limit, connections, eviction."""
from __future__ import annotations

import pytest

from protocol.errors import Errors

from broker.share.errors import ShareError
from broker.share.session import FINAL_EPOCH, ShareSessionCache, next_epoch

T1, T2 = b"\x01" * 16, b"\x02" * 16
MAX = 2**31 - 1


class Clock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def make(**kw):
    closed = []
    cache = ShareSessionCache(on_close=closed.append, **kw)
    return cache, closed


def code_of(call, *args, **kw):
    with pytest.raises(ShareError) as e:
        call(*args, **kw)
    return e.value.code


def test_next_epoch():
    assert [next_epoch(e) for e in (0, 1, 41, MAX, -1, -7)] == [1, 2, 42, 1, -1, -1]


def test_epoch_zero_opens_a_session_at_epoch_one():
    cache, _ = make()
    s = cache.fetch_context("g", "m", 0, partitions=[(T1, 0), (T1, 1), (T1, 0)])
    assert s.epoch == 1 and list(s.partitions) == [(T1, 0), (T1, 1)]
    assert cache.get("g", "m") is s and len(cache) == 1


def test_epoch_zero_with_acknowledgements_is_invalid_request():
    cache, _ = make()
    old = cache.fetch_context("g", "m", 0, partitions=[(T1, 0)])
    assert code_of(cache.fetch_context, "g", "m", 0, has_acks=True) == Errors.INVALID_REQUEST
    assert cache.get("g", "m") is old  # the existing session is untouched


def test_epoch_zero_replaces_an_existing_session_without_releasing():
    cache, closed = make()
    old = cache.fetch_context("g", "m", 0, partitions=[(T1, 0)])
    cache.fetch_context("g", "m", 1)
    new = cache.fetch_context("g", "m", 0, partitions=[(T2, 3)])
    assert new is not old and new.epoch == 1 and list(new.partitions) == [(T2, 3)]
    assert len(cache) == 1 and closed == []


def test_incremental_epoch_must_be_the_next_one():
    cache, _ = make()
    cache.fetch_context("g", "m", 0, partitions=[(T1, 0), (T1, 1)])
    assert code_of(cache.fetch_context, "g", "m", 2) == Errors.INVALID_SHARE_SESSION_EPOCH
    s = cache.fetch_context("g", "m", 1, partitions=[(T2, 0)], forgotten=[(T1, 0)])
    assert s.epoch == 2 and list(s.partitions) == [(T1, 1), (T2, 0)]
    assert code_of(cache.fetch_context, "g", "m", 1) == Errors.INVALID_SHARE_SESSION_EPOCH
    assert code_of(cache.fetch_context, "g", "m", -5) == Errors.INVALID_SHARE_SESSION_EPOCH
    assert cache.fetch_context("g", "m", 2).epoch == 3


def test_unknown_session_is_not_found():
    cache, _ = make()
    cache.fetch_context("g", "m", 0)
    for call, epoch in ((cache.fetch_context, 1), (cache.fetch_context, FINAL_EPOCH),
                        (cache.acknowledge_context, 1), (cache.acknowledge_context, FINAL_EPOCH)):
        assert code_of(call, "g", "other", epoch) == Errors.SHARE_SESSION_NOT_FOUND
        assert code_of(call, "h", "m", epoch) == Errors.SHARE_SESSION_NOT_FOUND


def test_epoch_wraps_after_int32_max_to_one():
    cache, _ = make()
    s = cache.fetch_context("g", "m", 0)
    s.epoch = MAX
    assert cache.fetch_context("g", "m", MAX).epoch == 1
    s.epoch = MAX
    assert cache.acknowledge_context("g", "m", MAX).epoch == 1
    assert cache.acknowledge_context("g", "m", 1).epoch == 2


def test_final_fetch_finds_the_session_and_close_removes_it():
    cache, closed = make()
    s = cache.fetch_context("g", "m", 0, partitions=[(T1, 0)])
    assert cache.fetch_context("g", "m", FINAL_EPOCH) is s and s.epoch == 1  # no epoch check, no bump
    assert cache.close("g", "m") is s and cache.get("g", "m") is None
    assert closed == []  # the caller releases the records of an explicit close
    assert cache.close("g", "m") is None
    assert code_of(cache.fetch_context, "g", "m", FINAL_EPOCH) == Errors.SHARE_SESSION_NOT_FOUND


def test_share_acknowledge_epochs():
    cache, _ = make()
    assert code_of(cache.acknowledge_context, "g", "m", 0) == Errors.INVALID_SHARE_SESSION_EPOCH
    s = cache.fetch_context("g", "m", 0, partitions=[(T1, 0)])
    assert code_of(cache.acknowledge_context, "g", "m", 0) == Errors.INVALID_SHARE_SESSION_EPOCH
    assert len(cache) == 1 and s.epoch == 1
    assert code_of(cache.acknowledge_context, "g", "m", 2) == Errors.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge_context("g", "m", 1) is s and s.epoch == 2
    assert list(s.partitions) == [(T1, 0)]
    assert cache.acknowledge_context("g", "m", FINAL_EPOCH) is s and s.epoch == 2
    assert cache.fetch_context("g", "m", 2).epoch == 3  # one epoch shared by both APIs


def test_session_limit_reached():
    cache, _ = make(max_sessions=2)
    cache.fetch_context("g", "a", 0)
    cache.fetch_context("g", "b", 0)
    assert code_of(cache.fetch_context, "g", "c", 0) == Errors.SHARE_SESSION_LIMIT_REACHED
    assert cache.fetch_context("g", "a", 0).epoch == 1  # replacing one's own session still works
    cache.close("g", "b")
    assert cache.fetch_context("g", "c", 0).epoch == 1
    assert cache.group_session_count("g") == 2


def test_closing_a_connection_closes_its_sessions():
    cache, closed = make()
    a = cache.fetch_context("g", "a", 0, connection_id="c1")
    b = cache.fetch_context("h", "a", 0, connection_id="c1")
    c = cache.fetch_context("g", "c", 0, connection_id="c2")
    assert sorted(s.key for s in cache.connection_closed("c1")) == [("g", "a"), ("h", "a")]
    assert sorted(s.key for s in closed) == [a.key, b.key]
    assert cache.sessions() == [c]
    assert cache.connection_closed("c1") == []


def test_a_session_reopened_elsewhere_survives_the_old_connection():
    cache, closed = make()
    cache.fetch_context("g", "m", 0, connection_id="old")
    new = cache.fetch_context("g", "m", 0, connection_id="new")
    assert cache.connection_closed("old") == [] and closed == []
    assert cache.get("g", "m") is new
    assert cache.connection_closed("new") == [new] and closed == [new]


def test_idle_sessions_are_evicted_only_when_configured():
    clock = Clock()
    cache, closed = make(now_ms=clock)
    cache.fetch_context("g", "m", 0)
    clock.now = 10**9
    assert cache.evict_idle() == [] and len(cache) == 1

    cache, closed = make(now_ms=clock, idle_timeout_ms=120_000, max_sessions=2)
    a = cache.fetch_context("g", "a", 0)
    cache.fetch_context("g", "b", 0)
    clock.now += 100_000
    cache.acknowledge_context("g", "b", 1)        # use keeps b alive
    clock.now += 20_000
    assert cache.evict_idle() == [a] and closed == [a]
    cache.fetch_context("g", "d", 0)
    clock.now += 99_999
    assert cache.evict_idle() == []
    clock.now += 1
    # at the limit, a new session first evicts idle ones
    assert cache.fetch_context("g", "c", 0).epoch == 1
    assert [s.member_id for s in closed] == ["a", "b"]
    assert sorted(s.member_id for s in cache.sessions()) == ["c", "d"]
