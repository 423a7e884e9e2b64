"""Group coordinator settings, read once from the broker configuration (Kafka names and defaults).

Classic groups: ``group.min.session.timeout.ms`` (6000), ``group.max.session.timeout.ms``
(1800000), ``group.initial.rebalance.delay.ms`` (3000), ``group.max.size`` (unbounded).
KIP-848 groups: ``group.consumer.session.timeout.ms`` (45000),
``group.consumer.heartbeat.interval.ms`` (5000), ``group.consumer.max.size`` (unbounded),
``group.consumer.assignors`` (``uniform,range,lag``; the first is the default).
Share groups: ``group.share.session.timeout.ms`` (45000), ``group.share.heartbeat.interval.ms``
(5000), ``group.share.max.size`` (200); per-group ``share.*`` overrides come from the
coordinator's ``group_configs``.
KIP-1263 (Kafka 4.3+): ``group.consumer.assignment.interval.ms`` and
``group.share.assignment.interval.ms`` (1000): a group's target assignment is computed again only
once this long has passed since the last one (per-group ``consumer.`` / ``share.assignment.interval.ms``).
Share assignors: ``group.share.assignors`` (``simple``; Kafka allows exactly one, we accept a list of
``simple`` and ``lag`` whose first entry is the default, the others selectable per group with
``share.assignor.name``) and ``group.share.lag.rebalance.interval.ms`` (ours, 10000): the least time
between two assignments the ``lag`` share assignor makes because backlogs moved;
``group.share.initial.assignment.delay.ms`` (ours, 100): how long a share group that assigns no
partitions yet waits for more members before its first assignment (as Kafka's
``group.initial.rebalance.delay.ms`` does for classic groups; :mod:`coordinator.group.share`).
Offsets: ``offsets.retention.minutes`` (10080), ``offsets.retention.check.interval.ms``
(600000), ``offset.metadata.max.bytes`` (4096).

``offsets.retention.ms`` is ours too (Kafka has only ``offsets.retention.minutes``): when set,
it overrides ``offsets.retention.minutes`` with a millisecond value, so test suites can
exercise KIP-211 expiration in seconds instead of minutes.  Unset by default.

``group.consumer.lag.offset.reset`` (``earliest``) is ours: the reset policy the lag assignor
assumes for partitions the group never committed, overridden per group by
``consumer.auto.offset.reset`` (see README.md, "Lag-aware assignor").  The broker cannot see
the client's ``auto.offset.reset``; seed 001 counts a backlog for every value but ``latest``.
"""
from __future__ import annotations

from dataclasses import dataclass

INT_MAX = 2**31 - 1


def assignor_names(value: str | None) -> tuple[str, ...]:
    """A ``group.*.assignors`` list as assignor names (``...SimpleAssignor`` -> ``simple``)."""
    return tuple(a.strip().rsplit(".", 1)[-1].lower().removesuffix("assignor") or a
                 for a in (value or "").split(",") if a.strip())


@dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    classic_max_size: int = INT_MAX
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_max_size: int = INT_MAX
    consumer_assignors: tuple[str, ...] = ("uniform", "range", "lag")
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    lag_offset_reset: str = "earliest"
    share_session_timeout_ms: int = 45000
    share_heartbeat_interval_ms: int = 5000
    share_max_size: int = 200
    consumer_assignment_interval_ms: int = 1000
    share_assignment_interval_ms: int = 1000
    share_assignors: tuple[str, ...] = ("simple",)
    share_lag_rebalance_interval_ms: int = 10000
    share_initial_assignment_delay_ms: int = 100
    streams_session_timeout_ms: int = 45000
    streams_heartbeat_interval_ms: int = 5000
    streams_max_size: int = INT_MAX
    streams_num_standby_replicas: int = 0
    streams_task_offset_interval_ms: int = 60000
    streams_initial_rebalance_delay_ms: int = 3000
    streams_assignment_interval_ms: int = 1000
    streams_acceptable_recovery_lag: int = 10000

    @classmethod
    def from_broker_config(cls, config) -> "GroupConfig":
        if config is None:
            return cls()
        if isinstance(config, GroupConfig):
            return config
        d = cls()

        def gi(key: str, default: int) -> int:
            return config.get_int(key, default)

        names = assignor_names(config.get("group.consumer.assignors", None)) or d.consumer_assignors
        return cls(
            min_session_timeout_ms=gi("group.min.session.timeout.ms", d.min_session_timeout_ms),
            max_session_timeout_ms=gi("group.max.session.timeout.ms", d.max_session_timeout_ms),
            initial_rebalance_delay_ms=gi("group.initial.rebalance.delay.ms", d.initial_rebalance_delay_ms),
            classic_max_size=gi("group.max.size", d.classic_max_size),
            consumer_session_timeout_ms=gi("group.consumer.session.timeout.ms", d.consumer_session_timeout_ms),
            consumer_heartbeat_interval_ms=gi("group.consumer.heartbeat.interval.ms",
                                              d.consumer_heartbeat_interval_ms),
            consumer_max_size=gi("group.consumer.max.size", d.consumer_max_size),
            consumer_assignors=names,
            offsets_retention_ms=gi("offsets.retention.ms", gi("offsets.retention.minutes", 10080) * 60 * 1000),
            offsets_retention_check_interval_ms=gi("offsets.retention.check.interval.ms",
                                                   d.offsets_retention_check_interval_ms),
            offset_metadata_max_bytes=gi("offset.metadata.max.bytes", d.offset_metadata_max_bytes),
            lag_offset_reset=(config.get("group.consumer.lag.offset.reset", None) or "earliest").lower(),
            share_session_timeout_ms=gi("group.share.session.timeout.ms", d.share_session_timeout_ms),
            share_heartbeat_interval_ms=gi("group.share.heartbeat.interval.ms", d.share_heartbeat_interval_ms),
            share_max_size=gi("group.share.max.size", d.share_max_size),
            consumer_assignment_interval_ms=gi("group.consumer.assignment.interval.ms",
                                               d.consumer_assignment_interval_ms),
            share_assignment_interval_ms=gi("group.share.assignment.interval.ms", d.share_assignment_interval_ms),
            share_assignors=assignor_names(config.get("group.share.assignors", None)) or d.share_assignors,
            share_lag_rebalance_interval_ms=gi("group.share.lag.rebalance.interval.ms",
                                               d.share_lag_rebalance_interval_ms),
            share_initial_assignment_delay_ms=gi("group.share.initial.assignment.delay.ms",
                                                 d.share_initial_assignment_delay_ms),
            streams_session_timeout_ms=gi("group.streams.session.timeout.ms", d.streams_session_timeout_ms),
            streams_heartbeat_interval_ms=gi("group.streams.heartbeat.interval.ms",
                                             d.streams_heartbeat_interval_ms),
            streams_max_size=gi("group.streams.max.size", d.streams_max_size),
            streams_num_standby_replicas=gi("group.streams.num.standby.replicas", d.streams_num_standby_replicas),
            streams_task_offset_interval_ms=gi("group.streams.task.offset.interval.ms",
                                               d.streams_task_offset_interval_ms),
            streams_initial_rebalance_delay_ms=gi("group.streams.initial.rebalance.delay.ms",
                                                  d.streams_initial_rebalance_delay_ms),
            streams_assignment_interval_ms=gi("group.streams.assignment.interval.ms",
                                              d.streams_assignment_interval_ms),
        )
