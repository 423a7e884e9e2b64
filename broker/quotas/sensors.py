"""Kafka's quota statistics, in milliseconds of a monotonic clock.

- :class:`SampledStat` is ``org.apache.kafka.common.metrics.stats.SampledStat``: ``samples``
  windows of ``window_ms`` each (plus one overlapping placeholder), a sample recycled when its
  window is complete, samples with no event for ``samples * window_ms`` reset when measured.
- :meth:`SampledStat.rate` is ``Rate`` over a ``WindowedSum``: the sum of the live samples divided
  by the elapsed time since the oldest one, never less than ``samples - 1`` full windows (so a
  client starting fresh may use ``(samples - 1) * window`` worth of its quota at once, as in Kafka).
- :class:`AvgStat` adds ``Avg`` (NaN without events), Kafka's throttle-time metric: it counts the
  events, which a ``Rate`` does not need.
- :class:`TokenBucket` is ``stats.TokenBucket``: refilled at the quota, at most
  ``samples * window * quota`` credits; the controller mutation quota is exhausted below zero.
- :func:`throttle_time_ms` is ``QuotaUtils.throttleTime``: the delay X that brings the observed
  rate O back to the bound T over the window W, ``X = (O - T) / T * W``.

``measure`` and ``window_size`` reset obsolete samples as Kafka's do; the ``*_value`` forms used
by ``/metrics`` compute the same figures without touching the state.
"""
from __future__ import annotations

import math

LONG_MAX = float((1 << 63) - 1)  # Kafka's bound when no quota applies (ClientQuotaManager.quotaLimit)
_NEVER, _NEVER_BEFORE = 1 << 62, -(1 << 62)  # times beyond any clock reading


class _Sample:
    __slots__ = ("value", "events", "start", "last")

    def __init__(self, now: int):
        self.value = 0  # an int while only ints are recorded (bytes): exact, and cheaper to add to
        self.events = 0  # counted by AvgStat only
        self.start = now
        self.last = now

    def reset(self, now: int) -> None:
        self.value = 0
        self.events = 0
        self.start = now
        self.last = now


class SampledStat:
    """Samples of one statistic; :meth:`rate` combines them.

    Kept incrementally so that a request costs O(1): ``total`` is the sum of the samples,
    ``oldest`` the earliest start, and nothing can expire before ``next_purge`` (the earliest last
    event plus the expiry age: last events only move forward), when one pass resets what expired and
    recomputes both exactly.  ``cur`` and ``roll_at`` repeat ``samples[current]`` and the end of its
    window, and ``due_at`` is the first time a record has more to do than add, so that an event in
    the current window costs no lookup and one test.
    """

    __slots__ = ("samples", "current", "count", "window_ms", "total", "oldest", "next_purge", "cur", "roll_at",
                 "purging", "purge_at", "due_at")

    def __init__(self, samples: int, window_ms: int, purging: bool = False):
        self.samples: list[_Sample] = []
        self.current = 0
        self.count = samples  # config.samples(); the list holds at most count + 1
        self.window_ms = window_ms
        self.total = 0
        self.oldest = 0
        self.next_purge = 0
        self.cur: _Sample | None = None  # samples[current]; written by _advance
        self.roll_at = _NEVER_BEFORE  # cur.start + window_ms: an event from then on goes to the next sample
        # a quota's Rate: obsolete samples are reset with each event, as Kafka's checkQuotas measures
        # after each record; purge_at is then next_purge, else never
        self.purging = purging
        self.purge_at = _NEVER
        self.due_at = _NEVER_BEFORE  # min(roll_at, purge_at); written by _reschedule

    def record(self, value: float, now: int) -> float:
        """Count ``value`` at ``now``; the total of the samples."""
        if now >= self.due_at:
            if now >= self.roll_at:
                self._advance(now)
            if now >= self.purge_at:  # before the value is added: the same, as the current sample is live
                self.purge(now)
        s = self.cur
        s.value += value
        s.last = now
        total = self.total = self.total + value
        return total

    def _advance(self, now: int) -> None:
        """The current sample's window is over (or there is none yet): move to the next one."""
        if not self.samples:
            s = _Sample(now)
            self.samples.append(s)
            self.oldest, self.next_purge = now, now + self.count * self.window_ms
            if self.purging:
                self.purge_at = self.next_purge
        else:
            self.current = (self.current + 1) % (self.count + 1)
            if self.current >= len(self.samples):
                s = _Sample(now)
                self.samples.append(s)
            else:
                s = self.samples[self.current]
                self.total -= s.value
                s.reset(now)
                self.oldest = min(x.start for x in self.samples)
        self.cur = s
        self.roll_at = now + self.window_ms
        self._reschedule()

    def _reschedule(self) -> None:
        self.due_at = self.roll_at if self.roll_at < self.purge_at else self.purge_at

    def purge(self, now: int) -> None:
        """Reset the samples with no event for ``count`` windows (``SampledStat.purgeObsoleteSamples``)."""
        if now < self.next_purge or not self.samples:
            return
        expire = self.count * self.window_ms
        for s in self.samples:
            if now - s.last >= expire:
                s.reset(now)
        self.total = sum(s.value for s in self.samples)
        self.oldest = min(s.start for s in self.samples)
        self.next_purge = min(s.last for s in self.samples) + expire
        if self.purging:
            self.purge_at = self.next_purge
        self.roll_at = self.cur.start + self.window_ms
        self._reschedule()

    def min_window_s(self) -> float:
        """The shortest window a rate is taken over (``count - 1`` windows), in seconds."""
        return max((self.count - 1) * self.window_ms / 1000.0, 0.001)

    def window_size(self, now: int) -> int:
        """``Rate.windowSize``: ms since the oldest live sample, at least ``count - 1`` full windows."""
        self.purge(now)
        return self._window(self.oldest if self.samples else now, now)

    def _window(self, oldest: int, now: int) -> int:
        elapsed = now - oldest
        full = elapsed // self.window_ms
        if full < self.count - 1:
            elapsed += (self.count - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def rate(self, now: int) -> float:
        """``Rate.measure`` per second."""
        if now >= self.next_purge:
            self.purge(now)
        elapsed = now - self.oldest if self.samples else 0
        full = elapsed // self.window_ms
        if full < self.count - 1:
            elapsed += (self.count - 1 - full) * self.window_ms
        return self.total / (max(elapsed, 1) / 1000.0)

    # --- the same figures without resetting anything (for /metrics)
    def _live(self, now: int) -> list[_Sample]:
        expire = self.count * self.window_ms
        return [s for s in self.samples if now - s.last < expire]

    def rate_value(self, now: int) -> float:
        live = self._live(now)
        oldest = min((s.start for s in live), default=now)
        if len(live) < len(self.samples):  # a reset sample starts now
            oldest = min(oldest, now)
        return sum(s.value for s in live) / (self._window(oldest, now) / 1000.0)


class AvgStat(SampledStat):
    """``Avg``: a SampledStat that also counts its events."""

    __slots__ = ()

    def record(self, value: float, now: int) -> float:
        total = super().record(value, now)
        self.cur.events += 1
        return total

    def average_value(self, now: int) -> float:
        """``Avg.measure``: the live samples' value per event (NaN without events), without resetting anything."""
        live = self._live(now)
        events = sum(s.events for s in live)
        return sum(s.value for s in live) / events if events else math.nan


class TokenBucket:
    """Credits refilled at ``quota`` per second, at most ``samples * window * quota`` (the burst)."""

    __slots__ = ("tokens", "last", "burst_s")

    def __init__(self, samples: int, window_ms: int, now: int):
        self.burst_s = samples * window_ms / 1000.0
        self.tokens: float | None = None  # full at the first use (Kafka starts from time 0)
        self.last = now

    def _refill(self, quota: float, now: int) -> None:
        burst = self.burst_s * quota
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now - self.last) / 1000.0)
        self.last = now

    def measure(self, quota: float, now: int) -> float:
        self._refill(quota, now)
        return self.tokens

    def record(self, quota: float, value: float, now: int) -> None:
        self._refill(quota, now)
        self.tokens = min(self.burst_s * quota, self.tokens - value)

    def value(self, quota: float, now: int) -> float:
        if self.tokens is None:
            return self.burst_s * quota
        return min(self.burst_s * quota, self.tokens + quota * (now - self.last) / 1000.0)


def java_round(x: float) -> int:
    """``Math.round`` then ``(int)``: half up; NaN is 0, infinities saturate."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return (1 << 31) - 1 if x > 0 else -(1 << 31)
    return max(-(1 << 31), min((1 << 31) - 1, math.floor(x + 0.5)))


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """``QuotaUtils.throttleTime``: ``(O - T) / T * W`` rounded."""
    if bound == 0:
        return 0
    return java_round((observed - bound) / bound * window_ms)
