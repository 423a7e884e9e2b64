"""Client quotas as Kafka 4.4 enforces them (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599).

Parts:

| module | Kafka | what |
|---|---|---|
| ``store.py`` | ``ClientQuotaControlManager``, ``ClientQuotasImage`` | entities and values: AlterClientQuotas validation, DescribeClientQuotas filters, ``meta/client-quotas.json`` |
| ``manager.py`` | ``ClientQuotaManager`` + its ``DefaultQuotaCallback`` | one manager per quota type: precedence, metric tags, sensors |
| ``sensors.py`` | ``SampledStat``, ``Rate``, ``Avg``, ``TokenBucket``, ``QuotaUtils`` | the windows and the throttle-time formula |
| here | ``KafkaApis`` / ``RequestHandlerHelper`` quota calls | :class:`Quotas` (the component) and :class:`RequestQuota` (one request's accounting) |

Enforcement (KIP-219): a request that takes a client over its quota is answered at once with
``throttle_time_ms`` set, and the connection is then muted for that long
(``server.Connection.throttle``): nothing more is read or handled from it, so a client that
ignores the field is held all the same.  What is counted, as ``KafkaApis``:

- Produce: the request's size, after the append (``producer_byte_rate``);
- Fetch: the response's record bytes (``consumer_byte_rate``); a fetch that would be throttled
  (by bytes or request time) is answered empty and its bytes are not counted, and MaxBytes is
  capped at what one window allows (``maxValueInQuotaWindow``);
- ShareFetch: the same cap and count, but the acquired records are sent (see the README's
  deviations: Kafka 4.4 drops them, leaving them locked until their acquisition lock expires);
- every request but SASL's: handling time on the event loop, as a percentage of one second
  (``request_percentage``; ``ClientRequestQuotaManager``, throttle at most one window; Produce
  with acks=0 is exempt);
- CreateTopics (strict from v6), DeleteTopics (v5), CreatePartitions (v3): partitions created or
  deleted, in a token bucket (``controller_mutation_rate``; ``ControllerMutationQuotaManager``):
  a strict request's topic is refused with THROTTLING_QUOTA_EXCEEDED while the bucket is empty,
  older versions are accepted and throttled.

Nothing is counted while no quota of a type exists (``quotasEnabled``): :attr:`Quotas.active` is
one attribute test on the request path, and the request timing wrapper exists only while a
``request_percentage`` quota does.
"""
from __future__ import annotations

import math
import time

from broker.quotas.manager import DEFAULT, ClientQuotaManager, ClientSensor
from broker.quotas.store import (CLIENT_ID, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, IP, PRODUCER_BYTE_RATE,
                                 REQUEST_PERCENTAGE, USER, ClientQuotaStore)
from protocol.messages.registry import ApiKey

_UNCOUNTED = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})  # the login exchange (Kafka's network layer)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Quotas:
    """The quota managers and the store that feeds them (``ctx.components.quotas``)."""

    def __init__(self, store: ClientQuotaStore, samples: int = 11, window_s: int = 1, controller_samples: int = 11,
                 controller_window_s: int = 1, clock=monotonic_ms):
        self.store = store
        self.clock = clock
        self.produce = ClientQuotaManager("Produce", samples, window_s)
        self.fetch = ClientQuotaManager("Fetch", samples, window_s)
        self.request = ClientQuotaManager("Request", samples, window_s, max_throttle_ms=window_s * 1000)
        self.controller_mutation = ClientQuotaManager("ControllerMutation", controller_samples, controller_window_s)
        self.by_key = {PRODUCER_BYTE_RATE: self.produce, CONSUMER_BYTE_RATE: self.fetch,
                       REQUEST_PERCENTAGE: self.request, CONTROLLER_MUTATION_RATE: self.controller_mutation}
        self.active = False  # some quota of some type exists; written by _changed
        store.replay_to(self._changed)
        store.add_listener(self._changed)

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request, self.controller_mutation

    def _changed(self, entity, key: str, value: float | None) -> None:
        """A record of the store was applied: the manager of ``key`` takes it (ClientQuotaMetadataManager)."""
        manager = self.by_key.get(key)
        names = dict(entity)
        if manager is None or IP in names:
            return  # connection_creation_rate: stored and described, not enforced (README)
        user = (DEFAULT if names[USER] is None else names[USER]) if USER in names else None
        client = (DEFAULT if names[CLIENT_ID] is None else names[CLIENT_ID]) if CLIENT_ID in names else None
        manager.update_quota(user, client, value)
        self.active = any(m.enabled for m in self.managers())

    def start(self, connection, api_key: int, principal: str, client_id: str | None,
              size: int) -> "RequestQuota | None":
        """The accounting of one request, or None when it is not counted."""
        if api_key in _UNCOUNTED:
            return None
        return RequestQuota(self, connection, principal.partition(":")[2], client_id or "", size)


class RequestQuota:
    """One request's quota accounting (``ctx.quota``; None while no quota is configured).

    Handlers call :meth:`bandwidth` (Produce, ShareFetch), :meth:`fetch_throttled` (Fetch) or
    :meth:`mutations` (topic creation/deletion); the pipeline calls :meth:`finish`, which takes the
    request-time quota, picks the longest throttle, puts it in the response and mutes the connection.
    """

    __slots__ = ("quotas", "connection", "user", "client_id", "size", "busy", "step_started", "request_ms",
                 "request_sensor", "exempt", "byte_ms", "byte_manager", "byte_sensor", "mutation")

    def __init__(self, quotas: Quotas, connection, user: str, client_id: str, size: int):
        self.quotas = quotas
        self.connection = connection
        self.user = user
        self.client_id = client_id
        self.size = size  # the request's bytes (header and body): what Produce counts
        self.busy = 0.0  # seconds the handler ran on the loop so far (timed only with a request quota)
        self.step_started = 0.0  # perf_counter at the start of the handler's running step, 0 between steps
        self.request_ms = -1  # the request quota's throttle, once taken (-1: not yet)
        self.request_sensor: ClientSensor | None = None  # the request quota's sensor, once taken
        self.exempt = False  # Produce acks=0: no request quota
        self.byte_ms = 0
        self.byte_manager: ClientQuotaManager | None = None
        self.byte_sensor: ClientSensor | None = None
        self.mutation: MutationQuota | None = None

    # ------------------------------------------------------------------ what handlers call
    def bandwidth(self, manager: ClientQuotaManager, nbytes: int) -> int:
        """Count ``nbytes`` against ``manager``'s quota; the throttle time it calls for."""
        if not manager.enabled_levels:
            return 0
        now = self.quotas.clock()
        s = manager.sensor(self.user, self.client_id, now)
        self.byte_manager, self.byte_sensor = manager, s
        self.byte_ms = manager.record(s, nbytes, now)
        return self.byte_ms

    def max_fetch_bytes(self, max_bytes: int) -> int:
        """MaxBytes capped at what the fetch quota allows in one go (``maxValueInQuotaWindow``)."""
        fetch = self.quotas.fetch
        if not fetch.enabled:
            return max_bytes
        cap = fetch.max_value_in_window(self.user, self.client_id)
        if math.isnan(cap):  # a NaN quota (AlterClientQuotas accepts it, as Kafka): Java's (int) NaN is 0
            return 0
        return max_bytes if math.isinf(cap) or cap >= max_bytes else max(int(cap), 0)

    def fetch_throttled(self, nbytes: int) -> bool:
        """Fetch (KafkaApis): take the request quota and count the response bytes; when either calls
        for a throttle the bytes are taken back and the caller answers with an empty response."""
        request_ms = self.request_throttle_ms()
        byte_ms = self.bandwidth(self.quotas.fetch, nbytes)
        if max(request_ms, byte_ms) <= 0:
            return False
        if self.byte_sensor is not None:
            self.quotas.fetch.record_no_throttle(self.byte_sensor, -nbytes, self.quotas.clock())
        return True

    def mutations(self, version: int, strict_since: int) -> "MutationQuota | None":
        """The controller mutation quota of a topic request (None: unbounded), strict from ``strict_since``."""
        manager = self.quotas.controller_mutation
        if not manager.enabled:
            return None
        now = self.quotas.clock()
        self.mutation = MutationQuota(self.quotas, manager.sensor(self.user, self.client_id, now),
                                      version >= strict_since)
        return self.mutation

    # ------------------------------------------------------------------ the pipeline
    def request_throttle_ms(self) -> int:
        """Take the request quota once: handling time so far, as a percentage of a second."""
        if self.request_ms < 0:
            manager = self.quotas.request
            if self.exempt or not manager.enabled_levels:
                self.request_ms = 0
            else:
                busy = self.busy + (time.perf_counter() - self.step_started if self.step_started else 0.0)
                now = self.quotas.clock()
                s = self.request_sensor = manager.sensor(self.user, self.client_id, now)
                self.request_ms = manager.record(s, busy * 100.0, now)
        return self.request_ms

    def finish(self, resp) -> int:
        """After the handler: the throttle time (the longest that any quota calls for) goes into the
        response's ``throttle_time_ms`` and the connection is muted for it (KIP-219)."""
        request_ms = self.request_ms if self.request_ms >= 0 else self.request_throttle_ms()
        mutation_ms = self.mutation.throttle_time() if self.mutation is not None else 0
        ms = self.byte_ms if self.byte_ms > request_ms else request_ms
        if mutation_ms > ms:
            ms = mutation_ms
        if ms <= 0:
            return 0
        now = self.quotas.clock()
        if self.byte_ms > request_ms and self.byte_ms >= mutation_ms:
            ClientQuotaManager.throttled(self.byte_sensor, ms, now)
        elif mutation_ms > request_ms:
            ClientQuotaManager.throttled(self.mutation.sensor, ms, now)
        else:
            ClientQuotaManager.throttled(self.request_sensor, ms, now)
        if resp is not None and "throttle_time_ms" in getattr(type(resp), "__slots__", ()):
            resp.throttle_time_ms = ms
        self.connection.throttle(ms)
        return ms

    def timed(self, coro):
        """``coro``, with its running time (not its waiting time) added to :attr:`busy` while a request
        quota exists."""
        return _Timed(coro, self) if self.quotas.request.enabled else coro


class MutationQuota:
    """``StrictControllerMutationQuota`` / ``PermissiveControllerMutationQuota`` of one request."""

    __slots__ = ("quotas", "sensor", "strict", "last_throttle_ms", "recorded_at")

    def __init__(self, quotas: Quotas, sensor: ClientSensor, strict: bool):
        self.quotas = quotas
        self.sensor = sensor
        self.strict = strict
        self.last_throttle_ms = 0
        self.recorded_at = 0

    def record(self, partitions: int) -> bool:
        """Count ``partitions`` created or deleted; False when a strict quota refuses them
        (the topic gets THROTTLING_QUOTA_EXCEEDED)."""
        manager = self.quotas.controller_mutation
        now = self.quotas.clock()
        if self.strict:
            ms = manager.mutation_exhausted_ms(self.sensor, now)
            if ms > 0:
                self.last_throttle_ms, self.recorded_at = ms, now
                return False
            manager.record_mutations(self.sensor, partitions, now)
            return True
        manager.record_mutations(self.sensor, partitions, now)
        ms = manager.mutation_exhausted_ms(self.sensor, now)
        if ms > 0:
            self.last_throttle_ms, self.recorded_at = ms, now
        return True

    def throttle_time(self) -> int:
        """What is left of the last throttle time (``AbstractControllerMutationQuota.throttleTime``)."""
        if not self.last_throttle_ms:
            return 0
        return max(0, self.last_throttle_ms - (self.quotas.clock() - self.recorded_at))


class _Timed:
    """Awaits a coroutine step by step, adding the time of each step to ``quota.busy``: the time the
    request held the event loop, not the time it waited (long polls, rebalances, fsyncs), as Kafka
    counts request-handler thread time and not purgatory time."""

    __slots__ = ("coro", "quota")

    def __init__(self, coro, quota: RequestQuota):
        self.coro = coro
        self.quota = quota

    def __await__(self):
        coro, q = self.coro, self.quota
        clock = time.perf_counter
        value, error = None, None
        while True:
            q.step_started = t0 = clock()
            try:
                future = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as e:
                q.busy += clock() - t0
                q.step_started = 0.0
                return e.value
            except BaseException:
                q.busy += clock() - t0
                q.step_started = 0.0
                raise
            q.busy += clock() - t0
            q.step_started = 0.0
            try:
                value, error = (yield future), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # cancellation and the like go into the handler
                value, error = None, e


def build(config, meta_dir: str | None, background=None) -> Quotas:
    """The component, from ``quota.window.*`` / ``controller.quota.window.*`` and the saved quotas."""
    return Quotas(ClientQuotaStore(meta_dir, background),
                  samples=config.get_int("quota.window.num", 11),
                  window_s=config.get_int("quota.window.size.seconds", 1),
                  controller_samples=config.get_int("controller.quota.window.num", 11),
                  controller_window_s=config.get_int("controller.quota.window.size.seconds", 1))
