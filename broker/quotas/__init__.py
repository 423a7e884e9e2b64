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

Cost while quotas exist: a connection keeps the sensors its client counts in
(:class:`ClientAccount`, until a quota changes or sensors expire), so a request looks up no
precedence; a request the server's fast path answers (Produce) is counted by
:meth:`Quotas.finish_fast` in one call, with the time the pipeline read for its timing.
"""
from __future__ import annotations

import math
import time

from broker.quotas.manager import DEFAULT, ClientQuotaManager, ClientSensor
from broker.quotas.store import (CLIENT_ID, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, IP, PRODUCER_BYTE_RATE,
                                 REQUEST_PERCENTAGE, USER, ClientQuotaStore)
from protocol.messages.registry import ApiKey

_UNCOUNTED = frozenset({int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)})  # the login (Kafka's network layer)
_floor = math.floor
_PRODUCE = int(ApiKey.PRODUCE)  # counted against producer_byte_rate (an int: cheaper to compare than the enum)
_PRODUCE_AT, _FETCH_AT, _REQUEST_AT, _MUTATION_AT = range(4)  # the managers' places in ClientAccount.sensors


def perf_ms() -> int:
    """Milliseconds of ``time.perf_counter``: the quotas' clock, the one the request pipeline times
    handlers with (so that the fast path passes its reading on: ``Quotas.finish_fast``)."""
    return _floor(time.perf_counter() * 1000.0)


class Quotas:
    """The quota managers and the store that feeds them (``ctx.components.quotas``)."""

    def __init__(self, store: ClientQuotaStore, samples: int = 11, window_s: int = 1, controller_samples: int = 11,
                 controller_window_s: int = 1, clock=perf_ms):
        self.store = store
        self.clock = clock
        self.produce = ClientQuotaManager("Produce", samples, window_s, index=_PRODUCE_AT)
        self.fetch = ClientQuotaManager("Fetch", samples, window_s, index=_FETCH_AT)
        self.request = ClientQuotaManager("Request", samples, window_s, max_throttle_ms=window_s * 1000,
                                          index=_REQUEST_AT)
        self.controller_mutation = ClientQuotaManager("ControllerMutation", controller_samples, controller_window_s,
                                                      index=_MUTATION_AT)
        self.by_key = {PRODUCER_BYTE_RATE: self.produce, CONSUMER_BYTE_RATE: self.fetch,
                       REQUEST_PERCENTAGE: self.request, CONTROLLER_MUTATION_RATE: self.controller_mutation}
        self.active = False  # some quota of some type exists; written by _changed
        # bumped whenever a manager's sensor for some client may be another one: a ClientAccount of an
        # older generation looks its sensors up again
        self.generation = 0
        for m in self.managers():
            m.on_change = self._next_generation
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

    def _next_generation(self) -> None:
        self.generation += 1

    def start(self, connection, api_key: int, principal: str, client_id: str | None,
              size: int) -> "RequestQuota | None":
        """The accounting of one request, or None when it is not counted."""
        if api_key in _UNCOUNTED:
            return None
        return RequestQuota(self._account(connection, principal, client_id), size if api_key == _PRODUCE else 0)

    def _account(self, connection, principal: str, client_id: str | None) -> "ClientAccount":
        """The connection's ClientAccount for this principal and client id (a new one when either changed)."""
        a = connection.quota_account
        if a is None or a.client_id != client_id or a.principal is not principal:
            a = connection.quota_account = ClientAccount(self, connection, principal, client_id)
        return a

    def finish_fast(self, connection, api_key: int, client_id: str | None, size: int, busy: float,
                    ended: float) -> int:
        """A request the server's fast path answered in one synchronous step of ``busy`` seconds that
        ended at the ``time.perf_counter`` reading ``ended`` (never a SASL one), counted as
        :class:`RequestQuota` counts it -- Produce: its size; any request: its time -- in one call, the
        client's sensors kept on the connection: the throttle time, the connection muted for it (the
        caller puts it in the response)."""
        a = self._account(connection, connection.principal, client_id)
        if a.generation != self.generation:  # its sensors are read directly below
            a._forget()
        now = _floor(ended * 1000.0)  # perf_ms() at ``ended``
        byte_ms = request_ms = 0
        produce = self.produce
        if api_key == _PRODUCE and produce.enabled_levels:
            s = a.sensors[_PRODUCE_AT]
            if s is None:
                s = a.sensor(produce, now)
            if s.stat.record(size, now) > s.free:  # manager.record without a call: the common case
                byte_ms = produce.throttle_ms(s, now)
        request = self.request
        if request.enabled_levels:
            s = a.sensors[_REQUEST_AT]
            if s is None:
                s = a.sensor(request, now)
            if s.stat.record(busy * 100.0, now) > s.free:
                request_ms = request.throttle_ms(s, now)
        if byte_ms <= 0 and request_ms <= 0:
            return 0
        if byte_ms > request_ms:
            return a.throttle(produce, byte_ms, now, None)
        return a.throttle(request, request_ms, now, None)


class ClientAccount:
    """The sensors one client of one connection counts in (``Connection.quota_account``: the
    principal and client id of its last request; replaced when either changes).

    :meth:`sensor` keeps each manager's answer until the quotas' ``generation`` moves (a quota
    changed, sensors expired), so a request costs no precedence lookup."""

    __slots__ = ("quotas", "connection", "principal", "client_id", "user", "generation", "sensors")

    def __init__(self, quotas: Quotas, connection, principal: str, client_id: str | None):
        self.quotas = quotas
        self.connection = connection
        self.principal = principal  # as the connection had it ("User:name"): compared by identity
        self.client_id = client_id  # as the request header had it (None: none)
        self.user = principal.partition(":")[2]
        self.generation = quotas.generation  # the sensors below are good while the quotas have this one
        self.sensors: list[ClientSensor | None] = [None] * 4  # by manager index (_*_AT), looked up on first use

    @property
    def client(self) -> str:
        """The client id as quotas know it ("" for none)."""
        return self.client_id or ""

    def sensor(self, manager: ClientQuotaManager, now: int) -> ClientSensor:
        """``manager.sensor`` for this client."""
        if self.generation != self.quotas.generation:
            self._forget()
        s = self.sensors[manager.index]
        if s is None:
            s = manager.sensor(self.user, self.client, now)
            if self.generation != self.quotas.generation:  # that expired sensors: the others may be gone
                self._forget()
            self.sensors[manager.index] = s
        return s

    def _forget(self) -> None:
        self.sensors = [None] * 4
        self.generation = self.quotas.generation

    def record(self, manager: ClientQuotaManager, value: float, now: int) -> int:
        """``manager.record`` in this client's sensor: the throttle time it calls for."""
        return manager.record(self.sensor(manager, now), value, now)

    def throttle(self, manager: ClientQuotaManager, ms: int, now: int, resp) -> int:
        """``ms`` of throttle called for by ``manager``'s quota: counted in its throttle-time metric, put in
        the response's ``throttle_time_ms`` (if ``resp`` is given and has it), the connection muted for it
        (KIP-219)."""
        ClientQuotaManager.throttled(self.sensor(manager, now), ms, now)
        if resp is not None and "throttle_time_ms" in getattr(type(resp), "__slots__", ()):
            resp.throttle_time_ms = ms
        self.connection.throttle(ms)
        return ms


class RequestQuota:
    """One request's quota accounting (``ctx.quota``; None while no quota is configured).

    Handlers call :meth:`bandwidth` (ShareFetch), :meth:`fetch_throttled` (Fetch) or :meth:`mutations`
    (topic creation/deletion); the pipeline calls :meth:`finish`, which counts a Produce request's size,
    takes the request-time quota, picks the longest throttle, puts it in the response and mutes the
    connection.
    """

    __slots__ = ("account", "produced", "busy", "step_started", "request_ms", "exempt", "byte_ms", "byte_manager",
                 "mutation")

    def __init__(self, account: ClientAccount, produced: int):
        self.account = account
        # Produce: the request's bytes (header and body), counted against producer_byte_rate by finish
        # (KafkaApis counts a Produce request's size once it is handled); 0 for other requests
        self.produced = produced
        self.busy = 0.0  # seconds the handler ran on the loop so far (timed only with a request quota)
        self.step_started = 0.0  # perf_counter at the start of the handler's running step, 0 between steps
        self.request_ms = -1  # the request quota's throttle, once taken (-1: not yet)
        self.exempt = False  # Produce acks=0: no request quota
        self.byte_ms = 0
        self.byte_manager: ClientQuotaManager | None = None  # the byte quota counted, if any
        self.mutation: MutationQuota | None = None

    # ------------------------------------------------------------------ what handlers call
    def bandwidth(self, manager: ClientQuotaManager, nbytes: int) -> int:
        """Count ``nbytes`` against ``manager``'s quota; the throttle time it calls for."""
        if not manager.enabled_levels:
            return 0
        a = self.account
        self.byte_manager = manager
        ms = self.byte_ms = a.record(manager, nbytes, a.quotas.clock())
        return ms

    def max_fetch_bytes(self, max_bytes: int) -> int:
        """MaxBytes capped at what the fetch quota allows in one go (``maxValueInQuotaWindow``)."""
        a = self.account
        fetch = a.quotas.fetch
        if not fetch.enabled:
            return max_bytes
        cap = fetch.max_value_in_window(a.user, a.client)
        if math.isnan(cap):  # a NaN quota (AlterClientQuotas accepts it, as Kafka): Java's (int) NaN is 0
            return 0
        return max_bytes if math.isinf(cap) or cap >= max_bytes else max(int(cap), 0)

    def fetch_throttled(self, nbytes: int) -> bool:
        """Fetch (KafkaApis): take the request quota and count the response bytes; when either calls
        for a throttle the bytes are taken back and the caller answers with an empty response."""
        quotas = self.account.quotas
        request_ms = self.request_throttle_ms()
        byte_ms = self.bandwidth(quotas.fetch, nbytes)
        if max(request_ms, byte_ms) <= 0:
            return False
        if self.byte_manager is not None:
            now = quotas.clock()
            quotas.fetch.record_no_throttle(self.account.sensor(quotas.fetch, now), -nbytes, now)
        return True

    def mutations(self, version: int, strict_since: int) -> "MutationQuota | None":
        """The controller mutation quota of a topic request (None: unbounded), strict from ``strict_since``."""
        a = self.account
        manager = a.quotas.controller_mutation
        if not manager.enabled:
            return None
        self.mutation = MutationQuota(a.quotas, a.sensor(manager, a.quotas.clock()), version >= strict_since)
        return self.mutation

    # ------------------------------------------------------------------ the pipeline
    def request_throttle_ms(self) -> int:
        """Take the request quota once: handling time so far, as a percentage of a second."""
        if self.request_ms < 0:
            a = self.account
            manager = a.quotas.request
            if self.exempt or not manager.enabled_levels:
                self.request_ms = 0
            else:
                busy = self.busy + (time.perf_counter() - self.step_started if self.step_started else 0.0)
                self.request_ms = a.record(manager, busy * 100.0, a.quotas.clock())
        return self.request_ms

    def finish(self, resp) -> int:
        """After the handler: a Produce request's size is counted; the throttle time (the longest that any
        quota calls for) goes into the response's ``throttle_time_ms`` and the connection is muted for it
        (KIP-219)."""
        if self.produced:
            self.bandwidth(self.account.quotas.produce, self.produced)
        request_ms = self.request_ms if self.request_ms >= 0 else self.request_throttle_ms()
        byte_ms = self.byte_ms
        mutation_ms = self.mutation.throttle_time() if self.mutation is not None else 0
        if byte_ms <= 0 and request_ms <= 0 and mutation_ms <= 0:
            return 0
        a = self.account
        now = a.quotas.clock()
        if byte_ms > request_ms and byte_ms >= mutation_ms:
            return a.throttle(self.byte_manager, byte_ms, now, resp)
        if mutation_ms > request_ms:
            return a.throttle(a.quotas.controller_mutation, mutation_ms, now, resp)
        return a.throttle(a.quotas.request, request_ms, now, resp)

    def timed(self, coro):
        """``coro``, with its running time (not its waiting time) added to :attr:`busy` while a request
        quota exists."""
        return _Timed(coro, self) if self.account.quotas.request.enabled_levels else coro


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
