"""Prometheus metrics on ``/metrics`` (text exposition format 0.0.4), off unless configured.

Started with ``--metrics HOST:PORT`` or the setting ``sharebroker.metrics.listener=HOST:PORT``; a
small asyncio HTTP listener on the broker's loop answers ``GET /metrics`` and ``GET /``, the status
page (``broker/status_page.py``).  A scrape reads counters and gauges the components keep on the fly (request counts, the
share partitions' offsets and counts, group states, log offsets and sizes); it never reads a log.

Names.  Metrics that Kafka has are named as the Prometheus JMX exporter's usual Kafka rules derive
them from the MBean (``kafka.<domain><type=T, name=N, k=v>`` -> ``kafka_<domain>_<t>_<n>{k="v"}``,
lower case, ``-`` and ``.`` -> ``_``), so dashboards built on a JMX-exported Kafka map over:

- ``kafka_server_group_coordinator_metrics_group_count{protocol, state}`` (KIP-932 and KIP-848) and
  ``..._rebalance_count{protocol}`` (new target assignments of consumer and share groups);
- ``kafka_server_share_group_metrics_share_acknowledgement_count`` and
  ``..._record_acknowledgement_count{ack_type="Accept|Release|Reject"}`` (KIP-932);
- ``kafka_server_share_group_metrics_partition_load_time_avg`` / ``_max`` (ms);
- ``kafka_server_share_coordinator_metrics_write_total``, ``..._write_latency_avg`` / ``_max`` (ms);
- ``kafka_log_log_logstartoffset`` / ``_logendoffset`` / ``_size{topic, partition}``;
- ``kafka_network_requestmetrics_requests_total{request}``;
- ``kafka_network_socketserver_memorypoolavailable`` / ``_memorypoolused`` (SocketServer's MemoryPoolAvailable
  and MemoryPoolUsed: the request memory bounded by ``queued.max.request.bytes``, in bytes);
- the log cleaner's gauges (``kafka.log:type=LogCleaner`` / ``LogCleanerManager``):
  ``kafka_log_logcleaner_max_clean_time_secs``, ``..._cleaner_recopy_percent``,
  ``..._max_buffer_utilization_percent``, ``..._max_compaction_delay_secs``, ``..._deadthreadcount``,
  ``kafka_log_logcleanermanager_max_dirty_percent``, ``..._time_since_last_run_ms``,
  ``..._uncleanable_partitions_count{logDirectory}``;
- client quotas, per sensor (``kafka.server<type=Produce|Fetch|Request|ControllerMutation, user=U,
  client-id=C>``, the user URL-encoded as Kafka tags it): ``kafka_server_produce_byte_rate``,
  ``kafka_server_fetch_byte_rate`` (bytes/s), ``kafka_server_request_request_time`` (% of one
  second), ``kafka_server_controllermutation_mutation_rate`` and ``..._tokens``, and each type's
  ``..._throttle_time`` (average ms over 2 x 30 s, NaN without throttling, as Kafka's Avg), all with
  labels ``user`` and ``client_id`` (empty when the quota level does not use it).

Ours, under ``sharebroker_``: per share partition ``sharebroker_share_partition_lag`` (KIP-1226:
the number DescribeShareGroupOffsets v1 returns), ``_start_offset`` (SPSO), ``_in_flight_records``
(the SPSO..SPEO window, KIP-932's in-flight records), ``_archived_records_total``; per consumer-group partition
``sharebroker_consumer_group_lag`` (log end minus committed offset); ``sharebroker_group_members{group,
protocol}``; per dead-letter topic ``sharebroker_dlq_records_total`` (appended) and ``_stored_records``;
``sharebroker_connections`` and the request-latency histogram ``sharebroker_request_latency_seconds{request}``;
``sharebroker_quota_throttle_time_ms_total{quota_type, user, client_id}`` (the throttle times added
up, for ``rate()``); per partition ``sharebroker_log_corrupt_batches_total`` and
``sharebroker_log_truncated_segments_total`` (damage at rest: ``broker/log/damage.py``).
Storage faults (broker/log/README.md, "Failed writes"), per partition and only where non-zero:
``sharebroker_log_storage_errors_total`` (write steps that failed) and
``sharebroker_log_startup_missing_offsets`` (offsets the checkpoint promised beyond the log end at start-up).
Client telemetry (KIP-714, ``broker/client_metrics.py``): ``sharebroker_client_metric{client_instance_id,
client_id, name, attributes}`` (gauges), ``sharebroker_client_counter_total{...}`` (monotonic sums),
``sharebroker_client_telemetry_instances``.
The standard Prometheus process gauges ``process_open_fds`` and ``process_max_fds`` (the open-file limit).
Faults: ``sharebroker_storage_errors_total{operation, error}`` (every failed file operation reported to
``broker/log/faults.STORAGE``: append, segment roll, fsync, ...; ``error`` is the errno name),
``sharebroker_accept_errors_total{error}`` (failed accepts, EMFILE at the open-file limit) and the gauge
``sharebroker_fd_reserve_descriptors`` (descriptors held for segment rolls; below 8 after it was used).
Logins (``broker/security/logins.py``): ``sharebroker_sasl_authentications_total{listener, mechanism,
kind="authentication|reauthentication"}`` and ``sharebroker_sasl_authentication_failures_total{listener,
mechanism, cause}``.
Segment files (``broker/log/faults.OPEN_FILES``): the gauge ``sharebroker_log_open_segment_descriptors`` (held now,
at most ``sharebroker.log.max.open.files``), the counters ``sharebroker_log_segment_reopens_total`` (log files
opened again after being released) and ``sharebroker_log_segment_releases_total`` (descriptors released).
Merged syncs (``broker/log/background.py``): ``sharebroker_log_syncfs_calls_total`` (``syncfs`` calls that
covered queued partition fsyncs) and ``sharebroker_log_merged_syncs_total`` (the fsync jobs they covered).
The numbers shared with the status page are computed in ``broker/observe.py``.
"""
from __future__ import annotations

import asyncio
import logging
import time

from broker import observe
from broker.acceptor import ACCEPT_FAULTS, Acceptor, listening_sockets
from broker.log.faults import FD_RESERVE, OPEN_FILES, STORAGE
from broker.pipeline import LATENCY_BUCKETS
from broker.security import logins
from protocol.messages.registry import ApiKey

log = logging.getLogger("sharebroker.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ACK_TYPES = {1: "Accept", 2: "Release", 3: "Reject"}


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Writer:
    """Text exposition: one HELP/TYPE header per family, then its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value, /, **labels) -> None:  # positional: a label may be called "name"
        if labels:
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {value}")
        else:
            self.lines.append(f"{name} {value}")

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


class Meter:
    """A count, and the average and maximum of a duration in milliseconds."""

    __slots__ = ("count", "total_ms", "max_ms")

    def __init__(self) -> None:
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0

    def record(self, ms: float) -> None:
        self.count += 1
        self.total_ms += ms
        if ms > self.max_ms:
            self.max_ms = ms

    @property
    def avg_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0


class ShareMetrics:
    """Counters the share side increments: acknowledgements, partition loads, state writes."""

    def __init__(self) -> None:
        self.acknowledgements = 0  # ShareAcknowledge requests and ShareFetch requests carrying acks
        self.records_acknowledged = {t: 0 for t in ACK_TYPES}  # by ack type
        self.partition_loads = Meter()
        self.state_writes = Meter()

    def acknowledged(self, ack_type: int, records: int) -> None:
        if ack_type in self.records_acknowledged:
            self.records_acknowledged[ack_type] += records


class MeteredPersister:
    """The share coordinator as the share-partition leader's persister, timed: state reads are
    partition loads, state writes are coordinator writes (KIP-932's metrics)."""

    def __init__(self, persister, metrics: ShareMetrics):
        self._persister = persister
        self._metrics = metrics

    def __getattr__(self, name):
        return getattr(self._persister, name)

    async def read_state(self, req):
        t0 = time.perf_counter()
        try:
            return await self._persister.read_state(req)
        finally:
            self._metrics.partition_loads.record((time.perf_counter() - t0) * 1000)

    async def write_state(self, req):
        t0 = time.perf_counter()
        try:
            return await self._persister.write_state(req)
        finally:
            self._metrics.state_writes.record((time.perf_counter() - t0) * 1000)


def render(c, connections: int, memory=None) -> bytes:
    """The whole exposition for one scrape (``memory``: the listeners' ``RequestMemory``)."""
    w = _Writer()
    _requests(w, c.request_metrics)
    w.family("sharebroker_connections", "gauge", "Open client connections.")
    w.sample("sharebroker_connections", connections)
    _limits(w, memory)
    _faults(w)
    _logins(w)
    _groups(w, c)
    _share(w, c)
    _dlq(w, c)
    _logs(w, c)
    _storage_faults(w, c)
    _cleaner(w, c)
    _quotas(w, c.quotas)
    _client_metrics(w, c)
    return w.text()


def _requests(w: _Writer, m) -> None:
    name = "kafka_network_requestmetrics_requests_total"
    w.family(name, "counter", "Requests handled, by API.")
    served = [k for k in range(len(m.count)) if m.count[k]]
    for k in served:
        w.sample(name, m.count[k], request=_api_name(k))
    hist = "sharebroker_request_latency_seconds"
    w.family(hist, "histogram", "Time from decoding a request to its handler's answer, by API.")
    for k in served:
        api, cumulative = _api_name(k), 0
        for bound, n in zip(LATENCY_BUCKETS, m.buckets[k]):
            cumulative += n
            w.sample(f"{hist}_bucket", cumulative, request=api, le=repr(bound))
        w.sample(f"{hist}_bucket", m.count[k], request=api, le="+Inf")
        w.sample(f"{hist}_sum", m.seconds[k], request=api)
        w.sample(f"{hist}_count", m.count[k], request=api)


def _api_name(key: int) -> str:
    try:
        return "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
    except ValueError:
        return str(key)


def _groups(w: _Writer, c) -> None:
    counts: dict[tuple[str, str], int] = {}
    for g in list(c.groups.groups.values()):
        key = (g.GROUP_TYPE, g.state_name())
        counts[key] = counts.get(key, 0) + 1
    name = "kafka_server_group_coordinator_metrics_group_count"
    w.family(name, "gauge", "Groups by protocol and state.")
    for (protocol, state), n in sorted(counts.items()):
        w.sample(name, n, protocol=protocol, state=state)
    name = "kafka_server_group_coordinator_metrics_rebalance_count"
    w.family(name, "counter", "New target assignments (rebalances) since start-up, by protocol.")
    for protocol in ("consumer", "share", "streams"):
        w.sample(name, c.groups.rebalances.get(protocol, 0), protocol=protocol)
    name = "sharebroker_group_members"
    w.family(name, "gauge", "Members of each group, by protocol (classic, consumer, share, streams).")
    for gid, g in list(c.groups.groups.items()):
        w.sample(name, len(g.members), group=gid, protocol=g.GROUP_TYPE)
    lag = "sharebroker_consumer_group_lag"
    w.family(lag, "gauge", "Log end offset minus the group's committed offset, per partition.")
    for group, topic, partition, value in observe.consumer_lags(c):
        w.sample(lag, value, group=group, topic=topic, partition=partition)


def _share(w: _Writer, c) -> None:
    sm = c.share_metrics
    name = "kafka_server_share_group_metrics_share_acknowledgement_count"
    w.family(name, "counter", "Acknowledgement requests (ShareAcknowledge, and ShareFetch carrying acknowledgements).")
    w.sample(name, sm.acknowledgements)
    name = "kafka_server_share_group_metrics_record_acknowledgement_count"
    w.family(name, "counter", "Records acknowledged, by acknowledgement type.")
    for t, label in ACK_TYPES.items():
        w.sample(name, sm.records_acknowledged[t], ack_type=label)
    for prefix, meter, what in (("kafka_server_share_group_metrics_partition_load_time", sm.partition_loads,
                                 "Time to load a share partition's state, ms."),
                                ("kafka_server_share_coordinator_metrics_write_latency", sm.state_writes,
                                 "Time of a share-group state write, ms.")):
        w.family(f"{prefix}_avg", "gauge", what + " Average.")
        w.sample(f"{prefix}_avg", round(meter.avg_ms, 3))
        w.family(f"{prefix}_max", "gauge", what + " Maximum.")
        w.sample(f"{prefix}_max", round(meter.max_ms, 3))
    name = "kafka_server_share_coordinator_metrics_write_total"
    w.family(name, "counter", "Share-group state writes.")
    w.sample(name, sm.state_writes.count)

    rows = observe.share_partitions(c)
    for suffix, kind, help_, field in (
            ("lag", "gauge", "Records not yet in a terminal state (KIP-1226): log end - SPSO - delivery complete "
                             "count.", "lag"),
            ("start_offset", "gauge", "Share-partition start offset (SPSO).", "start_offset"),
            ("in_flight_records", "gauge", "In-flight records (KIP-932: the SPSO..SPEO window).", "in_flight"),
            ("archived_records_total", "counter", "Records archived (rejected, or delivery limit reached).",
             "archived")):
        name = f"sharebroker_share_partition_{suffix}"
        w.family(name, kind, help_)
        for v in rows:
            w.sample(name, getattr(v, field), group=v.group, topic=v.topic, partition=v.partition)


def _dlq(w: _Writer, c) -> None:
    topics = observe.dlq_topics(c)
    name = "sharebroker_dlq_records_total"
    w.family(name, "counter", "Records appended to each dead-letter topic since it was created (the sum of its "
                              "partitions' log end offsets): rate() is the DLQ rate.")
    for v in topics:
        w.sample(name, v.appended, topic=v.topic)
    name = "sharebroker_dlq_stored_records"
    w.family(name, "gauge", "Records each dead-letter topic holds now (log end - log start, all partitions).")
    for v in topics:
        w.sample(name, v.stored, topic=v.topic)


def _limits(w: _Writer, memory) -> None:
    """The broker's open files against their limit, and the request memory pool (queued.max.request.bytes)."""
    for name, help_, value in (("process_open_fds", "Number of open file descriptors.", observe.open_fds()),
                               ("process_max_fds", "Maximum number of open file descriptors.", observe.max_fds())):
        if value is not None:
            w.family(name, "gauge", help_)
            w.sample(name, value)
    if memory is not None:
        name = "kafka_network_socketserver_memorypoolavailable"
        w.family(name, "gauge", "Request memory left (queued.max.request.bytes minus the bytes held), bytes.")
        w.sample(name, memory.capacity - memory.used)
        name = "kafka_network_socketserver_memorypoolused"
        w.family(name, "gauge", "Bytes held by requests read but not yet handled, bytes.")
        w.sample(name, memory.used)


def _faults(w: _Writer) -> None:
    """Storage failures and failed accepts since start-up (broker/log/faults.py, broker/acceptor.py)."""
    name = "sharebroker_storage_errors_total"
    w.family(name, "counter", "Failed file operations (append, segment roll, fsync, ...), by operation and errno.")
    for (operation, error), n in sorted(STORAGE.counts.items()):
        w.sample(name, n, operation=operation, error=error)
    name = "sharebroker_accept_errors_total"
    w.family(name, "counter", "Failed accepts of new connections (EMFILE: the open-file limit), by errno.")
    for (_op, error), n in sorted(ACCEPT_FAULTS.counts.items()):
        w.sample(name, n, error=error)
    name = "sharebroker_fd_reserve_descriptors"
    w.family(name, "gauge", "Descriptors held for segment rolls at the open-file limit (fewer than usual: it was used).")
    w.sample(name, FD_RESERVE.held)
    for name, kind, help_, value in (
            ("sharebroker_log_open_segment_descriptors", "gauge",
             "Descriptors segment files hold now (bound: sharebroker.log.max.open.files).", OPEN_FILES.held),
            ("sharebroker_log_segment_reopens_total", "counter",
             "Segment log files opened again after their descriptor was released.", OPEN_FILES.reopened),
            ("sharebroker_log_segment_releases_total", "counter",
             "Segment descriptors released (idle, past the bound, or to make room at the limit).", OPEN_FILES.released)):
        w.family(name, kind, help_)
        w.sample(name, value)


def _logins(w: _Writer) -> None:
    """SASL logins since start-up (broker/security/logins.py)."""
    name = "sharebroker_sasl_authentications_total"
    w.family(name, "counter", "Successful SASL logins and re-authentications, by listener and mechanism.")
    for (listener, mechanism, kind), n in sorted(logins.SUCCEEDED.items()):
        w.sample(name, n, listener=listener, mechanism=mechanism, kind=kind)
    name = "sharebroker_sasl_authentication_failures_total"
    w.family(name, "counter", "Failed SASL logins, by listener, mechanism and cause.")
    for (listener, mechanism, cause), n in sorted(logins.FAILED.items()):
        w.sample(name, n, listener=listener, mechanism=mechanism, cause=cause)


def _logs(w: _Writer, c) -> None:
    logs = [(plog.topic, plog.partition, plog) for plog in c.logs.all_logs()]
    for suffix, help_, value in (("logstartoffset", "First offset of the partition.", lambda p: p.log_start_offset),
                                 ("logendoffset", "Next offset of the partition.", lambda p: p.log_end_offset),
                                 ("size", "Bytes of the partition's segments.", lambda p: p.size_bytes)):
        name = f"kafka_log_log_{suffix}"
        w.family(name, "gauge", help_)
        for topic, partition, plog in logs:
            w.sample(name, value(plog), topic=topic, partition=partition)
    for suffix, help_, attr in (
            ("corrupt_batches_total", "Damaged batches found in the partition's segments since start-up (recovery, "
                                      "or the check of a sealed segment a read touched); fetches skip them.",
             "corrupt_batches"),
            ("truncated_segments_total", "Sealed segments found shorter than written (cut under the broker).",
             "truncated_segments")):
        name = f"sharebroker_log_{suffix}"
        w.family(name, "counter", help_)
        for topic, partition, plog in logs:
            w.sample(name, getattr(plog.damage, attr), topic=topic, partition=partition)
    worker = c.logs.background  # counted on the worker thread (plain int increments)
    for name, help_, value in (
            ("sharebroker_log_syncfs_calls_total", "syncfs calls that covered queued partition fsyncs.",
             getattr(worker, "syncfs_calls", 0)),
            ("sharebroker_log_merged_syncs_total", "Partition fsync jobs covered by a syncfs instead of their own.",
             getattr(worker, "merged", 0))):
        w.family(name, "counter", help_)
        w.sample(name, value)


def _storage_faults(w: _Writer, c) -> None:
    """Per partition, only where non-zero: write steps that failed (answered KAFKA_STORAGE_ERROR or
    logged), and the offsets the checkpoint promised beyond the log end found at start-up."""
    rows = observe.storage_faults(c)
    for name, kind, help_, column in (
            ("sharebroker_log_storage_errors_total", "counter",
             "Log write steps (append, roll, fsync, checkpoint) that failed, per partition.", 2),
            ("sharebroker_log_startup_missing_offsets", "gauge",
             "Offsets the checkpoint promised beyond the log end when the partition was loaded (lost data).", 3)):
        w.family(name, kind, help_)
        for row in rows:
            if row[column]:
                w.sample(name, row[column], topic=row[0], partition=row[1])


_QUOTA_STATS = (  # (manager attribute, Kafka metric name, help)
    ("produce", "byte_rate", "Produce bytes per second, per quota sensor (user / client-id)."),
    ("fetch", "byte_rate", "Fetch bytes per second, per quota sensor (user / client-id)."),
    ("request", "request_time", "Request handling time, percent of one second, per quota sensor."),
    ("controller_mutation", "mutation_rate", "Partitions created or deleted per second, per quota sensor."))


def _quotas(w: _Writer, quotas) -> None:
    now = quotas.clock()
    managers = [(attr, getattr(quotas, attr)) for attr, _, _ in _QUOTA_STATS]
    for (attr, stat, help_), (_, m) in zip(_QUOTA_STATS, managers):
        name = f"kafka_server_{m.quota_type.lower()}_{stat}"
        w.family(name, "gauge", help_)
        for user, client_id, s in m.rows(now):
            w.sample(name, s.stat.rate_value(now), user=user, client_id=client_id)
    name = "kafka_server_controllermutation_tokens"
    w.family(name, "gauge", "Credits left in the controller mutation token bucket, per quota sensor.")
    cm = quotas.controller_mutation
    for user, client_id, s in cm.rows(now):
        w.sample(name, s.bucket.value(s.bound, now), user=user, client_id=client_id)
    for _, m in managers:
        name = f"kafka_server_{m.quota_type.lower()}_throttle_time"
        w.family(name, "gauge", f"Average throttle time (ms) of {m.quota_type} quota violations over the last "
                                f"minute, per quota sensor.")
        for user, client_id, s in m.rows(now):
            avg = s.throttle.average_value(now)
            w.sample(name, "NaN" if avg != avg else avg, user=user, client_id=client_id)
    name = "sharebroker_quota_throttle_time_ms_total"
    w.family(name, "counter", "Milliseconds connections were muted for quota violations, by quota type and sensor.")
    for _, m in managers:
        for user, client_id, s in m.rows(now):
            w.sample(name, s.throttle_ms_total, quota_type=m.quota_type, user=user, client_id=client_id)


_CLEANER_GAUGES = (
    ("kafka_log_logcleaner_max_clean_time_secs", "max_clean_time_secs", "Longest last pass of a cleaner, s."),
    ("kafka_log_logcleaner_cleaner_recopy_percent", "cleaner_recopy_percent",
     "Bytes written / bytes read by the cleaners' last passes, percent."),
    ("kafka_log_logcleaner_max_buffer_utilization_percent", "max_buffer_utilization_percent",
     "Fullest offset map of the cleaners' last passes, percent."),
    ("kafka_log_logcleaner_max_compaction_delay_secs", "max_compaction_delay_secs",
     "Longest delay past max.compaction.lag.ms of the logs the cleaners took last, s."),
    ("kafka_log_logcleaner_deadthreadcount", "dead_thread_count", "Cleaner workers that died (replaced at the next pass)."),
    ("kafka_log_logcleanermanager_max_dirty_percent", "max_dirty_percent", "Dirty ratio of the dirtiest log, percent."),
    ("kafka_log_logcleanermanager_time_since_last_run_ms", "time_since_last_run_ms",
     "Time since the cleaner last looked for a log to clean, ms."),
)


def _cleaner(w: _Writer, c) -> None:
    cleaner = getattr(c, "cleaner", None)
    if cleaner is None:
        return
    values = cleaner.metrics()
    for name, key, help_ in _CLEANER_GAUGES:
        w.family(name, "gauge", help_)
        w.sample(name, values[key])
    name = "kafka_log_logcleanermanager_uncleanable_partitions_count"
    w.family(name, "gauge", "Partitions the cleaner gave up on (a pass failed), per log directory.")
    w.sample(name, values["uncleanable_partitions_count"], logDirectory=c.logs.data_dir)


def _client_metrics(w: _Writer, c) -> None:
    """KIP-714: what client instances pushed (broker/client_metrics.py, which documents the scheme)."""
    m = c.client_metrics
    if m is None:
        return
    from broker.client_metrics import uuid_str

    now = c.now_ms()
    instances = m.exposed(now)
    w.family("sharebroker_client_telemetry_instances", "gauge", "Client instances known to the broker (KIP-714).")
    w.sample("sharebroker_client_telemetry_instances", m.live(now))
    for name, counter, help_ in (
            ("sharebroker_client_metric", False, "Client-pushed gauges and non-monotonic sums (KIP-714)."),
            ("sharebroker_client_counter_total", True, "Client-pushed monotonic sums, deltas added up (KIP-714).")):
        w.family(name, "counter" if counter else "gauge", help_)
        for inst in instances:
            iid, cid = uuid_str(inst.instance_id), inst.attrs.get("client_id") or ""
            for s in inst.series.values():
                if s.counter == counter:
                    w.sample(name, s.value, client_instance_id=iid, client_id=cid, name=s.name,
                             attributes=s.attributes)
    name = "sharebroker_client_metric_dropped_series_total"
    w.family(name, "counter", "Series a client pushed beyond the per-instance cap (KIP-714).")
    for inst in instances:
        if inst.dropped_series:
            w.sample(name, inst.dropped_series, client_instance_id=uuid_str(inst.instance_id),
                     client_id=inst.attrs.get("client_id") or "")


class MetricsServer:
    """``GET /metrics`` over a plain asyncio listener on the broker's loop."""

    def __init__(self, components, server, host: str, port: int):
        self.components = components
        self.server = server  # the Kafka listener (connection count)
        self.host, self.port = host, port
        self._acceptors: list[Acceptor] = []
        # written by _serve: its connections (a browser keeps idle ones open); each leaves when it ends
        self._clients: dict[asyncio.Task, asyncio.StreamWriter] = {}
        from broker import status_page  # the page (html with it) loads only with a metrics listener

        interval_ms = components.config.get_int("sharebroker.status.lag.sample.ms", status_page.DEFAULT_SAMPLE_MS)
        self.lag_history = status_page.LagHistory(lambda: observe.group_lags(components), interval_ms / 1000.0)

    async def start(self) -> None:
        # our accept loop, as the Kafka listeners': it survives the open-file limit (broker/acceptor.py)
        for sock in listening_sockets(self.host, self.port):
            acceptor = Acceptor(sock, lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve),
                                name="metrics")
            acceptor.start()
            self._acceptors.append(acceptor)
        self.port = self._acceptors[0].port
        self.lag_history.start()
        log.info("metrics on http://%s:%d/metrics, status page on http://%s:%d/", self.host, self.port,
                 self.host, self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._clients[task] = writer
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            extra: dict[str, str] = {}
            if method != "GET":
                status, body, ctype = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path.split("?")[0] == "/metrics":
                status, ctype = "200 OK", CONTENT_TYPE
                body = render(self.components, len(self.server.connections), self.server.memory)
            elif path.split("?")[0] == "/":
                from broker import status_page

                status, ctype, extra = "200 OK", status_page.CONTENT_TYPE, status_page.HEADERS
                body = status_page.render_page(self.components, self.lag_history, len(self.server.connections))
            else:
                status, body, ctype = "404 Not Found", b"metrics are at /metrics, the status page at /\n", "text/plain"
            head = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{head}"
                         f"Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError,
                ValueError):
            pass  # a broken or silent scraper: drop the connection
        except Exception:
            log.exception("metrics scrape failed")
        finally:
            self._clients.pop(task, None)
            writer.close()

    async def close(self) -> None:
        self.lag_history.close()
        for acceptor in self._acceptors:
            acceptor.close()
        self._acceptors = []
        for writer in list(self._clients.values()):  # idle connections end now, not cancelled at exit
            writer.close()
        if self._clients:
            await asyncio.wait(list(self._clients), timeout=5)
