"""Shared plumbing for the bench scripts: target selection, topic creation, tables."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import threading
import time
import uuid
from typing import Iterator, Optional, Sequence

try:  # run as `python bench/x.py` or as `python -m bench.x`
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import peers  # type: ignore[no-redef]

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def add_target_args(ap: argparse.ArgumentParser, default_start: Optional[str] = None,
                    choices: Sequence[str] = ("ours", "ours-pagecache", "tansu", "kafka", "both", "ours+kafka",
                                              "durability")) -> None:
    g = ap.add_argument_group("which broker(s)")
    g.add_argument("--start", choices=list(choices), default=None,
                   help="start the broker(s) here, one after the other (default: %s)"
                        % (default_start or "none; give --bootstrap"))
    g.add_argument("--bootstrap", action="append", default=[], metavar="HOST:PORT",
                   help="an already running broker on 127.0.0.1 (repeat for a side-by-side comparison)")
    g.add_argument("--name", action="append", default=[],
                   help="label for each --bootstrap, in order (e.g. ours, tansu)")
    g.add_argument("--pid", action="append", type=int, default=[],
                   help="broker pid for each --bootstrap (default: found from the listening port)")
    g.add_argument("--keep-data", action="store_true", help="keep the temp data dir / logs of started brokers")
    g.add_argument("--json", metavar="FILE", default=None, help="also write the figures as JSON to FILE")
    ap.set_defaults(_default_start=default_start)


def targets(args: argparse.Namespace) -> list[tuple[str, object]]:
    """List of (label, spec) where spec is a kind to start or a BrokerProc for an external broker."""
    out: list[tuple[str, object]] = []
    start = args.start or (None if args.bootstrap else args._default_start)
    if start == "both":
        out += [("ours", "ours"), ("tansu", "tansu")]
    elif start == "ours+kafka":
        out += [("ours", "ours"), ("kafka", "kafka")]
    elif start == "durability":  # durable by default (fsync), page-cache mode, Kafka 4.4 (page cache)
        out += [("ours", "ours"), ("ours-pagecache", "ours-pagecache"), ("kafka", "kafka")]
    elif start:
        out.append((start, start))
    for i, bs in enumerate(args.bootstrap):
        name = args.name[i] if i < len(args.name) else bs
        pid = args.pid[i] if i < len(args.pid) else None
        out.append((name, peers.external(bs, name, pid)))
    if not out:
        raise SystemExit("nothing to benchmark: give --start ours|tansu|kafka|both|ours+kafka or --bootstrap HOST:PORT")
    return out


def open_target(spec: object, args: argparse.Namespace) -> peers.BrokerProc:
    if isinstance(spec, peers.BrokerProc):
        return spec
    return peers.start_broker(str(spec), keep=args.keep_data)


def each_broker(args: argparse.Namespace) -> Iterator[peers.BrokerProc]:
    """Yield the brokers one at a time; started ones are stopped before the next starts.

    A broker that fails to start is reported and skipped.
    """
    if threading.current_thread() is threading.main_thread():
        peers.terminate_on_sigterm()
    for label, spec in targets(args):
        try:
            bp = open_target(spec, args)
        except Exception as e:  # noqa: BLE001 -- report and go on with the next broker
            print(f"!! {label}: could not start: {e}", file=sys.stderr, flush=True)
            continue
        bp.name = label
        if bp.pid is None:
            print(f"!! {label}: pid unknown, broker CPU figures will be nan", file=sys.stderr)
        print(f"== {label} at {bp.bootstrap} (pid {bp.pid})", flush=True)
        try:
            yield bp
        finally:
            bp.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0) -> None:
    """Create ``topic`` and wait until its metadata shows every partition with a leader.

    If the broker refuses CreateTopics (e.g. not implemented yet), fall back to
    auto-creation through a producer's metadata request and say so.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta_client = admin
    try:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=timeout, request_timeout=timeout)[topic]
        fut.result(timeout)
    except KafkaException as e:
        print(f"!! CreateTopics failed ({e}); relying on auto-creation (partition count = broker default)",
              file=sys.stderr, flush=True)
        from confluent_kafka import Producer

        meta_client = Producer({"bootstrap.servers": bootstrap})
        partitions = 0
    deadline = time.monotonic() + timeout
    while True:
        md = meta_client.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and t.partitions and (
                partitions == 0 or len(t.partitions) == partitions) and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise KafkaException(f"topic {topic} not ready after {timeout}s: {t and t.error}")
        time.sleep(0.1)


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def fmt(v: object, nd: int = 2) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{nd}f}"
    return str(v)


def table(rows: list[dict], cols: list[str], out=sys.stdout) -> None:
    if not rows:
        print("(no results)", file=out)
        return
    cells = [[fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)), file=out)
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)), file=out)
    out.flush()


def ratio(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        return float("nan")


def write_json(path: Optional[str], payload: dict) -> None:
    if not path:
        return
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    print(f"(figures written to {path})")


def roots(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``--root [NAME=]DIR`` options as (name, absolute dir); none: this checkout."""
    out = []
    for spec in specs or [str(peers.REPO_ROOT)]:
        name, sep, path = spec.partition("=")
        path = os.path.abspath(path if sep else spec)
        out.append((name if sep else os.path.basename(path), path))
    return out


def client_cpu() -> float:
    t = os.times()
    return t.user + t.system


class LagTicker:
    """A ticker on the running loop every ``period`` s; ``lags`` holds how late each tick came (s):
    the longest the loop went without a turn, which is what every other connection waits; ``cpu``
    the loop thread's CPU time between two ticks (s): the same without the time the thread waited
    for a CPU, which on a busy machine is most of a long lag."""

    def __init__(self, period: float = 0.001):
        self.period, self.lags, self.cpu, self.running = period, [], [], True
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self.running:
            t, c = time.perf_counter(), time.thread_time()
            await asyncio.sleep(self.period)
            self.lags.append(time.perf_counter() - t - self.period)
            self.cpu.append(time.thread_time() - c)

    async def stop(self) -> None:
        self.running = False
        await self._task
