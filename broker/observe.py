"""Read-only views of the broker's state for the metrics listener.

The Prometheus exposition (``broker/metrics.py``), the status page and its lag history
(``broker/status_page.py``) show the same numbers; each is computed here, in one place, from
what the components keep in memory.  Nothing here writes, awaits or reads a log file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from broker.share.config import DLQ_GROUP_ENABLE as GROUP_ENABLE, DLQ_TOPIC_NAME as TOPIC_NAME
from broker.topics import open_file_limit
from coordinator.group.share_offsets import share_partition_lag


@dataclass(slots=True)
class SharePartitionView:
    group: str
    topic: str
    partition: int
    start_offset: int   # SPSO
    in_flight: int      # the SPSO..SPEO window (KIP-932's in-flight records)
    archived: int       # records archived since the partition was loaded
    lag: int            # KIP-1226: log end - SPSO - delivery complete count


def share_partitions(c) -> list[SharePartitionView]:
    """Every live (loaded) share partition whose topic exists, in the manager's order."""
    out = []
    for (group, topic_id, partition), sp in list(c.shares.partitions.items()):
        if sp.status != "ACTIVE":
            continue
        info = c.logs.topic_by_id(topic_id)
        if info is None or partition >= len(info.logs):
            continue
        lag = share_partition_lag(info.logs[partition].log_end_offset, sp.start_offset, sp.delivery_complete_count)
        out.append(SharePartitionView(group, info.name, partition, sp.start_offset, sp.in_flight_count,
                                      sp.archived_count, max(lag, 0)))
    return out


def consumer_lags(c) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, log end - committed offset) for every committed offset of a live partition."""
    out = []
    for group, topics in list(c.groups.offsets.by_group.items()):
        for topic, parts in topics.items():
            for partition, om in parts.items():
                plog = c.logs.get_log(topic, partition)
                if plog is not None and om.offset >= 0:
                    out.append((group, topic, partition, max(plog.log_end_offset - om.offset, 0)))
    return out


def group_lags(c) -> dict[tuple[str, str], int]:
    """{("share" | "consumer", group): total lag}: share groups over their live share partitions,
    consumer (classic and KIP-848) groups over their committed offsets."""
    out: dict[tuple[str, str], int] = {}
    for v in share_partitions(c):
        key = ("share", v.group)
        out[key] = out.get(key, 0) + v.lag
    for group, _topic, _partition, lag in consumer_lags(c):
        key = ("consumer", group)
        out[key] = out.get(key, 0) + lag
    return out


@dataclass(slots=True)
class DlqTopicView:
    topic: str
    stored: int          # records the topic holds now: log end - log start over its partitions
    appended: int        # records appended since the topic was created: the sum of its log end offsets
    groups: list[str]    # share groups naming it as their DLQ topic


def dlq_topics(c) -> list[DlqTopicView]:
    """Topics with ``errors.deadletterqueue.group.enable=true`` (every topic a share group can write
    dead-letter records to has it, the auto-created ones included), sorted by name."""
    named: dict[str, list[str]] = {}
    for gid, g in list(c.groups.groups.items()):
        if g.GROUP_TYPE == "share":
            name = c.group_configs.get(gid, TOPIC_NAME)
            if name:
                named.setdefault(name, []).append(gid)
    out = []
    for name, info in sorted(c.logs.topics.items()):
        if str(info.configs.get(GROUP_ENABLE, "false")).strip().lower() != "true":
            continue
        out.append(DlqTopicView(name, sum(p.log_end_offset - p.log_start_offset for p in info.logs),
                                sum(p.log_end_offset for p in info.logs), sorted(named.get(name, []))))
    return out


# KIP-714 metric names (Kafka's ShareFetchMetricsRegistry, ShareConsumerMetrics) a share consumer pushes
SHARE_PREFIX = "org.apache.kafka.consumer.share."
SHARE_CLIENT_METRICS = {
    "poll_idle_ratio": SHARE_PREFIX + "poll.idle.ratio.avg",
    "records_per_request": SHARE_PREFIX + "fetch.manager.records.per.request.avg",
    "records_consumed": SHARE_PREFIX + "fetch.manager.records.consumed.total",
    "ack_errors": SHARE_PREFIX + "fetch.manager.acknowledgements.error.total",
}


@dataclass(slots=True)
class ShareConsumerView:
    client_id: str
    instance_id: str
    software: str
    pushed_ms_ago: int
    values: dict        # SHARE_CLIENT_METRICS key -> value (absent: the client does not push it)


def share_consumers(c, now_ms: int) -> list[ShareConsumerView]:
    """The share consumers that push KIP-714 metrics (broker/client_metrics.py), by client id: their own
    view (poll idle ratio, records per request, records consumed, acknowledgement errors), summed over
    the data points of each metric (Java pushes some per topic)."""
    m = c.client_metrics
    if m is None:
        return []
    from broker.client_metrics import uuid_str

    out = []
    for inst in m.exposed(now_ms):
        if not any(s.name.startswith(SHARE_PREFIX) for s in inst.series.values()):
            continue
        by_name = {v: k for k, v in SHARE_CLIENT_METRICS.items()}
        values: dict = {}
        for s in inst.series.values():
            key = by_name.get(s.name)
            if key is not None:
                values[key] = values.get(key, 0) + s.value
        software = " ".join(x for x in (inst.attrs.get("client_software_name"),
                                        inst.attrs.get("client_software_version")) if x)
        out.append(ShareConsumerView(inst.attrs.get("client_id") or "", uuid_str(inst.instance_id), software,
                                     now_ms - inst.last_metrics_ms, values))
    return sorted(out, key=lambda v: (v.client_id, v.instance_id))


def storage_faults(c) -> list[tuple[str, int, int, int]]:
    """(topic, partition, failed write steps, offsets missing at start-up) of the partitions where
    either is non-zero, sorted (broker/log/README.md, "Failed writes")."""
    return sorted((p.topic, p.partition, p.storage_errors, p.startup_shortfall) for p in list(c.logs.all_logs())
                  if p.storage_errors or p.startup_shortfall)


def open_fds() -> int | None:
    """Open file descriptors of this process (Linux ``/proc``), or None where that is not available."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def max_fds() -> int | None:
    """The open-file limit (soft ``RLIMIT_NOFILE``, raised to the hard limit at start-up)."""
    return open_file_limit()
