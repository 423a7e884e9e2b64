"""Broker memory under connection load and a partial-frame attack, and how much of it comes back.

Starts one sharebroker per ``--root`` (a checkout of this repository, e.g. ``main=/work/main``
and ``tree=.``), interleaved per repetition, and runs two loads on each, one after the other:

* ``idle``: ``--connections`` (5,000) connections, each sends one ApiVersions request and
  reads the answer, then all are closed;
* ``attack``: 10 connections each announce a 100 MB frame and send 30 MB of it (what the
  broker takes within ``--attack-secs``), then close.

For each it prints the broker's RSS (``/proc/PID/status`` VmRSS, MiB) before the load, at its
peak, and 10 s / 30 s / ``--settle`` s after the load ended, and how long after the load the
RSS first came within 20 MiB of the baseline (``-`` if it did not within ``--settle``).

    python bench/memory_release.py --root main=/work/main --root tree=. --repeat 2
    python bench/memory_release.py --root . --loads idle --connections 1000 --settle 20
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import statistics
import struct
import sys
import threading
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import cpu_per_mb  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import cpu_per_mb  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]

LOADS = ("idle", "attack")
NEAR_MIB = 20.0


def rss(pid: int) -> float:
    return peers.rss_mb(pid)[0]


def _api_versions() -> bytes:
    body = struct.pack(">hhih", 18, 0, 1, 1) + b"b"
    return struct.pack(">i", len(body)) + body


def idle_load(port: int, pid: int, count: int) -> float:
    """Open ``count`` connections (one ApiVersions each), close them; returns the peak RSS seen."""
    socks = []
    peak = 0.0
    try:
        for i in range(count):
            socks.append(socket.create_connection((peers.LOOPBACK, port), timeout=30))
            if i % 500 == 0:
                peak = max(peak, rss(pid))
        frame = _api_versions()
        for s in socks:
            s.sendall(frame)
        for s in socks:
            s.recv(4096)
        peak = max(peak, rss(pid))
    finally:
        for s in socks:
            s.close()
    return peak


def attack_load(port: int, pid: int, secs: float, count: int = 10, announce: int = 100 * 1024 * 1024,
                send: int = 30 * 1024 * 1024) -> float:
    """``count`` connections announce ``announce`` bytes and send ``send`` of them (for at most ``secs``)."""
    socks = [socket.create_connection((peers.LOOPBACK, port), timeout=30) for _ in range(count)]
    peak = 0.0
    try:
        for s in socks:
            s.sendall(struct.pack(">i", announce) + struct.pack(">hhi", 0, 9, 1))
            s.setblocking(False)
        left = {s: send for s in socks}
        chunk = memoryview(b"\0" * (256 * 1024))
        deadline = time.monotonic() + secs
        while left and time.monotonic() < deadline:
            peak = max(peak, rss(pid))
            _, writable, _ = select.select([], list(left), [], 0.05)
            for s in writable:
                try:
                    n = s.send(chunk[:min(len(chunk), left[s])])
                except BlockingIOError:
                    continue
                except OSError:
                    del left[s]
                    continue
                left[s] -= n
                if not left[s]:
                    del left[s]
        end = time.monotonic() + 1.0  # let the broker read what the kernel holds
        while time.monotonic() < end:
            peak = max(peak, rss(pid))
            time.sleep(0.05)
    finally:
        for s in socks:
            s.close()
    return peak


def settle(pid: int, baseline: float, secs: float) -> dict:
    """Sample RSS after a load ended: values at 10 s, 30 s and ``secs``, and when it came near baseline."""
    t0 = time.monotonic()
    out = {"near_s": float("nan")}
    marks = sorted({10.0, 30.0, secs})
    while True:
        now = time.monotonic() - t0
        cur = rss(pid)
        if out["near_s"] != out["near_s"] and cur - baseline <= NEAR_MIB:
            out["near_s"] = now
        for m in marks:
            if now >= m and f"at_{m:g}s" not in out:
                out[f"at_{m:g}s"] = cur
        if now >= secs:
            return out
        time.sleep(0.25)


def one_rep(bp: peers.BrokerProc, port: int, loads: list[str], args) -> dict[str, dict]:
    out = {}
    for load in loads:
        time.sleep(1.0)
        baseline = rss(bp.pid)
        if load == "idle":
            peak = idle_load(port, bp.pid, args.connections)
        else:
            peak = attack_load(port, bp.pid, args.attack_secs)
        row = {"baseline": baseline, "peak": peak, **settle(bp.pid, baseline, args.settle)}
        out[load] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--attack-secs", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=60.0, help="seconds to watch RSS after each load")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.connections + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 1000), hard))
    roots = []
    for spec in args.root or [str(peers.REPO_ROOT)]:
        name, sep, path = spec.partition("=")
        roots.append((name, path) if sep else (os.path.basename(os.path.abspath(spec)) or spec, spec))
    loads = [x for x in args.loads.split(",") if x]
    results: dict[tuple[str, str], list[dict]] = {}
    for rep in range(args.repeat):
        for name, path in roots:
            bp = cpu_per_mb.start_root(path, name)
            port = int(bp.bootstrap.rsplit(":", 1)[1])
            try:
                for load, row in one_rep(bp, port, loads, args).items():
                    results.setdefault((name, load), []).append(row)
                    print(f"rep {rep + 1} {name:>8} {load:>6}: " + ", ".join(f"{k} {C.fmt(v, 1)}" for k, v in row.items()),
                          flush=True)
            finally:
                bp.stop()
    rows = []
    for (name, load), vals in results.items():
        row = {"root": name, "load": load, "n": len(vals)}
        for key in vals[0]:
            xs = [v[key] for v in vals if v[key] == v[key]]
            row[key] = statistics.median(xs) if xs else float("nan")
        rows.append(row)
    print(f"\n# broker RSS (MiB), medians; near_s: seconds after the load until RSS was within {NEAR_MIB:g} MiB "
          "of the baseline (nan: not within the settle time)")
    C.table(rows, ["root", "load", "n", *[k for k in rows[0] if k not in ("root", "load", "n")]] if rows else [])
    C.write_json(args.json, {"bench": "memory_release", "rows": rows})
    return 0


if __name__ == "__main__":
    peers.terminate_on_sigterm()
    sys.exit(main())
