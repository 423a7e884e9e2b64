"""Client quotas without a broker: Kafka's rate and throttle arithmetic, precedence, validation, filters.

The expected figures of the manager tests are those of Kafka's own ``ClientQuotaManagerTest`` and
``ControllerMutationQuotaManagerTest`` (same quotas, same clock steps, same answers).
"""
from __future__ import annotations

import math
import time
from types import SimpleNamespace as NS

import pytest

from broker.quotas import Quotas, RequestQuota
from broker.quotas.manager import DEFAULT, ClientQuotaManager, sanitize
from broker.quotas.sensors import LONG_MAX, SampledStat
from broker.quotas.store import ClientQuotaStore, QuotaRequestError, entity_str
from protocol.errors import Errors


class Clock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


def produce_manager(samples: int = 11) -> ClientQuotaManager:
    return ClientQuotaManager("Produce", samples, 1)


def record(m: ClientQuotaManager, user: str, client: str, value: float, now: int) -> int:
    return m.record(m.sensor(user, client, now), value, now)


# ---------------------------------------------------------------------------------------------- rates
def test_quota_violation_throttle_times_are_kafkas():
    """ClientQuotaManagerTest.testQuotaViolation: 500 B/s by default client-id."""
    m, clock = produce_manager(), Clock()
    m.update_quota(None, DEFAULT, 500)
    for _ in range(10):
        assert record(m, "ANONYMOUS", "unknown", 400, clock()) == 0
        clock.sleep(1000)
    clock.sleep(500)
    # 400*10 + 2000 + 300 = 6300 / 10.5 s = 600 B/s; (600 - 500) / 500 * 10.5 s = 2100 ms
    throttle = record(m, "ANONYMOUS", "unknown", 2300, clock())
    assert throttle == 2100
    clock.sleep(throttle)
    for _ in range(10):
        record(m, "ANONYMOUS", "unknown", 400, clock())
        clock.sleep(1000)
    assert record(m, "ANONYMOUS", "unknown", 0, clock()) == 0  # the bursty sample rolled over


def test_fresh_sensor_allows_samples_minus_one_windows_at_once():
    """Rate.windowSize: never less than (samples - 1) windows, so a new client may use 10 s of quota."""
    m, clock = produce_manager(), Clock()
    m.update_quota(None, "c", 1000)
    assert record(m, "u", "c", 10_000, clock()) == 0
    assert record(m, "u", "c", 1, clock()) > 0
    assert m.max_value_in_window("u", "c") == 10_000


def test_request_quota_throttle_is_bounded_by_one_window():
    m, clock = ClientQuotaManager("Request", 11, 1, max_throttle_ms=1000), Clock()
    m.update_quota(None, "c", 1.0)  # 1 % of the loop
    assert record(m, "u", "c", 500.0, clock()) == 1000


def test_measurement_without_purge_matches_measure():
    stat, clock = SampledStat(11, 1000), Clock()
    for i in range(30):
        stat.record(100 * i, clock())
        clock.sleep(700)
        if i % 5 == 0:
            clock.sleep(12_000)  # whole windows go obsolete
        assert stat.rate_value(clock()) == pytest.approx(stat.rate(clock()))


class KafkaRate:
    """Kafka's SampledStat + Rate written out plainly (purge and sum on every measure): the oracle
    for the incremental SampledStat."""

    def __init__(self, samples: int, window_ms: int):
        self.n, self.w, self.samples, self.current = samples, window_ms, [], 0

    def record(self, value, now):
        if not self.samples:
            self.samples.append([0.0, now, now])  # value, start, last
        s = self.samples[self.current]
        if now - s[1] >= self.w:
            self.current = (self.current + 1) % (self.n + 1)
            if self.current >= len(self.samples):
                s = [0.0, now, now]
                self.samples.append(s)
            else:
                s = self.samples[self.current]
                s[:] = [0.0, now, now]
        s[0] += value
        s[2] = now

    def measure(self, now):
        for s in self.samples:
            if now - s[2] >= self.n * self.w:
                s[:] = [0.0, now, now]
        if not self.samples:
            self.samples.append([0.0, now, now])
        elapsed = now - min(s[1] for s in self.samples)
        full = elapsed // self.w
        if full < self.n - 1:
            elapsed += (self.n - 1 - full) * self.w
        return sum(s[0] for s in self.samples) / (max(elapsed, 1) / 1000.0)


@pytest.mark.parametrize("samples,window", [(11, 1000), (2, 1000), (3, 500)])
def test_incremental_rate_equals_kafkas_plain_algorithm(samples, window):
    import random

    rnd = random.Random(samples * window)
    ours, oracle, now = SampledStat(samples, window), KafkaRate(samples, window), 1_000_000
    for _ in range(5000):
        now += rnd.choice((0, 1, 7, 50, 300, 999, 1000, 2500, 15000))
        value = rnd.choice((16384.0, 100.0, -16384.0, 0.0))
        ours.record(value, now)
        oracle.record(value, now)
        if rnd.random() < 0.7:
            assert ours.rate(now) == pytest.approx(oracle.measure(now), rel=1e-9, abs=1e-6)


def test_token_bucket_strict_and_permissive():
    """ControllerMutationQuotaManagerTest: 10 mutations/s, bursts of 11 windows x 1 s."""
    q, clock = Quotas(ClientQuotaStore(None), clock=None), Clock()
    q.clock = clock
    cm = q.controller_mutation
    cm.update_quota(None, "c", 10.0)
    s = cm.sensor("u", "c", clock())
    assert cm.mutation_exhausted_ms(s, clock()) == 0
    cm.record_mutations(s, 120, clock())  # 110 credits - 120 = -10: one second to refill to zero
    assert cm.mutation_exhausted_ms(s, clock()) == 1000
    rq = RequestQuota(q, NS(throttle=lambda ms: None), "u", "c", 0)
    strict = rq.mutations(version=6, strict_since=6)
    assert strict.record(5) is False and strict.throttle_time() == 1000
    clock.sleep(400)
    assert strict.throttle_time() == 600  # what is left when the answer goes out
    clock.sleep(600)
    assert strict.record(5) is True and strict.throttle_time() == 0  # admitted at zero credits, not throttled
    permissive = rq.mutations(version=5, strict_since=6)
    assert permissive.record(20) is True
    assert permissive.throttle_time() == 2500  # -25 credits at 10/s


# ---------------------------------------------------------------------------------------------- precedence
def check(m, user, client, bound, value, throttled, now):
    assert m.quota(user, client) == bound
    assert m.max_value_in_window(user, client) == (bound * 10 if bound != LONG_MAX else math.inf)
    ms = record(m, user, client, value * 11, now)
    assert (ms > 0) == throttled, (user, client, ms)


def test_quota_config_precedence_as_kafka():
    """ClientQuotaManagerTest.testQuotaConfigPrecedence, step for step."""
    m, now = produce_manager(), 1_000_000
    for user, client, q in ((DEFAULT, None, 1000), (None, DEFAULT, 2000), (DEFAULT, DEFAULT, 3000),
                            ("userA", None, 4000), ("userA", "client1", 5000), ("userB", None, 6000),
                            ("userB", "client1", 7000), ("userB", DEFAULT, 8000), ("userC", None, 10000),
                            (None, "client1", 9000)):
        m.update_quota(user, client, q)
    for case in (("userA", "client1", 5000, 4500, False), ("userA", "client2", 4000, 4500, True),
                 ("userA", "client3", 4000, 0, True), ("userA", "client1", 5000, 0, False),
                 ("userB", "client1", 7000, 8000, True), ("userB", "client2", 8000, 7000, False),
                 ("userB", "client3", 8000, 7000, False), ("userD", "client1", 3000, 3500, True),
                 ("userD", "client2", 3000, 2500, False), ("userE", "client1", 3000, 2500, False)):
        check(m, *case, now)
    m.update_quota(DEFAULT, DEFAULT, None)
    for case in (("userD", "client1", 1000, 0, False), ("userE", "client4", 1000, 1500, True),
                 ("userF", "client4", 1000, 800, False), ("userF", "client5", 1000, 800, True)):
        check(m, *case, now)
    m.update_quota(DEFAULT, None, None)
    for case in (("userF", "client4", 2000, 0, False), ("userF", "client5", 2000, 0, False),
                 ("userF", "client5", 2000, 2500, True), ("userG", "client5", 2000, 0, True)):
        check(m, *case, now)
    m.update_quota("userA", None, 8000)
    m.update_quota("userA", "client1", 10000)
    for case in (("userA", "client2", 8000, 0, False), ("userA", "client2", 8000, 4500, True),
                 ("userA", "client1", 10000, 0, False), ("userA", "client1", 10000, 6000, True)):
        check(m, *case, now)
    m.update_quota("userA", "client1", None)
    check(m, "userA", "client6", 8000, 0, True, now)
    m.update_quota("userA", "client6", 11000)
    check(m, "userA", "client6", 11000, 8500, False, now)
    m.update_quota("userA", DEFAULT, 12000)
    m.update_quota("userA", "client6", None)
    check(m, "userA", "client6", 12000, 4000, True, now)


def test_single_level_tags_share_or_separate_sensors():
    m = produce_manager()
    m.update_quota(None, DEFAULT, 100)
    assert m.tags("alice", "a") == ("", "a") and m.tags("bob", "a") == ("", "a")  # client id across users
    m.update_quota(None, DEFAULT, None)
    m.update_quota("alice", None, 100)
    assert m.tags("alice", "a") == ("alice", "") == m.tags("alice", "b")  # one user, every client
    assert m.quota("bob", "a") == LONG_MAX and not m.enabled_levels & 1


def test_sanitized_user_labels_as_kafka():
    assert sanitize("CN=a b,O=*~") == "CN%3Da%20b%2CO%3D%2A%7E"


# ---------------------------------------------------------------------------------------------- validation
def entry(pairs, ops):
    return NS(entity=[NS(entity_type=t, entity_name=n) for t, n in pairs],
              ops=[NS(key=k, value=v, remove=v is None) for k, v in ops])


@pytest.mark.parametrize("pairs,ops,message", [
    ([], [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ([("group", "g")], [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ([("user", "")], [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ([("user", "u")], [("connection_creation_rate", 1.0)], "Invalid configuration key connection_creation_rate"),
    ([("user", "u")], [("producer_byte_rate", 0.0)], "Quota producer_byte_rate must be greater than 0"),
    ([("user", "u")], [("consumer_byte_rate", -5.0)], "Quota consumer_byte_rate must be greater than 0"),
    ([("client-id", "c")], [("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
    ([("client-id", "c")], [("producer_byte_rate", 1e19)], "Proposed value for producer_byte_rate is too large for a "
                                                          "LONG."),
    ([("ip", "127.0.0.1")], [("connection_creation_rate", 3e9)], "Proposed value for connection_creation_rate is "
                                                                 "too large for an INT."),
    ([("ip", "127.0.0.1"), ("user", "u")], [("connection_creation_rate", 1.0)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("ip", "no-such-host.invalid")], [("connection_creation_rate", 1.0)],
     "no-such-host.invalid is not a valid IP or resolvable host."),
    ([("user", "u")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})"),
])
def test_alter_validation_messages_are_kafkas(pairs, ops, message):
    store = ClientQuotaStore(None)
    decided = store.alter([entry(pairs, ops)], ip_valid=lambda name: name == "127.0.0.1")
    assert [(code, msg) for _, code, msg in decided.results] == [(Errors.INVALID_REQUEST, message)]
    assert decided.records == [] and store.quotas == {}


def test_alter_applies_removes_and_skips_unchanged():
    store, seen = ClientQuotaStore(None), []
    store.add_listener(lambda e, k, v: seen.append((e, k, v)))
    both = [("user", "u"), ("client-id", None)]
    d = store.alter([entry(both, [("request_percentage", 25.5), ("producer_byte_rate", 1024.0)])])
    store.replay(d.records)
    assert store.quotas == {(("client-id", None), ("user", "u")): {"request_percentage": 25.5,
                                                                   "producer_byte_rate": 1024.0}}
    d = store.alter([entry(both, [("request_percentage", 25.5), ("producer_byte_rate", None),
                                  ("consumer_byte_rate", None)])])  # unchanged, removed, absent
    assert d.records == [((("client-id", None), ("user", "u")), "producer_byte_rate", None)]
    store.replay(d.records)
    assert len(seen) == 3


def test_a_change_that_cannot_be_saved_is_not_applied(tmp_path):
    meta = tmp_path / "meta"
    meta.mkdir()
    store, seen = ClientQuotaStore(str(meta)), []
    store.add_listener(lambda e, k, v: seen.append((e, k, v)))
    d = store.alter([entry([("user", "u")], [("producer_byte_rate", 1024.0)])])
    store.replay(d.records)
    meta.rename(tmp_path / "gone")  # the next write fails (as on a full or read-only disk)
    d = store.alter([entry([("user", "u")], [("producer_byte_rate", 2048.0)])])
    with pytest.raises(OSError):
        store.replay(d.records)
    assert store.quotas == {(("user", "u"),): {"producer_byte_rate": 1024.0}} and len(seen) == 1
    assert ClientQuotaStore(str(tmp_path / "gone")).quotas == store.quotas  # what is saved is what applies


def test_duplicate_entity_keeps_the_first_change_and_reports_an_error():
    """As ClientQuotaControlManager: the first entry's records stand, its result is overwritten."""
    store = ClientQuotaStore(None)
    e1, e2 = entry([("client-id", "c"), ("user", "u")], [("producer_byte_rate", 10.0)]), \
        entry([("user", "u"), ("client-id", "c")], [("consumer_byte_rate", 10.0)])
    d = store.alter([e1, e2])
    assert len(d.results) == 1 and d.results[0][1] == Errors.INVALID_REQUEST
    assert d.results[0][2] == "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=u})"
    assert [r[1] for r in d.records] == ["producer_byte_rate"]


def test_java_map_order_in_messages():
    assert entity_str([("user", "u"), ("client-id", None)]) == "ClientQuotaEntity(entries={client-id=null, user=u})"


# ---------------------------------------------------------------------------------------------- describe
def comp(t, match_type, match=None):
    return NS(entity_type=t, match_type=match_type, match=match)


@pytest.fixture
def filled():
    store = ClientQuotaStore(None)
    store.replay([((("user", "alice"),), "producer_byte_rate", 1.0),
                  ((("user", None),), "producer_byte_rate", 2.0),
                  ((("client-id", "app"), ("user", "alice")), "consumer_byte_rate", 3.0),
                  ((("client-id", "app"),), "request_percentage", 4.0),
                  ((("ip", None),), "connection_creation_rate", 5.0)], save=False)
    return store


def names(found):
    return [tuple(sorted(dict(e).items())) for e, _ in found]


def test_describe_filters(filled):
    assert len(filled.describe([], strict=False)) == 5
    assert filled.describe([], strict=True) == []
    assert names(filled.describe([comp("user", 0, "alice")], False)) == [
        (("client-id", "app"), ("user", "alice")), (("user", "alice"),)]
    assert names(filled.describe([comp("user", 0, "alice")], True)) == [(("user", "alice"),)]
    assert names(filled.describe([comp("user", 1)], True)) == [(("user", None),)]
    assert names(filled.describe([comp("user", 2)], True)) == [(("user", None),), (("user", "alice"),)]
    assert names(filled.describe([comp("client-id", 2), comp("user", 2)], True)) == [
        (("client-id", "app"), ("user", "alice"))]
    assert names(filled.describe([comp("ip", 1)], False)) == [(("ip", None),)]


@pytest.mark.parametrize("components,code,message", [
    ([comp("", 2)], Errors.INVALID_REQUEST, "Invalid empty entity type."),
    ([comp("user", 2), comp("user", 0, "a")], Errors.INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([comp("group", 2)], Errors.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([comp("user", 0)], Errors.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([comp("user", 1, "x")], Errors.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([comp("user", 2, "x")], Errors.INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([comp("user", 7)], Errors.INVALID_REQUEST, "Unknown match type 7"),
    ([comp("ip", 2), comp("user", 2)], Errors.INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
])
def test_describe_errors_are_kafkas(filled, components, code, message):
    with pytest.raises(QuotaRequestError) as e:
        filled.describe(components, False)
    assert (e.value.code, e.value.message) == (code, message)


# ---------------------------------------------------------------------------------------------- persistence
def test_store_survives_reload_and_feeds_managers(tmp_path):
    store = ClientQuotaStore(str(tmp_path))
    store.replay(store.alter([entry([("client-id", "slow")], [("producer_byte_rate", 1048576.0)]),
                              entry([("user", None)], [("consumer_byte_rate", 2048.0)])]).records)
    again = Quotas(ClientQuotaStore(str(tmp_path)))
    assert again.active
    assert again.produce.quota("x", "slow") == 1048576.0
    assert again.fetch.quota("anyone", "c") == 2048.0
    assert again.request.quota("anyone", "c") == LONG_MAX and not again.request.enabled


def test_unreadable_file_stops_start_up(tmp_path):
    (tmp_path / ClientQuotaStore.FILE).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable client quota file"):
        ClientQuotaStore(str(tmp_path))


# ---------------------------------------------------------------------------------------------- request timing
async def test_timed_counts_running_steps_not_waiting():
    import asyncio

    q = Quotas(ClientQuotaStore(None))
    q.request.update_quota(None, DEFAULT, 1000.0)
    rq = RequestQuota(q, NS(throttle=lambda ms: None), "u", "c", 0)

    async def handler():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:  # 20 ms on the loop
            pass
        await asyncio.sleep(0.2)  # 200 ms waiting
        return "done"

    assert await rq.timed(handler()) == "done"
    assert 0.02 <= rq.busy < 0.15
