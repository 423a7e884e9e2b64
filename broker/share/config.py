"""Per-group share settings read live by every SharePartition of the group.

One `ShareGroupConfig` object is shared by all share partitions of a group; the
broker mutates it (IncrementalAlterConfigs on a GROUP resource, or a broker
default change) with `update()` and the partitions see the new values on their
next operation, as Kafka's dynamic group configs do:

- `record_lock_duration_ms`: applies to locks taken or renewed from now on;
- `delivery_count_limit`: applies to the next release / lock expiry / acquire;
- `partition_max_record_locks`: applies to the next acquire;
- `auto_offset_reset`: applies to the next initialization of an uninitialized SPSO;
- `renew_acknowledge_enable`, `isolation_level`: read per request;
- `dlq_topic`, `dlq_copy_record` (KIP-1191 `errors.deadletterqueue.*`): read when a record is
  archived (empty topic = no dead-letter queue) and when its dead-letter record is written;
- `redelivery_backoff_ms`, `redelivery_backoff_max_ms` (ours): applied to records released or
  whose lock expires from now on;
- `fair_acquisition` (ours, `share.fair.acquisition.enable`, default true; broker/share/fair.py):
  read per acquire; false gives Kafka 4.4's whole-batch batch_optimized acquisition.

Bounds checking against the broker's group.share.min/max.* settings belongs to
the config manager, not here; this module only rejects values that cannot work.
"""
from __future__ import annotations

import re
from typing import Any

from protocol.errors import Errors

from broker.share.errors import ShareError

LATEST = "latest"
EARLIEST = "earliest"
BY_DURATION = "by_duration"
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
# KIP-1191 dead-letter queues (broker/share/dlq.py writes them): the group config naming a share group's
# DLQ topic, and the topic config a topic needs to be one.
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_GROUP_ENABLE = "errors.deadletterqueue.group.enable"

# Java's Duration.parse grammar: [-+]P[nD][T[nH][nM][n[.f]S]]
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_iso_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse accepts it."""
    m = _ISO_DURATION.fullmatch(text)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"invalid ISO-8601 duration: {text!r}")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    frac = m.group(7) or ""
    ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000
    frac_ms = int((frac + "000")[:3]) if frac else 0
    ms += -frac_ms if m.group(6) and m.group(6).startswith("-") else frac_ms
    return -ms if m.group(1) == "-" else ms


def parse_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """`latest` | `earliest` | `by_duration:<ISO-8601>` -> (strategy, duration_ms)."""
    v = value.strip().lower()
    if v in (LATEST, EARLIEST):
        return v, None
    if v.startswith(BY_DURATION + ":"):
        ms = parse_iso_duration_ms(value.strip()[len(BY_DURATION) + 1:])
        if ms < 0:
            raise ValueError("share.auto.offset.reset duration must not be negative")
        return BY_DURATION, ms
    raise ValueError(f"invalid share.auto.offset.reset: {value!r}")


class ShareGroupConfig:
    """Live share settings of one group (Kafka 4.4 defaults)."""

    __slots__ = ("record_lock_duration_ms", "delivery_count_limit", "partition_max_record_locks",
                 "auto_offset_reset", "renew_acknowledge_enable", "isolation_level",
                 "dlq_topic", "dlq_copy_record", "redelivery_backoff_ms", "redelivery_backoff_max_ms",
                 "fair_acquisition", "_reset_strategy", "_reset_duration_ms")

    def __init__(self, *, record_lock_duration_ms: int = 30_000, delivery_count_limit: int = 5,
                 partition_max_record_locks: int = 2000, auto_offset_reset: str = LATEST,
                 renew_acknowledge_enable: bool = True, isolation_level: str = READ_UNCOMMITTED,
                 dlq_topic: str = "", dlq_copy_record: bool = False, redelivery_backoff_ms: int = 0,
                 redelivery_backoff_max_ms: int = 60_000, fair_acquisition: bool = True):
        self.record_lock_duration_ms = 30_000
        self.delivery_count_limit = 5
        self.partition_max_record_locks = 2000
        self.auto_offset_reset = LATEST
        self._reset_strategy, self._reset_duration_ms = LATEST, None
        self.renew_acknowledge_enable = True
        self.isolation_level = READ_UNCOMMITTED
        self.dlq_topic, self.dlq_copy_record = "", False
        self.redelivery_backoff_ms, self.redelivery_backoff_max_ms = 0, 60_000
        self.fair_acquisition = True
        self.update(dlq_topic=dlq_topic, dlq_copy_record=dlq_copy_record, fair_acquisition=fair_acquisition,
                    redelivery_backoff_ms=redelivery_backoff_ms,
                    redelivery_backoff_max_ms=redelivery_backoff_max_ms,
                    record_lock_duration_ms=record_lock_duration_ms,
                    delivery_count_limit=delivery_count_limit,
                    partition_max_record_locks=partition_max_record_locks,
                    auto_offset_reset=auto_offset_reset,
                    renew_acknowledge_enable=renew_acknowledge_enable,
                    isolation_level=isolation_level)

    def update(self, **values) -> None:
        """Change any of the settings; raises ShareError(INVALID_CONFIG) and keeps the old values."""
        try:
            checked = {name: self._check(name, v) for name, v in values.items()}
        except (TypeError, ValueError) as e:
            raise ShareError(Errors.INVALID_CONFIG, str(e)) from None
        for name, v in checked.items():
            if name == "auto_offset_reset":
                self._reset_strategy, self._reset_duration_ms = parse_auto_offset_reset(v)
            setattr(self, name, v)

    @staticmethod
    def _check(name: str, v):
        if name in ("record_lock_duration_ms", "partition_max_record_locks"):
            if type(v) is not int or v < 1:
                raise ValueError(f"{name} must be a positive int")
        elif name == "delivery_count_limit":
            if type(v) is not int or v < 1 or v > 32767:
                raise ValueError("delivery_count_limit must be in 1..32767")
        elif name == "auto_offset_reset":
            parse_auto_offset_reset(v)
        elif name in ("renew_acknowledge_enable", "dlq_copy_record", "fair_acquisition"):
            if type(v) is not bool:
                raise ValueError(f"{name} must be a bool")
        elif name == "dlq_topic":
            if type(v) is not str:
                raise ValueError("dlq_topic must be a str")
        elif name in ("redelivery_backoff_ms", "redelivery_backoff_max_ms"):
            if type(v) is not int or v < 0:
                raise ValueError(f"{name} must be a non-negative int")
        elif name == "isolation_level":
            if v not in (READ_UNCOMMITTED, READ_COMMITTED):
                raise ValueError(f"invalid isolation level {v!r}")
        else:
            raise ValueError(f"unknown share group setting {name!r}")
        return v

    @property
    def reset_strategy(self) -> tuple[str, int | None]:
        """(strategy, duration_ms) parsed from auto_offset_reset."""
        return self._reset_strategy, self._reset_duration_ms

    def reset_offset(self, log: Any, wall_ms: int) -> int:
        """The SPSO that share.auto.offset.reset gives a share partition of `log` with none (-1)
        at `wall_ms` (epoch ms, for by_duration)."""
        if self._reset_strategy == EARLIEST:
            return log.log_start_offset
        if self._reset_strategy == BY_DURATION:
            found = log.offset_for_timestamp(wall_ms - self._reset_duration_ms)
            if found is not None and found[0] is not None and found[0] >= 0:
                return found[0]
            # Kafka fails the partition with OFFSET_NOT_AVAILABLE when no record is that recent;
            # every future record is, so the log end is the answer.
        return log.log_end_offset

    def redelivery_delay_ms(self, delivery_count: int) -> int:
        """Delay before a record released after `delivery_count` deliveries may be acquired again:
        share.redelivery.backoff.ms x 2^(delivery_count - 1), capped at share.redelivery.backoff.max.ms."""
        base = self.redelivery_backoff_ms
        if base <= 0 or delivery_count <= 0:
            return 0
        return min(self.redelivery_backoff_max_ms, base << min(delivery_count - 1, 32))

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED
