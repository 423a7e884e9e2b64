"""The fetch-session cache's eviction rules (Kafka's FetchSessionCacheShard.tryEvict), with a fake clock."""
from __future__ import annotations

from broker.fetch_sessions import EVICTION_MS, FetchSessionCache
from protocol.errors import Errors


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


def test_a_full_cache_of_fresh_sessions_gives_no_session():
    clock = Clock()
    cache = FetchSessionCache(2, now_ms=clock)
    a, b = cache.open(True, 3), cache.open(True, 3)
    assert cache.open(True, 100) is None
    assert {a.id, b.id} == {s for s in cache._sessions}


def test_a_session_unused_for_two_minutes_is_evicted():
    clock = Clock()
    cache = FetchSessionCache(2, now_ms=clock)
    a, b = cache.open(True, 3), cache.open(True, 3)
    clock.now += EVICTION_MS // 2
    assert cache.resolve(b.id, 1, True)[0] == Errors.NONE  # b is used, a is not
    clock.now += EVICTION_MS // 2 + 1
    c = cache.open(True, 1)
    assert c is not None
    assert cache.resolve(a.id, 1, True)[0] == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert cache.resolve(b.id, 2, True)[0] == Errors.NONE


def test_an_old_session_is_evicted_only_by_a_session_at_least_as_large():
    clock = Clock()
    cache = FetchSessionCache(2, now_ms=clock)
    small, big = cache.open(True, 2), cache.open(True, 10)
    for _ in range(3):  # both stay in use, but were created long ago
        clock.now += EVICTION_MS // 2
        for s in (small, big):
            assert cache.resolve(s.id, s.epoch, True)[0] == Errors.NONE
    assert cache.open(True, 1) is None  # smaller than every old session: nothing evicted
    newer = cache.open(True, 5)  # larger than the smallest old one: it goes
    assert newer is not None
    assert cache.resolve(small.id, small.epoch, True)[0] == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_topic_addressing_must_match_the_session():
    cache = FetchSessionCache(4, now_ms=Clock())
    s = cache.open(False, 1)
    assert cache.resolve(s.id, 1, True)[0] == Errors.FETCH_SESSION_TOPIC_ID_ERROR
    assert cache.resolve(s.id, 1, False)[0] == Errors.NONE  # the error left the session as it was
