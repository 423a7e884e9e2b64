"""Broker CPU per MB for produce / consume, before and after, in one run.

Starts one sharebroker per ``--root`` (a checkout of this repository: e.g. a
copy of the tree before a change, and the working tree), one at a time, and
for each repetition runs, on a fresh 1-partition topic:

* ``produce``: N x 1 KiB records with a default confluent-kafka Producer
  (librdkafka batches up to 1 MB);
* ``consume``: the same records read back from the beginning (assign mode);
* ``produce16k``: N x 1 KiB records with ``batch.size=16384`` and ``linger.ms=5``,
  the Java client's defaults, so one Produce request carries ~16 KiB: this is
  the per-request cost.

Brokers are interleaved (root A rep 1, root B rep 1, root A rep 2, ...) so that
other load on a shared machine hits both alike; the table gives the median
(and min/max) of broker CPU ms per MB (MB = 10^6 bytes of values), split into
user and system time.

    python bench/cpu_per_mb.py --root before=/tmp/baseline --root after=. --repeat 5
    python bench/cpu_per_mb.py --root . --records 300000 --phases produce,consume
    python bench/cpu_per_mb.py --root main=/work/main --root tree=. --phases consume --floor

For consume it also prints the consuming client's system time and ksoftirqd's: on loopback the
receive side's kernel work is charged to whichever of them gets to it (see bench/sendfile_floor.py),
so the broker's own figure moves between identical runs.  ``--floor`` adds two rows for the same
segment bytes sent by bench/sendfile_floor.py: ``floor``, a plain-Python server that speaks just
enough Kafka to serve them to the same consumer with one ``sendfile`` per Fetch (what sending them
to that client costs with next to no broker work), and ``raw floor``, 1 MiB answers to a plain
``recv`` loop (the kernel's cost with an ideal reader).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
    from . import sendfile_floor as F  # type: ignore[import-not-found]
    from . import throughput as T  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]
    import sendfile_floor as F  # type: ignore[no-redef]
    import throughput as T  # type: ignore[no-redef]

PHASES = ("produce", "consume", "produce16k")
JAVA_BATCH = {"batch.size": "16384", "linger.ms": "5"}


def start_root(root: str, name: str, extra_args: list[str] | None = None) -> peers.BrokerProc:
    """Start ``python -m broker`` from the checkout ``root`` on a free port with a fresh data dir."""
    root = os.path.abspath(root)
    port = peers.free_port()
    workdir = tempfile.mkdtemp(prefix=f"sharebroker-cpu-{name}-")
    data_dir = os.path.join(workdir, "data")
    argv = [sys.executable, "-m", "broker", "--listen", f"{peers.LOOPBACK}:{port}", "--data-dir", data_dir]
    argv += extra_args or []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return peers._spawn(name, argv, port, workdir, root, env, False, 30.0)


def split_cpu(pid: int) -> tuple[float, float, int]:
    """(user, system) CPU seconds of ``pid`` and its minor page faults."""
    f = peers._stat_fields(pid)
    tck = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tck, int(f[12]) / tck, int(f[7])


def one_rep(bp: peers.BrokerProc, n: int, phases: list[str], floor: bool = False) -> dict[str, tuple]:
    """phase -> (cpu ms/MB, user ms/MB, sys ms/MB, minor page faults per MB, client sys ms/MB, ksoftirqd ms/MB)."""
    out = {}
    mb = n * 1024 / 1e6
    topic = None
    for phase in phases:
        if phase in ("produce", "produce16k"):
            topic = C.unique(f"bench-cpu-{phase}")
            C.create_topic(bp.bootstrap, topic, 1)
            u0, s0, f0 = split_cpu(bp.pid)
            r = T.produce(bp.bootstrap, topic, n, 1024, JAVA_BATCH if phase == "produce16k" else {}, 120.0)
            u1, s1, f1 = split_cpu(bp.pid)
            if r["unflushed"] or r["errors"]:
                print(f"!! {bp.name} {phase}: {r['unflushed']} unflushed, {r['errors']} failed", file=sys.stderr)
        else:
            if topic is None:
                topic = C.unique("bench-cpu-consume")
                C.create_topic(bp.bootstrap, topic, 1)
                T.produce(bp.bootstrap, topic, n, 1024, {}, 120.0)
            u0, s0, f0 = split_cpu(bp.pid)
            c0, k0 = os.times().system, F.softirq_cpu()
            r = T.consume(bp.bootstrap, topic, 1, {}, 15.0, want=n)
            u1, s1, f1 = split_cpu(bp.pid)
            c1, k1 = os.times().system, F.softirq_cpu()
            if r["got"] != n:
                print(f"!! {bp.name} consume: got {r['got']} of {n}", file=sys.stderr)
        du, ds = (u1 - u0) * 1000 / mb, (s1 - s0) * 1000 / mb
        out[phase] = (du + ds, du, ds, (f1 - f0) / mb) + (
            ((c1 - c0) * 1000 / mb, (k1 - k0) * 1000 / mb) if phase == "consume" else (float("nan"),) * 2)
    if floor and "consume" in phases:
        out.update(_floors(bp, topic, n))
    return out


def _floors(bp: peers.BrokerProc, topic: str, n: int) -> dict[str, tuple]:
    """bench/sendfile_floor.py over this broker's segment of ``topic`` (the same bytes): ``floor``, served
    to the same consumer by a plain-Python Kafka-speaking sendfile server; ``raw floor``, sent to a
    plain recv loop."""
    seg_dir = os.path.join(bp.workdir, "data", f"{topic}-0")
    seg = max((os.path.join(seg_dir, f) for f in os.listdir(seg_dir) if f.endswith(".log")), key=os.path.getsize)
    mb = n * 1024 / 1e6
    pid, bootstrap, proc = F.start_kafka(seg, topic)
    try:
        u0, s0, _ = split_cpu(pid)
        c0, k0 = os.times().system, F.softirq_cpu()
        r = T.consume(bootstrap, topic, 1, {}, 15.0, want=n)
        u1, s1, _ = split_cpu(pid)
        c1, k1 = os.times().system, F.softirq_cpu()
    finally:
        proc.terminate()
        proc.join(10)
    if r["got"] != n:
        print(f"!! floor consume: got {r['got']} of {n}", file=sys.stderr)
    du, ds = (u1 - u0) * 1000 / mb, (s1 - s0) * 1000 / mb
    raw = F.run(seg, n * 1024)
    return {"floor": (du + ds, du, ds, 0.0, (c1 - c0) * 1000 / mb, (k1 - k0) * 1000 / mb),
            "raw floor": (raw["server"], raw["server_user"], raw["server_sys"], 0.0, raw["client_sys"],
                          raw["ksoftirqd"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR",
                    help="repository checkout to start the broker from (repeatable; default: this one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=600_000, help="1 KiB records per phase")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--floor", action="store_true",
                    help="after each repetition's consume, send the same segment with bench/sendfile_floor.py")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    roots = []
    for spec in args.root or [str(peers.REPO_ROOT)]:
        name, sep, path = spec.partition("=")
        roots.append((name, path) if sep else (os.path.basename(os.path.abspath(spec)) or spec, spec))
    phases = [p for p in args.phases.split(",") if p]
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for rep in range(args.repeat):
        for name, path in roots:
            bp = start_root(path, name)
            try:
                floor = args.floor and name == roots[0][0]  # once per repetition
                for phase, v in one_rep(bp, args.records, phases, floor).items():
                    row = (phase, "consume") if phase.endswith("floor") else (name, phase)
                    results.setdefault(row, []).append(v)
                    print(f"rep {rep + 1} {row[0]:>8} {row[1]:>10}: {v[0]:.3f} cpu_ms/MB "
                          f"(user {v[1]:.3f}, sys {v[2]:.3f}), {v[3]:.0f} page faults/MB"
                          + (f", client sys {v[4]:.3f}, ksoftirqd {v[5]:.3f}" if row[1] == "consume" else ""),
                          flush=True)
            finally:
                bp.stop()
    rows = []
    for (name, phase), vals in results.items():
        tot = [v[0] for v in vals]
        rows.append({"root": name, "phase": phase, "n": len(vals), "median": statistics.median(tot),
                     "min": min(tot), "max": max(tot), "user": statistics.median(v[1] for v in vals),
                     "sys": statistics.median(v[2] for v in vals),
                     "faults/MB": statistics.median(v[3] for v in vals),
                     "client_sys": statistics.median(v[4] for v in vals),
                     "ksoftirqd": statistics.median(v[5] for v in vals)})
    rows.sort(key=lambda r: (PHASES.index(r["phase"]) if r["phase"] in PHASES else 99, r["root"].endswith("floor"), r["root"]))
    print("\n# broker CPU ms per MB of 1 KiB values (median of repetitions; user/sys/minor page fault medians;\n"
          "# consume: the consuming client's system time and ksoftirqd's beside it; with --floor, the same segment\n"
          "# bytes from bench/sendfile_floor.py: 'floor' to the same consumer, 'raw floor' to a plain recv loop)")
    C.table(rows, ["root", "phase", "n", "median", "min", "max", "user", "sys", "faults/MB", "client_sys", "ksoftirqd"])
    C.write_json(args.json, {"bench": "cpu_per_mb", "rows": rows})
    return 0


if __name__ == "__main__":
    peers.terminate_on_sigterm()
    sys.exit(main())
