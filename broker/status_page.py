"""The status page (ours; Kafka has none): ``GET /`` on the metrics listener.

One small HTML page with inline CSS and inline SVG, no script and no external asset (the response's
Content-Security-Policy forbids both): share groups with their state, members and share partitions
(start offset, in-flight, archived, lag), consumer groups with state, members and lag, a sparkline
of each group's lag over the last hour, the dead-letter topics with their record counts, each share
consumer's own view as it pushes it with KIP-714 (poll idle ratio, records per request, acknowledgement errors),
the storage errors and failed accepts since start-up (by operation and errno, with the latest one;
`broker/log/faults.py`), and the SASL logins per listener and mechanism with the failures by cause
(`broker/security/logins.py`).

The numbers come from ``broker.observe``, the same views the Prometheus exposition uses; the page
is built on request from memory (no log is read) on the metrics listener, never on a Kafka request.
The sparklines come from :class:`LagHistory`, a ring of samples the broker takes on a loop timer
(every ``sharebroker.status.lag.sample.ms``, 30 s by default: 120 samples make the hour).
Every name on the page (groups, topics, members, client ids and hosts are user input) is escaped.
"""
from __future__ import annotations

import asyncio
import html
import time
from array import array
from typing import Callable

from broker import observe
from broker.acceptor import ACCEPT_FAULTS
from broker.log.faults import STORAGE
from broker.security import logins
from broker.share.config import DLQ_TOPIC_NAME

SLOTS = 120                     # samples per group: one hour at the default interval
DEFAULT_SAMPLE_MS = 30_000
MISSING = -1                    # a slot in which the group had no lag to sample (absent, or no live partition)
CONTENT_TYPE = "text/html; charset=utf-8"
# No script, no external anything: the page is inert even if a name slipped through unescaped.
HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
           "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
Key = tuple[str, str]           # ("share" | "consumer", group id)


class LagHistory:
    """Each group's total lag, sampled every ``interval_s`` into a ring of ``slots`` samples.

    One ring of sample times is shared by every group; each group has an ``array('q')`` of the
    same length (``MISSING`` where it had no sample), so a group costs 8 bytes a slot.
    """

    def __init__(self, sample: Callable[[], dict[Key, int]], interval_s: float, slots: int = SLOTS,
                 clock: Callable[[], float] = time.time):
        self._sample = sample           # group_lags(components), called once a tick
        self.interval_s = interval_s
        self.slots = slots
        self.clock = clock
        # all written by tick() only; they live as long as this object (the metrics listener's)
        self._times = array("d", [0.0] * slots)     # wall-clock seconds of each slot
        self._series: dict[Key, array] = {}          # dropped once a group has no sample left in the ring
        self._next = 0                               # the slot the next tick writes
        self._handle: asyncio.TimerHandle | None = None

    @property
    def window_s(self) -> float:
        return self.interval_s * self.slots

    def start(self) -> None:
        """Take a sample now and then every ``interval_s`` on the running loop, until :meth:`close`."""
        self._run()

    def _run(self) -> None:
        self.tick()
        self._handle = asyncio.get_running_loop().call_later(self.interval_s, self._run)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def tick(self) -> None:
        """Write one sample of every group's lag into the next slot."""
        lags = self._sample()
        i = self._next
        self._times[i] = self.clock()
        for key, arr in list(self._series.items()):
            if key not in lags:
                arr[i] = MISSING
                if max(arr) == MISSING:
                    del self._series[key]
        for key, lag in lags.items():
            arr = self._series.get(key)
            if arr is None:
                arr = self._series[key] = array("q", [MISSING] * self.slots)
            arr[i] = lag
        self._next = (i + 1) % self.slots

    def points(self, key: Key) -> list[tuple[float, int]]:
        """(time, lag) of the group's samples, oldest first."""
        arr = self._series.get(key)
        if arr is None:
            return []
        order = list(range(self._next, self.slots)) + list(range(self._next))
        return [(self._times[j], arr[j]) for j in order if arr[j] != MISSING]


# ---------------------------------------------------------------------------------------------- page
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1a1a1a;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin:1em 0 .3em;font-family:ui-monospace,monospace}
table{border-collapse:collapse;margin:.3em 0 .8em;background:#fff}
th,td{border:1px solid #ddd;padding:.2em .6em;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#eef1f5;font-weight:600}.meta{color:#555}.empty{color:#777;font-style:italic}
.summary span{margin-right:1.2em}.state{font-weight:600}
svg.spark{vertical-align:middle;background:#fff;border:1px solid #ddd}
svg.spark text{fill:#999;font-size:11px}svg.spark polyline{fill:none;stroke:#c0392b;stroke-width:1.5}.spark-max{color:#777;font-size:.85em;margin-left:.4em}
section.group{margin-bottom:1.2em}
"""
_SPARK_W, _SPARK_H = 240, 36


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _n(value: int) -> str:
    return f"{value:,}"


def _table(headers: list[str], rows: list[list[str]], cls: str, numeric: set[int] = frozenset()) -> str:
    """Cells in ``rows`` are already HTML; columns in ``numeric`` are right-aligned."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
                                     for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _window_text(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 120 else f"{seconds:g} s"


def sparkline(points: list[tuple[float, int]], now: float, window_s: float) -> str:
    """An inline SVG polyline of (time, lag) over [now - window_s, now]; its title says the figures."""
    label = f"lag over the last {_window_text(window_s)}"
    if not points:
        return (f'<svg class="spark" width="{_SPARK_W}" height="{_SPARK_H}" role="img"><title>{label}: no samples yet'
                f'</title><text x="6" y="{_SPARK_H // 2 + 4}">no samples yet</text></svg>')
    top = max(lag for _, lag in points)
    start = now - window_s
    coords = []
    for t, lag in points:
        x = max(0.0, min(1.0, (t - start) / window_s)) * (_SPARK_W - 2) + 1
        y = _SPARK_H - 2 - (lag / top * (_SPARK_H - 4) if top else 0)
        coords.append(f"{x:.1f},{y:.1f}")
    if len(coords) == 1:  # one sample: a short flat stroke so it shows
        x, y = coords[0].split(",")
        coords.insert(0, f"{max(float(x) - 3, 0):.1f},{y}")
    title = f"{label}: now {_n(points[-1][1])}, max {_n(top)}, min {_n(min(lag for _, lag in points))}"
    return (f'<svg class="spark" width="{_SPARK_W}" height="{_SPARK_H}" viewBox="0 0 {_SPARK_W} {_SPARK_H}" '
            f'role="img"><title>{_e(title)}</title><polyline points="{" ".join(coords)}"/></svg>'
            f'<span class="spark-max">max {_n(top)}</span>')


def _assigned(c, member) -> str:
    parts = []
    for tid, ps in sorted(member.assigned.items()):
        info = c.logs.topic_by_id(tid)
        parts.append(f"{info.name if info else tid.hex()}:{','.join(str(p) for p in sorted(ps))}")
    return " ".join(parts)


def render_page(c, history: LagHistory, connections: int) -> bytes:
    """The whole page, from the components' memory."""
    now = history.clock()
    shares = observe.share_partitions(c)
    share_rows: dict[str, list[observe.SharePartitionView]] = {}
    for v in shares:
        share_rows.setdefault(v.group, []).append(v)
    consumer_lag: dict[str, int] = {}
    for group, _t, _p, lag in observe.consumer_lags(c):
        consumer_lag[group] = consumer_lag.get(group, 0) + lag
    groups = sorted(c.groups.groups.items())
    window = history.window_s

    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" "
           f"content=\"30\"><title>sharebroker status</title><style>{_CSS}</style></head><body>",
           "<h1>sharebroker status</h1>",
           f'<p class="meta">node {c.node.node_id} · cluster {_e(c.node.cluster_id)} · {_e(c.node.host)}:'
           f"{c.node.port} · {connections} connection(s) · "
           f"{_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now)))} · "
           f'<a href="/metrics">/metrics</a></p>']

    out.append('<h2 id="share-groups">Share groups</h2>')
    share_groups = [(gid, g) for gid, g in groups if g.GROUP_TYPE == "share"]
    if not share_groups:
        out.append('<p class="empty">No share groups.</p>')
    for gid, g in share_groups:
        rows = sorted(share_rows.get(gid, []), key=lambda v: (v.topic, v.partition))
        lag = sum(v.lag for v in rows)
        dlq = c.group_configs.get(gid, DLQ_TOPIC_NAME)
        out.append(f'<section class="group share-group"><h3>{_e(gid)}</h3><p class="summary">'
                   f'<span>state <span class="state">{_e(g.state_name())}</span></span> '
                   f"<span>members <b>{len(g.members)}</b></span> <span>lag <b>{_n(lag)}</b></span> "
                   + (f"<span>DLQ <b>{_e(dlq)}</b></span> " if dlq else "")
                   + f"<span>lag, last {_window_text(window)} "
                   + sparkline(history.points(("share", gid)), now, window) + "</span></p>")
        if g.members:
            out.append(_table(["Member", "Client id", "Host", "Assigned"],
                              [[_e(m.member_id), _e(m.client_id), _e(m.client_host), _e(_assigned(c, m))]
                               for _, m in sorted(g.members.items())], "members"))
        if rows:
            out.append(_table(["Topic", "Partition", "Start offset", "In-flight", "Archived", "Lag"],
                              [[_e(v.topic), str(v.partition), _n(v.start_offset), _n(v.in_flight),
                                _n(v.archived), _n(v.lag)] for v in rows], "share-partitions", {1, 2, 3, 4, 5}))
        else:
            out.append('<p class="empty">No share partition loaded since start-up.</p>')
        out.append("</section>")

    out.append('<h2 id="consumer-groups">Consumer groups</h2>')
    consumer_groups = [(gid, g) for gid, g in groups if g.GROUP_TYPE != "share"]
    if consumer_groups:
        out.append(_table(["Group", "Protocol", "State", "Members", "Lag", f"Lag, last {_window_text(window)}"],
                          [[_e(gid), _e(g.GROUP_TYPE), _e(g.state_name()), str(len(g.members)),
                            _n(consumer_lag.get(gid, 0)), sparkline(history.points(("consumer", gid)), now, window)]
                           for gid, g in consumer_groups], "consumer-groups", {3, 4}))
    else:
        out.append('<p class="empty">No consumer groups.</p>')

    out.append('<h2 id="dlq">Dead-letter topics</h2>')
    dlqs = observe.dlq_topics(c)
    if dlqs:
        out.append(_table(["Topic", "Records", "Appended", "Share groups"],
                          [[_e(v.topic), _n(v.stored), _n(v.appended), _e(", ".join(v.groups))] for v in dlqs],
                          "dlq-topics", {1, 2}))
    else:
        out.append('<p class="empty">No dead-letter topics.</p>')

    out.append('<h2 id="share-consumers">Share consumers (client telemetry)</h2>')
    consumers = observe.share_consumers(c, int(now * 1000))
    if consumers:  # KIP-714: what each share consumer pushed (README "Client telemetry")
        def fmt(v: observe.ShareConsumerView, key: str, digits: int) -> str:
            x = v.values.get(key)
            return "–" if x is None or x != x else (f"{x:.{digits}f}" if digits else _n(int(x)))  # NaN: no sample yet
        out.append(_table(["Client id", "Client instance", "Software", "Poll idle ratio", "Records / request",
                           "Records consumed", "Ack errors", "Last push"],
                          [[_e(v.client_id), _e(v.instance_id), _e(v.software), fmt(v, "poll_idle_ratio", 2),
                            fmt(v, "records_per_request", 1), fmt(v, "records_consumed", 0),
                            fmt(v, "ack_errors", 0), f"{v.pushed_ms_ago / 1000:.0f} s ago"] for v in consumers],
                          "share-consumers", {3, 4, 5, 6}))
    else:
        out.append('<p class="empty">No share consumer pushes its metrics (subscribe with '
                   '<code>kafka-configs.sh --entity-type client-metrics</code>).</p>')

    out.append('<h2 id="storage">Storage faults</h2>')
    faults = observe.storage_faults(c)
    if faults:  # broker/log/README.md, "Failed writes"
        out.append(_table(["Topic", "Partition", "Failed writes", "Offsets missing at start-up"],
                          [[_e(t), str(p), _n(errors), _n(missing)] for t, p, errors, missing in faults],
                          "storage-faults", {1, 2, 3}))
    else:
        out.append('<p class="empty">No failed writes since start-up.</p>')
    out.append(_faults_section())
    out.append(_logins_section())
    out.append("</body></html>")
    return "".join(out).encode()


def _faults_section() -> str:
    """Storage failures and failed accepts since start-up, by operation and error, with the latest one."""
    rows = [[_e(op), _e(err), _n(n)] for (op, err), n in sorted(STORAGE.counts.items())]
    rows += [[_e(f"{op} (connections)"), _e(err), _n(n)] for (op, err), n in sorted(ACCEPT_FAULTS.counts.items())]
    out = ['<h2 id="storage-errors">Storage errors by operation</h2>']
    if not rows:
        out.append('<p class="empty">No storage error since start-up.</p>')
        return "".join(out)
    out.append(_table(["Operation", "Error", "Count"], rows, "storage-errors", {2}))
    for fault in (STORAGE, ACCEPT_FAULTS):
        if fault.last is not None:
            at, op, path, reason = fault.last
            out.append(f'<p class="meta">latest: {_e(time.strftime("%H:%M:%S UTC", time.gmtime(at)))} '
                       f"{_e(op)} {_e(path)}: {_e(reason)}</p>")
    return "".join(out)


def _logins_section() -> str:
    """SASL logins since start-up per listener and mechanism, and the failures by cause."""
    rows = [[_e(lst), _e(mech), _e(kind), _n(n)] for (lst, mech, kind), n in sorted(logins.SUCCEEDED.items())]
    rows += [[_e(lst), _e(mech), _e(f"failed: {cause}"), _n(n)]
             for (lst, mech, cause), n in sorted(logins.FAILED.items())]
    if not rows:
        return ""
    return '<h2 id="logins">Logins</h2>' + _table(["Listener", "Mechanism", "Outcome", "Count"], rows, "logins", {3})
