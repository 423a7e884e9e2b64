"""One quota type per manager, as Kafka's ``ClientQuotaManager`` and its default quota callback.

A manager holds the quotas of one key (``producer_byte_rate`` for Produce, ``consumer_byte_rate``
for Fetch, ``request_percentage`` for Request, ``controller_mutation_rate`` for ControllerMutation)
by entity, and one sensor per *metric tags* ``(user, client-id)``: which tags a request is counted
under depends on which levels of quota exist (``DefaultQuotaCallback.quotaMetricTags``), so a user
quota is shared by all that user's clients, a ``<user, client-id>`` quota is that pair's alone, and
a ``<default>`` quota gives every user (or client id) a sensor of its own. Precedence, most
specific first (``ClientQuotaManager``'s javadoc)::

    /users/<user>/clients/<client-id>   /users/<user>/clients/<default>   /users/<user>
    /users/<default>/clients/<client-id>   /users/<default>/clients/<default>   /users/<default>
    /clients/<client-id>   /clients/<default>

An entity part is ``None`` (absent), :data:`DEFAULT` (the ``<default>`` entity: a null name on the
wire) or a name.  Users are compared by name (Kafka compares URL-encoded names: the same thing);
metric labels carry the URL-encoded user as Kafka's tags do.  Sensors unused for an hour are dropped
(``INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS``).
"""
from __future__ import annotations

import math
from urllib.parse import quote

from broker.quotas.sensors import LONG_MAX, AvgStat, SampledStat, TokenBucket, java_round, throttle_time_ms


class _Default:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT = _Default()  # the <default> user or client id (a null entity name on the wire)

CLIENT_ID_LEVEL, USER_LEVEL, USER_CLIENT_ID_LEVEL = 1, 2, 4  # ClientQuotaManager's quota type bits
SENSOR_EXPIRY_MS = 3600 * 1000
THROTTLE_SAMPLES, THROTTLE_WINDOW_MS = 2, 30000  # MetricConfig defaults: the throttle-time Avg


def _nothing() -> None:
    pass


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize`` (URL encoding, ``*`` and space percent-encoded) for metric tags."""
    return quote(name, safe="-_.*").replace("*", "%2A").replace("~", "%7E")


class ClientSensor:
    """The statistics of one ``(user, client-id)`` tag pair: the quota's stat and the throttle times."""

    __slots__ = ("tags", "bound", "free", "stat", "bucket", "throttle", "throttle_ms_total", "created")

    def __init__(self, tags: tuple[str, str], bound: float, samples: int, window_ms: int, now: int,
                 bucket: bool = False):
        self.tags = tags
        # Rate: bytes, request-time % (measured after each event), or mutations (the bucket is the quota)
        self.stat = SampledStat(samples, window_ms, purging=not bucket)
        self.bound = bound  # the quota in force for these tags (LONG_MAX: none); written by set_bound
        self.free = 0.0  # a stat total at or under this is under the quota whatever the window; by set_bound
        self.set_bound(bound)
        self.bucket = TokenBucket(samples, window_ms, now) if bucket else None  # controller mutations
        self.throttle = AvgStat(THROTTLE_SAMPLES, THROTTLE_WINDOW_MS)  # Avg of throttle times (ms)
        self.throttle_ms_total = 0  # ours: a counter for Prometheus' rate()
        self.created = now

    def set_bound(self, bound: float) -> None:
        """The quota in force for these tags."""
        self.bound = bound
        self.free = bound * self.stat.min_window_s()  # NaN for a NaN quota: never "free", the rate decides

    @property
    def last_used(self) -> int:
        """When a value was last recorded (Kafka's ``Sensor.lastRecordTime``), or the sensor created."""
        cur = self.stat.cur
        return self.created if cur is None else max(cur.last, self.created)


class ClientQuotaManager:
    """The quotas of one key and the sensors they are enforced with (one per quota type)."""

    def __init__(self, quota_type: str, samples: int, window_s: int, max_throttle_ms: int | None = None,
                 index: int = 0):
        self.quota_type = quota_type  # "Produce", "Fetch", "Request", "ControllerMutation" (QuotaType)
        self.samples = samples  # quota.window.num (controller.quota.window.num)
        self.window_ms = window_s * 1000  # quota.window.size.seconds (controller.quota.window.size.seconds)
        self.max_throttle_ms = max_throttle_ms  # the request quota's bound: one window
        # (user part, client part) -> quota; written by update_quota (the quota store's replay)
        self.overrides: dict[tuple, float] = {}
        self.enabled_levels = 0  # quotaTypesEnabled: bits of the levels that have quotas
        self._level_counts = {CLIENT_ID_LEVEL: 0, USER_LEVEL: 0, USER_CLIENT_ID_LEVEL: 0}
        # tags -> sensor; created by the first request under those tags, dropped after an hour unused
        self.sensors: dict[tuple[str, str], ClientSensor] = {}
        self._next_sweep = 0
        # Called whenever the sensor of a (user, client id) may be another one (a quota changed, sensors
        # expired): a sensor kept from sensor() is good until then (broker.quotas.ClientAccount)
        self.on_change = _nothing
        self.index = index  # this manager's place in a ClientAccount's sensor cache (given by Quotas)

    @property
    def enabled(self) -> bool:
        return self.enabled_levels != 0

    # ------------------------------------------------------------------ quotas
    def update_quota(self, user, client, value: float | None) -> None:
        """Set (or with None remove) the quota of the entity ``(user, client)``; re-bound the sensors."""
        key = (user, client)
        level = USER_CLIENT_ID_LEVEL if user is not None and client is not None else \
            USER_LEVEL if user is not None else CLIENT_ID_LEVEL
        present = key in self.overrides
        if value is not None and not present:
            self._level_counts[level] += 1
            self.enabled_levels |= level
        elif value is None and present:
            self._level_counts[level] -= 1
            if self._level_counts[level] == 0:
                self.enabled_levels &= ~level
        if value is None:
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = value
        for s in self.sensors.values():  # updateQuotaMetricConfigs: every sensor takes its new bound
            s.set_bound(self.limit(s.tags))
        self.on_change()  # the tags of a client may be others now

    def tags(self, user: str, client_id: str) -> tuple[str, str]:
        """``DefaultQuotaCallback.quotaMetricTags``: the sensor a request of ``user`` / ``client_id`` counts in."""
        levels = self.enabled_levels
        if levels in (0, CLIENT_ID_LEVEL):
            return "", client_id
        if levels == USER_LEVEL:
            return user, ""
        if levels == USER_CLIENT_ID_LEVEL:
            return user, client_id
        o = self.overrides
        if (user, client_id) in o or (user, DEFAULT) in o:
            return user, client_id
        if (user, None) in o:
            return user, ""
        if (DEFAULT, client_id) in o or (DEFAULT, DEFAULT) in o:
            return user, client_id
        if (DEFAULT, None) in o:
            return user, ""
        return "", client_id

    def limit(self, tags: tuple[str, str]) -> float:
        """``DefaultQuotaCallback.quotaLimit``: the quota for these tags, LONG_MAX when none applies."""
        user, client_id = tags
        o = self.overrides
        if user and client_id:
            candidates = ((user, client_id), (user, DEFAULT), (DEFAULT, client_id), (DEFAULT, DEFAULT))
        elif user:
            candidates = ((user, None), (DEFAULT, None))
        elif client_id:
            candidates = ((None, client_id), (None, DEFAULT))
        else:
            return LONG_MAX
        for key in candidates:
            q = o.get(key)
            if q is not None:
                return q
        return LONG_MAX

    def quota(self, user: str, client_id: str) -> float:
        """The quota that applies to ``user`` / ``client_id`` (LONG_MAX: none)."""
        return self.limit(self.tags(user, client_id))

    # ------------------------------------------------------------------ sensors
    def sensor(self, user: str, client_id: str, now: int) -> ClientSensor:
        """The sensor a request of ``user`` / ``client_id`` counts in (created on first use); good until
        :attr:`on_change` is called."""
        tags = self.tags(user, client_id)
        s = self.sensors.get(tags)
        if s is None:
            if now >= self._next_sweep:
                self.expire(now)
            s = self.sensors[tags] = ClientSensor(tags, self.limit(tags), self.samples, self.window_ms, now,
                                                  bucket=self.quota_type == "ControllerMutation")
        return s

    def expire(self, now: int) -> None:
        """Drop the sensors unused for an hour (Kafka's sensor expiry)."""
        self._next_sweep = now + 60_000
        dead = [t for t, s in self.sensors.items() if now - s.last_used >= SENSOR_EXPIRY_MS]
        for tags in dead:
            del self.sensors[tags]
        if dead:
            self.on_change()  # a client holding one of them takes a new one

    def record(self, s: ClientSensor, value: float, now: int) -> int:
        """``recordAndGetThrottleTimeMs``: count ``value``; the throttle time if the rate is now over the quota."""
        if s.stat.record(value, now) <= s.free:
            return 0  # under the quota whatever the window (it is never shorter than samples - 1 windows)
        return self.throttle_ms(s, now)

    def throttle_ms(self, s: ClientSensor, now: int) -> int:
        """The throttle time the rate of ``s`` calls for (0 when it is within the quota)."""
        bound = s.bound
        observed = s.stat.rate(now)
        if observed <= bound or math.isnan(bound):
            return 0
        ms = throttle_time_ms(observed, bound, s.stat.window_size(now))
        return min(ms, self.max_throttle_ms) if self.max_throttle_ms is not None else ms

    def record_no_throttle(self, s: ClientSensor, value: float, now: int) -> None:
        s.stat.record(value, now)

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """``maxValueInQuotaWindow``: the most one request may take without being throttled for sure."""
        bound = self.quota(user, client_id)
        if bound == LONG_MAX:
            return math.inf
        return bound * (self.samples - 1) * self.window_ms / 1000.0

    @staticmethod
    def throttled(s: ClientSensor, ms: int, now: int) -> None:
        """The channel is muted for ``ms`` because of this quota (``ClientQuotaManager.throttle``'s metric)."""
        s.throttle.record(ms, now)
        s.throttle_ms_total += ms

    # ------------------------------------------------------------------ controller mutations
    def mutation_exhausted_ms(self, s: ClientSensor, now: int) -> int:
        """The token bucket's ``checkQuotas``: 0 while credits remain, else the time to refill to zero."""
        tokens = s.bucket.measure(s.bound, now)
        if tokens >= 0 or math.isnan(s.bound):
            return 0
        return java_round(-tokens / s.bound * 1000)  # ControllerMutationQuotaManager.throttleTimeMs

    def record_mutations(self, s: ClientSensor, permits: float, now: int) -> None:
        s.bucket.record(s.bound, permits, now)
        s.stat.record(permits, now)  # the mutation-rate metric

    # ------------------------------------------------------------------ /metrics
    def rows(self, now: int):
        """(user label, client-id label, sensor) per live sensor, for the exposition."""
        for (user, client_id), s in list(self.sensors.items()):
            yield sanitize(user), client_id, s

