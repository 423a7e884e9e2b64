"""Helpers for the operator-CLI tests (test_cli.py, test_cli_share_offsets.py): run a command as a
subprocess, parse its tables, and drive share groups with librdkafka's ShareConsumer."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer, ShareConsumer

from admin.client import AdminClient
from admin.common import list_groups, state_name
from tests.support import create_topic, set_group_configs, unique, until

ROOT = Path(__file__).resolve().parents[2]

# Short share heartbeats so members get their assignment (and leave) quickly.
BROKER_CONFIG = {
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "300",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "6000",
}


def cli(module: str, bootstrap: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m admin.<module> --bootstrap-server <bootstrap> args...`` from the project root."""
    return subprocess.run([sys.executable, "-m", f"admin.{module}", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def ok_json(r: subprocess.CompletedProcess):
    return json.loads(ok(r))


def table(stdout: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, rows) of a Kafka-style table (whitespace-separated cells; the first
    non-blank line is the header). Columns whose header holds a space, such as
    ``COORDINATOR (ID)``, are rejoined."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    header = lines[0].replace("COORDINATOR (ID)", "COORDINATOR(ID)").split()
    rows = []
    for ln in lines[1:]:
        cells = ln.replace("  (", "(").split()
        rows.append(cells)
    return header, rows


def records(table_out: str) -> list[dict[str, str]]:
    header, rows = table(table_out)
    return [dict(zip(header, r)) for r in rows]


def produce(bootstrap: str, topic: str, n: int, partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def share_group(bootstrap: str) -> str:
    group = unique("g")
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    return group


def share_consumer(bootstrap: str, group: str, topic: str, client_id: str = "cli-test") -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id})
    c.subscribe([topic])
    return c


def consume(c: ShareConsumer, n: int, timeout: float = 30) -> list:
    """Poll until ``n`` records arrived (implicit acknowledgement) and acknowledge them."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"received {len(out)} of {n} records in {timeout}s"
        out += [m for m in c.poll(0.5) or [] if m.error() is None]
    c.commit_sync()
    return out


def drained_group(bootstrap: str, prefix: str, partitions: int, n: int) -> tuple[str, str]:
    """(topic, group): ``n`` records on a new topic, all consumed and acknowledged by a member
    of a new share group, which then left (the group is Empty)."""
    topic = create_topic(bootstrap, partitions, prefix=prefix)
    produce(bootstrap, topic, n, partitions=partitions)
    group = share_group(bootstrap)
    c = share_consumer(bootstrap, group, topic)
    consume(c, n)
    c.close()
    wait_state(bootstrap, group, "Empty")
    return topic, group


def group_state(bootstrap: str, group: str) -> str | None:
    with AdminClient(bootstrap, timeout_ms=10000) as a:
        for g in list_groups(a, ["share"]):
            if g.group_id == group:
                return state_name(g.group_state)
    return None


def wait_state(bootstrap: str, group: str, state: str, timeout: float = 20) -> None:
    until(lambda: group_state(bootstrap, group) == state, timeout, f"share group {group} {state}")
