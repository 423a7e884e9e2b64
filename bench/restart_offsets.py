"""Restart time after a long offset-commit history, before and after, in one run.

A broker (the last ``--root``) creates a topic of ``--partitions`` (100) partitions and
receives ``--commits`` (1,000,000) offset commits over them: OffsetCommit requests of one
group, one commit per partition each, pipelined over one connection, what a consumer's
auto-commit leaves in ``__consumer_offsets`` after hours (about 85 MB). Two data
directories are kept:

* ``history``: that log as written, the log cleaner off (``log.cleaner.enable=false``, also
  for its restarts): what a restart replays without compaction;
* ``compacted``: the same commits with the cleaner on, kept running until the cleaner
  checkpoint of ``__consumer_offsets`` reached its active segment (at most ``--settle-s``);
  what a broker that ran for a while restarts with.

Then, for each root, variant and shutdown (``clean``: SIGTERM, ``kill9``: the broker is
started on a copy, left to load, and killed with SIGKILL), a copy of the directory is
restarted and the bench measures from spawn: ``accept_ms`` until the port accepts a TCP
connection, ``coordinator_ms`` until an OffsetFetch of the group answers without error
(the group coordinator has loaded; the answer's offsets are checked; ``--bytecode cached``,
the default, starts with each root's modules compiled, as an installed package), and ``rss_MiB``
once loaded; ``metadata_max_ms`` is the slowest Metadata request made while the coordinator was
still loading (served meanwhile: the loop is not stalled). Medians of ``--repeat`` runs,
interleaved across roots.

    python bench/restart_offsets.py --root main=/tmp/main --root this=. --repeat 3
    python bench/restart_offsets.py --variants history --repeat 2 --peer kafka   # beside Kafka 4.4
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
    from .compaction import _active_base, _offsets_checkpoint  # type: ignore[import-not-found]
    from .startup import _env as broker_env  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]
    from compaction import _active_base, _offsets_checkpoint  # type: ignore[no-redef]
    from startup import _env as broker_env  # type: ignore[no-redef]

sys.path.insert(0, str(peers.REPO_ROOT))

from protocol.messages.find_coordinator import FindCoordinatorRequest  # noqa: E402
from protocol.messages.offset_commit import OffsetCommitRequest  # noqa: E402
from protocol.messages.metadata import MetadataRequest  # noqa: E402
from protocol.messages.offset_fetch import OffsetFetchRequest  # noqa: E402
from tests.wire import WireClient  # noqa: E402

GROUP, TOPIC = "bench-group", "bench-offsets"


PYCACHE: dict[str, str] = {}  # root -> its private bytecode cache (``--bytecode cached``); set by use_bytecode


def use_bytecode(roots: list[tuple[str, str]], mode: str) -> None:
    """``cached``: each root gets a private PYTHONPYCACHEPREFIX, warmed by one start (an installed package
    has its bytecode); ``nocache``: every start compiles the project's modules (PYTHONDONTWRITEBYTECODE)."""
    if mode != "cached":
        return
    for _name, root in roots:
        PYCACHE[root] = tempfile.mkdtemp(prefix="sb-pycache-restart-")
        data = tempfile.mkdtemp(prefix="sb-warm-")
        port = peers.free_port()
        p = spawn(root, data, port)
        try:
            wait_accepting(p, port)
        finally:
            stop(p)
            shutil.rmtree(data, ignore_errors=True)


def drop_bytecode() -> None:
    for d in PYCACHE.values():
        shutil.rmtree(d, ignore_errors=True)
    PYCACHE.clear()


def spawn(root: str, data: str, port: int, settings: dict | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "broker", "--listen", f"127.0.0.1:{port}", "--data-dir", data]
    for k, v in (settings or {}).items():
        argv += ["--set", f"{k}={v}"]
    return subprocess.Popen(argv, cwd=root, env=broker_env(root, PYCACHE.get(root)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


def wait_accepting(p: subprocess.Popen, port: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if p.poll() is not None:
                raise RuntimeError(f"broker exited with {p.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("broker did not start in time")
            time.sleep(0.002)


def stop(p: subprocess.Popen, sig=signal.SIGTERM) -> None:
    p.send_signal(sig)
    try:
        p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def commit_request(partitions: int, value: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=p, committed_offset=value + p)
            for p in range(partitions)])])


def fetch_offsets(w: WireClient, partitions: int):
    """(error code, {partition: offset}) of the group's OffsetFetch v8."""
    Req = OffsetFetchRequest
    g = w.request(Req(groups=[Req.OffsetFetchRequestGroup(group_id=GROUP, member_id=None, member_epoch=-1, topics=[
        Req.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=list(range(partitions)))])]), 8).groups[0]
    return g.error_code, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def write_commits(bootstrap: str, partitions: int, rounds: int) -> None:
    """Create the topic and send ``rounds`` OffsetCommit v8 requests (one commit per partition each),
    up to 200 in flight on one connection."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
    w = WireClient(bootstrap, client_id="bench")
    deadline = time.monotonic() + 120
    while True:  # Kafka creates __consumer_offsets on the first FindCoordinator: NOT_COORDINATOR until loaded
        w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]), 4)
        codes = {q.error_code for t in w.request(commit_request(partitions, 0), 8).topics for q in t.partitions}
        if codes == {0} or not codes <= {14, 15, 16} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    t0 = time.perf_counter()
    window = 200
    for start in range(0, rounds, window):
        n = min(window, rounds - start)
        w.send_raw(b"".join(w.frame(commit_request(partitions, (start + i) * 1000), 8)[1] for i in range(n)))
        for _ in range(n):
            r = w.receive(OffsetCommitRequest.API_KEY, 8)[1]
            assert all(q.error_code == 0 for t in r.topics for q in t.partitions), r
    w.close()
    print(f"   {rounds * partitions:,} offset commits written in {time.perf_counter() - t0:.1f} s", flush=True)


def generate(root: str, partitions: int, rounds: int, settings: dict, settle_s: float) -> str:
    """A data dir holding ``rounds`` commit requests of ``partitions`` partitions each (clean shutdown), after
    waiting up to ``settle_s`` for the cleaner to reach the active segment of ``__consumer_offsets``."""
    data = tempfile.mkdtemp(prefix="sb-restart-offsets-")
    port = peers.free_port()
    p = spawn(root, data, port, settings)
    try:
        wait_accepting(p, port)
        write_commits(f"127.0.0.1:{port}", partitions, rounds)
        seg_dir = os.path.join(data, "__consumer_offsets-0")
        t0 = time.monotonic()
        while time.monotonic() - t0 < settle_s and _offsets_checkpoint(data) < _active_base(seg_dir):
            time.sleep(0.2)
        if settle_s:
            print(f"   cleaner checkpoint {_offsets_checkpoint(data)}, active segment {_active_base(seg_dir)} "
                  f"after {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        stop(p)
    return data


def restart(root: str, data: str, kill9: bool, ready=None,
            settings: dict | None = None) -> tuple[subprocess.Popen, int, float, float]:
    """Start ``root``'s broker on ``data``; with ``kill9`` a first one is started, left until ``ready(port, p)``
    returns, and killed with SIGKILL, so the measured start is an unclean one. Returns (process, port,
    perf_counter at spawn, seconds from spawn to accepting)."""
    if kill9:
        port = peers.free_port()
        p = spawn(root, data, port, settings)
        wait_accepting(p, port)
        if ready is not None:
            ready(port, p)
        stop(p, signal.SIGKILL)
    port = peers.free_port()
    t0 = time.perf_counter()
    p = spawn(root, data, port, settings)
    try:
        wait_accepting(p, port)
    except BaseException:
        stop(p)
        raise
    return p, port, t0, time.perf_counter() - t0


def measure(root: str, source: str, partitions: int, expect: dict, kill9: bool,
            settings: dict) -> tuple[float, float, float, float]:
    data = tempfile.mkdtemp(prefix="sb-restart-run-")
    shutil.rmtree(data)
    shutil.copytree(source, data)
    try:
        p, port, t0, accept = restart(root, data, kill9,
                                      lambda port, p: until_loaded(port, partitions, expect, p), settings)
        try:
            metadata = until_loaded(port, partitions, expect, p)
            loaded = time.perf_counter() - t0
            rss = peers.rss_mb(p.pid)[0]
        finally:
            stop(p)
        return accept, loaded, rss, metadata
    finally:
        shutil.rmtree(data, ignore_errors=True)


def until_loaded(port: int, partitions: int, expect: dict, p, timeout: float = 300.0,
                 retry: tuple = (14,)) -> float:
    """Poll OffsetFetch until the group coordinator answers; meanwhile time a Metadata request after each
    answer COORDINATOR_LOAD_IN_PROGRESS. Returns the slowest of those (seconds; 0 if it answered at once)."""
    w = WireClient(f"127.0.0.1:{port}", client_id="bench")
    deadline = time.monotonic() + timeout
    slowest = 0.0
    try:
        while True:
            code, offsets = fetch_offsets(w, partitions)
            if code == 0:
                assert offsets == expect, "the loaded offsets are not the last commits"
                return slowest
            # COORDINATOR_LOAD_IN_PROGRESS (Kafka also: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)
            assert code in retry, f"OffsetFetch error {code}"
            if time.monotonic() > deadline or not _alive(p):
                raise RuntimeError("the group coordinator did not load")
            t = time.perf_counter()
            assert w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]),
                             12).topics[0].error_code == 0
            slowest = max(slowest, time.perf_counter() - t)
    finally:
        w.close()


def _alive(p) -> bool:
    return p.poll() is None if isinstance(p, subprocess.Popen) else p.node.alive()


def kafka_peer(partitions: int, rounds: int, expect: dict, repeat: int, modes: list[str]) -> list[dict]:
    """The same commits sent to Apache Kafka 4.4 (``peers.KafkaOnDisk``, Kafka's defaults: its
    ``__consumer_offsets`` segments are 100 MiB, so these 85 MB stay in the active segment, which the
    cleaner never touches), then restarts on its directory: ``clean`` after SIGTERM, ``kill9`` after a
    start that loaded the offsets and was SIGKILLed. ``accept_ms``: the first TCP connection;
    ``answer_ms``: the first Metadata answer; ``coordinator_ms``: the OffsetFetch answered."""
    k = peers.KafkaOnDisk()
    samples: dict[str, list] = {}
    try:
        k.start()
        write_commits(k.bootstrap, partitions, rounds)
        k.stop()
        port = k.node.port
        for rep in range(repeat):
            for mode in modes:
                if mode == "kill9":
                    k.respawn()
                    k.wait_answering()
                    until_loaded(port, partitions, expect, k, retry=(14, 15, 16))
                    k.stop(kill=True)
                t0 = k.respawn()
                try:
                    accept = k.wait_accepting() - t0
                    answer = k.wait_answering() - t0
                    metadata = until_loaded(port, partitions, expect, k, retry=(14, 15, 16))
                    loaded = time.perf_counter() - t0
                    rss = peers.rss_mb(k.pid)[0]
                finally:
                    k.stop()
                samples.setdefault(mode, []).append((accept, loaded, rss, metadata, answer))
                print(f"rep {rep + 1} history {mode:>5}    kafka: accepting {accept * 1000:7.0f} ms, answering "
                      f"{answer * 1000:7.0f} ms, coordinator {loaded * 1000:7.0f} ms", flush=True)
    finally:
        k.close()
    return [{"log": "history", "shutdown": mode, "root": "kafka", "n": len(vals),
             "accept_ms": 1000 * statistics.median(x[0] for x in vals),
             "answer_ms": 1000 * statistics.median(x[4] for x in vals),
             "coordinator_ms": 1000 * statistics.median(x[1] for x in vals),
             "rss_MiB": statistics.median(x[2] for x in vals),
             "metadata_max_ms": 1000 * max(x[3] for x in vals)} for mode, vals in samples.items()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR")
    ap.add_argument("--commits", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default="history,compacted")
    ap.add_argument("--settle-s", type=float, default=120.0, help="longest wait for the cleaner ('compacted')")
    ap.add_argument("--modes", default="clean,kill9")
    ap.add_argument("--bytecode", choices=("cached", "nocache"), default="cached")
    ap.add_argument("--peer", choices=("kafka",), default=None,
                    help="also Apache Kafka 4.4 (peers.KafkaOnDisk), 'history' only, after the roots")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    roots = C.roots(args.root)
    use_bytecode(roots, args.bytecode)
    gen_root = roots[-1][1]
    rounds = max(args.commits // args.partitions, 1)
    variants = [v for v in args.variants.split(",") if v]
    sources, expects = {}, {}
    settings = {"history": {"log.cleaner.enable": "false"}, "compacted": {}}
    for v in variants:
        print(f"== generating '{v}': {rounds:,} commit requests x {args.partitions} partitions", flush=True)
        sources[v] = generate(gen_root, args.partitions, rounds, settings[v], 0 if v == "history" else args.settle_s)
        expects[v] = {q: (rounds - 1) * 1000 + q for q in range(args.partitions)}
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(
            os.path.join(sources[v], "__consumer_offsets-0")) for f in fs if f.endswith(".log"))
        print(f"   __consumer_offsets: {size / 1e6:.1f} MB", flush=True)
    samples: dict[tuple, list[tuple[float, float, float]]] = {}
    try:
        for rep in range(args.repeat):
            for v in variants:
                for mode in [m for m in args.modes.split(",") if m]:
                    for name, root in roots:
                        r = measure(root, sources[v], args.partitions, expects[v], mode == "kill9", settings[v])
                        samples.setdefault((v, mode, name), []).append(r)
                        print(f"rep {rep + 1} {v:>7} {mode:>5} {name:>8}: accepting {r[0] * 1000:7.0f} ms, "
                              f"coordinator {r[1] * 1000:7.0f} ms", flush=True)
    finally:
        for d in sources.values():
            shutil.rmtree(d, ignore_errors=True)
        drop_bytecode()
    rows = []
    for (v, mode, name), vals in samples.items():
        rows.append({"log": v, "shutdown": mode, "root": name, "n": len(vals),
                     "accept_ms": 1000 * statistics.median(x[0] for x in vals), "answer_ms": "",
                     "coordinator_ms": 1000 * statistics.median(x[1] for x in vals),
                     "rss_MiB": statistics.median(x[2] for x in vals),
                     "metadata_max_ms": 1000 * max(x[3] for x in vals)})
    if args.peer == "kafka":
        print(f"== kafka: {rounds:,} commit requests x {args.partitions} partitions", flush=True)
        rows += kafka_peer(args.partitions, rounds, {q: (rounds - 1) * 1000 + q for q in range(args.partitions)},
                           args.repeat, [m for m in args.modes.split(",") if m])
    print(f"\n# restart after {rounds * args.partitions:,} offset commits over {args.partitions} partitions "
          f"(medians): spawn -> accepting connections, spawn -> OffsetFetch answered")
    C.table(rows, ["log", "shutdown", "root", "n", "accept_ms", *(["answer_ms"] if args.peer else []),
                   "coordinator_ms", "rss_MiB", "metadata_max_ms"])
    C.write_json(args.json, {"bench": "restart_offsets", "rows": rows})
    return 0


if __name__ == "__main__":
    peers.terminate_on_sigterm()
    sys.exit(main())
