"""The Grafana dashboard and the Prometheus alert rules in deploy/ must not drift from the code.

Every PromQL expression of ``deploy/grafana/sharebroker.json`` and ``deploy/prometheus/alerts.yml``
is lexed; each metric it names must exist on ``/metrics`` of a running broker (parsed with
prometheus_client) with the labels the expression matches on, groups by and shows in legends.
The broker is driven first so that the share-group series exist: a share group with lag whose
consumer accepted, released and rejected records, a dead-letter topic with a record, a consumer
group with committed offsets.  ``promtool`` (Debian's prometheus package; tools/test.sh installs it)
checks the syntax of both files and runs the alert rules' unit tests (``alerts_test.yml``).
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support import create_topic, set_group_configs, unique, until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "sharebroker.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
# Labels Prometheus adds to every scraped series (the target's), absent from /metrics itself.
TARGET_LABELS = {"instance", "job"}
GRAFANA_MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


# ------------------------------------------------------------------------------------------- PromQL
_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<num>0x[0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
  | (?P<id>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){},@:])
""", re.X)
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile", "limitk", "limit_ratio"}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = LABEL_LISTS | {"bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot lex {expr[pos:pos + 20]!r} in {expr!r}")
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def _unquote(s: str) -> str:
    return s[1:-1] if s[0] == "`" else ast.literal_eval(s)  # Go's escapes, as far as label values use them


def analyse(expr: str) -> tuple[list[tuple[str | None, list[tuple[str, str, str]]]], set[str]]:
    """(selectors as (metric name or None, [(label, op, value)]), labels named in by/on/... lists)."""
    toks = tokens(expr)
    selectors, grouping = [], set()

    def matchers(i: int) -> tuple[list, int]:  # toks[i] is "{"
        found, i = [], i + 1
        while toks[i][1] != "}":
            (k1, label), (_, op), (k3, value) = toks[i:i + 3]
            assert k1 == "id" and op in ("=", "!=", "=~", "!~") and k3 == "str", f"bad matcher in {expr!r}"
            found.append((label, op, _unquote(value)))
            i += 3
            if toks[i][1] == ",":
                i += 1
        return found, i + 1

    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "id" and text in LABEL_LISTS:
            i += 1
            if nxt == "(":
                i += 1
                while toks[i][1] != ")":
                    if toks[i][0] == "id":
                        grouping.add(toks[i][1])
                    i += 1
                i += 1
        elif kind == "id" and (text in KEYWORDS or nxt == "(" or (text in AGGREGATIONS and nxt in LABEL_LISTS)):
            i += 1  # a keyword, a function or an aggregation
        elif kind == "id":
            found = []
            i += 1
            if nxt == "{":
                found, i = matchers(i)
            selectors.append((text, found))
        elif text == "{":
            found, i = matchers(i)
            selectors.append((None, found))
        else:
            i += 1
    return selectors, grouping


def test_the_lexer_finds_metrics_labels_and_grouping():
    sel, grouping = analyse('histogram_quantile(0.99, sum by (le, request) (rate(x_bucket{instance=~"$i", '
                            'request="Fetch"}[5m:1m]))) / on (request) group_left(topic) y offset 30m '
                            'and sum(z) without (a) > bool 1e3 or count(w{__name__!=""})')
    assert sel == [("x_bucket", [("instance", "=~", "$i"), ("request", "=", "Fetch")]), ("y", []), ("z", []),
                   ("w", [("__name__", "!=", "")])]
    assert grouping == {"le", "request", "topic", "a"}


# ------------------------------------------------------------------------------------------- the files
def dashboard_queries() -> list[tuple[str, str, str]]:
    """(where, expr with Grafana's macros replaced, legend format) of every panel target and variable."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                out.append((f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"], t.get("legendFormat", "")))
    walk(dash["panels"])
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"]["query"])
            assert m, v["query"]
            out.append((f"variable {v['name']}", f"group by ({m.group(2)}) ({m.group(1)})", ""))
    return [(where, _macros(expr), legend) for where, expr, legend in out]


def _macros(expr: str) -> str:
    for k, v in GRAFANA_MACROS.items():
        expr = expr.replace(k, v)
    return expr


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_the_files_are_well_formed():
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    boxes = [(p["gridPos"]["x"], p["gridPos"]["y"], p["gridPos"]["w"], p["gridPos"]["h"]) for p in dash["panels"]]
    for n, (x, y, w, h) in enumerate(boxes):
        assert 0 <= x and x + w <= 24, f"panel {ids[n]} is wider than the grid"
        for x2, y2, w2, h2 in boxes[n + 1:]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, f"panel {ids[n]} overlaps another"
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "instance", "group"}

    rules = alert_rules()
    assert {r["alert"] for r in rules} == {"ShareGroupBacklogGrowing", "ShareGroupDeadLetterRecords",
                                           "SharePartitionStartOffsetStuck", "BrokerOpenFilesNearLimit",
                                           "BrokerRequestMemoryNearLimit", "ClientQuotaThrottled"}
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical") and r["annotations"]["summary"], r["alert"]


# ------------------------------------------------------------------------------------------- the broker
def scrape_series(url: str) -> dict[str, list[dict]]:
    """{series name as Prometheus stores it: [label sets]} from one scrape."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    # prometheus_client's parser names a counter's samples "<family>_total" (OpenMetrics) even where the
    # exposition wrote "<family>" (our JMX-style "..._count" counters); Prometheus stores what was written.
    counters = set(re.findall(r"^# TYPE (\S+) counter$", text, re.M))
    out: dict[str, list[dict]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            if family.type == "counter" and name == family.name + "_total" and family.name in counters:
                name = family.name
            assert re.search(rf"^{re.escape(name)}[{{ ]", text, re.M), name
            out[name].append(s.labels)
    return out


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(series name, sorted label pairs): value}"""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(sm.name, tuple(sorted(sm.labels.items()))): sm.value
            for family in text_string_to_metric_families(text) for sm in family.samples}


def drive(bs: str) -> tuple[str, str, str]:
    """A share group with lag after accepts, a release and a reject (to its DLQ); a consumer group."""
    topic = create_topic(bs, 1)
    dlq = create_topic(bs, 1, prefix="dlq.t", errors_deadletterqueue_group_enable="true")
    group, cgroup = unique("sg"), unique("cg")
    set_group_configs(bs, group, share_auto_offset_reset="earliest", errors_deadletterqueue_topic_name=dlq)
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce(topic, b"v%d" % i, partition=0)
    assert p.flush(15) == 0
    sc = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    sc.subscribe([topic])
    done: set[int] = set()
    released = []
    try:
        def step():
            for m in sc.poll(0.5) or []:
                if m.error() is not None:
                    continue
                if m.offset() == 3:
                    sc.acknowledge(m, AcknowledgeType.REJECT)
                    done.add(3)
                elif m.offset() == 5 and not released:
                    sc.acknowledge(m, AcknowledgeType.RELEASE)
                    released.append(5)
                else:
                    sc.acknowledge(m, AcknowledgeType.ACCEPT)
                    done.add(m.offset())
            sc.commit_sync(30)
            return len(done) == 10
        until(step, 60, "all 10 records accepted or rejected, one released once")
    finally:
        sc.close()
    for i in range(4):  # left waiting: lag 4
        p.produce(topic, b"w%d" % i, partition=0)
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": cgroup, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 6)], asynchronous=False)
    finally:
        c.close()
    throttle_a_client(bs, create_topic(bs, 1, prefix="quota"))
    return topic, group, dlq


def throttle_a_client(bs: str, topic: str) -> None:
    """A client id over its produce quota (throttled once) that also fetches: the quota series."""
    from protocol.messages.alter_client_quotas import AlterClientQuotasRequest as A
    from tests.wire import WireClient

    with WireClient(bs) as w:
        resp = w.request(A(entries=[A.EntryData(entity=[A.EntityData(entity_type="client-id", entity_name="dash")],
                                                ops=[A.OpData(key="producer_byte_rate", value=1000.0),
                                                     A.OpData(key="consumer_byte_rate", value=1e6)])]), 1)
    assert [e.error_code for e in resp.entries] == [0]
    throttled: list = []
    p = Producer({"bootstrap.servers": bs, "client.id": "dash", "throttle_cb": lambda ev: throttled.append(ev)})
    p.produce(topic, b"q" * 20_000, partition=0)  # 20 kB at 1 kB/s: over the 10 s window at once
    assert p.flush(15) == 0
    until(lambda: p.poll(0.1) is not None and throttled, 15, "the producer told of its throttle")
    c = Consumer({"bootstrap.servers": bs, "group.id": unique("q"), "client.id": "dash", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        until(lambda: any(m.error() is None for m in c.consume(10, 0.2)), 15, "a fetch by the quota's client")
    finally:
        c.close()


@contextlib.contextmanager
def telemetry_share_consumer(b, topic: str):
    """A share consumer pushing its metrics (KIP-714) while the block runs: the client-telemetry series."""
    from tests.integration.test_client_telemetry import alter

    assert alter(b.bootstrap, "dashboard", metrics="org.apache.kafka.consumer.share.", interval_ms="500") == (0, None)
    sc = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": unique("tg"), "client.id": "dash-share"})
    sc.subscribe([topic])
    try:
        def pushed() -> bool:
            sc.poll(0.1)
            return any(k[0] == "sharebroker_client_metric" and ("client_id", "dash-share") in k[1]
                       for k in scrape(b.metrics_url))
        until(pushed, 60, "the share consumer's pushed metrics on /metrics")
        yield
    finally:
        sc.close()


def test_every_metric_and_label_of_the_dashboard_and_alerts_exists(broker_factory):
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0"})
    topic, group, dlq = drive(b.bootstrap)

    lag_key = ("sharebroker_share_partition_lag", (("group", group), ("partition", "0"), ("topic", topic)))
    dlq_key = ("sharebroker_dlq_records_total", (("topic", dlq),))
    # the rejected record reaches the DLQ after its acknowledgement was answered (KIP-1191's second phase)
    s = until(lambda: (lambda s: s.get(lag_key) == 4 and s.get(dlq_key) == 1 and s)(scrape(b.metrics_url)), 30,
              "lag 4 and one dead-letter record")
    assert s[("sharebroker_dlq_stored_records", (("topic", dlq),))] == 1
    assert s[("sharebroker_group_members", (("group", group), ("protocol", "share")))] == 0
    with telemetry_share_consumer(b, topic):
        series = scrape_series(b.metrics_url)

    queries = dashboard_queries() + [(f"alert {r['alert']}", r["expr"], "") for r in alert_rules()]
    problems = []
    for where, expr, legend in queries:
        selectors, grouping = analyse(expr)
        assert selectors, f"{where}: no metric in {expr!r}"
        available = set(TARGET_LABELS)
        for metric, found in selectors:
            if metric is None or metric not in series:
                problems.append(f"{where}: metric {metric} is not on /metrics")
                continue
            samples = series[metric]
            names = {k for ls in samples for k in ls}
            available |= names
            for label, op, value in found:
                if label in TARGET_LABELS:
                    continue
                if label not in names:
                    problems.append(f"{where}: {metric} has no label {label}")
                elif op == "=" and "$" not in value and not any(ls.get(label) == value for ls in samples):
                    problems.append(f"{where}: {metric} has no series with {label}={value!r}")
        shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        for label in sorted((grouping | shown) - available):
            problems.append(f"{where}: label {label} is on none of its metrics")
    assert not problems, "\n".join(problems)


def test_the_limit_gauges_the_alerts_use_tell_the_truth(broker_factory):
    """process_open_fds / process_max_fds against the broker process's own /proc entries; the request
    memory pool (queued.max.request.bytes) holding exactly the received bytes of a frame announced but not all sent."""
    capacity = 5_000_000
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0", "queued.max.request.bytes": capacity,
                        "socket.request.max.bytes": capacity})  # the pool holds the largest request (KafkaConfig)
    pid = b.proc.pid
    soft = int(re.search(r"^Max open files\s+(\d+)", Path(f"/proc/{pid}/limits").read_text(), re.M).group(1))

    def open_fds() -> tuple[float, int]:
        """(process_open_fds, the broker's /proc/PID/fd count) once that count held still across the scrape."""
        def stable():
            n = len(os.listdir(f"/proc/{pid}/fd"))
            v = scrape(b.metrics_url)[("process_open_fds", ())]
            return n == len(os.listdir(f"/proc/{pid}/fd")) and (v, n)
        return until(stable, 15, "an open-file count holding still")

    def accepted(clients: list) -> int:
        """How many of the `clients`' connections the broker has accepted: sockets it holds (by inode)
        whose peer is one of their ports (a scrape's socket opening or closing meanwhile does not count)."""
        ports = {c.getsockname()[1] for c in clients}
        inodes = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if int(f[2].rsplit(":", 1)[1], 16) in ports:
                inodes.add(f[9])
        held = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if link.startswith("socket:["):
                held.add(link[8:-1])
        return len(inodes & held)

    s = scrape(b.metrics_url)
    assert s[("process_max_fds", ())] == soft
    assert s[("kafka_network_socketserver_memorypoolused", ())] == 0
    assert s[("kafka_network_socketserver_memorypoolavailable", ())] == capacity
    value, fds = open_fds()
    # while it counts: the scrape's own socket, the directory it lists, maybe the last scrape's socket closing
    assert 1 <= value - fds <= 3

    host, port = b.bootstrap.split(":")
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
    try:
        frame, sent = 1_000_000, 200_000
        socks[0].sendall(struct.pack(">i", frame) + b"\0" * sent)  # a frame announced, part of it sent
        # a partial frame holds the bytes it received, not what it announced (broker/request_memory.py)
        s = until(lambda: (lambda s: s[("kafka_network_socketserver_memorypoolused", ())] == sent and s)(
            scrape(b.metrics_url)), 15, "the received bytes of the announced frame held")
        assert s[("kafka_network_socketserver_memorypoolavailable", ())] == capacity - sent
        until(lambda: accepted(socks) == 20, 15, "the 20 connections accepted")
        more, fds = open_fds()
        assert 1 <= more - fds <= 3 and more > value
    finally:
        for sock in socks:
            sock.close()
    until(lambda: scrape(b.metrics_url)[("kafka_network_socketserver_memorypoolused", ())] == 0, 15,
          "the bytes given back when the connection closed")


# ------------------------------------------------------------------------------------------- promtool
def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is needed (Debian's prometheus package; tools/test.sh installs it)")
    return path


def test_promtool_checks_the_rules_and_runs_their_unit_tests():
    promtool = _promtool()
    r = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS: 6 rules found" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([promtool, "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_promtool_parses_every_dashboard_query(tmp_path):
    promtool = _promtool()
    queries = dashboard_queries()
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{n}", "expr": expr} for n, (_, expr, _) in enumerate(queries)]}]}
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"SUCCESS: {len(queries)} rules found" in r.stdout, r.stdout + r.stderr
