"""Broker CPU of client-quota accounting on the produce and fetch paths: quotas off vs on.

Starts the broker of each ``--root`` (default: this checkout) twice per repetition, interleaved:
``off`` (no quota: the request path pays one attribute test) and ``on`` (``<default>`` client-id
quotas for producer_byte_rate, consumer_byte_rate and request_percentage, set so high that nobody is
throttled: every request is counted, timed, and its throttle computed). Phases, as ``cpu_per_mb.py``:

* ``produce``: N x 1 KiB records with librdkafka's default batches (up to 1 MB per request);
* ``produce16k``: N x 1 KiB records with ``batch.size=16384``, ``linger.ms=5`` (one Produce request
  per ~16 KiB: the per-request cost);
* ``consume``: the same records read back from the beginning (assign mode).

The table gives, per root and phase, the median broker CPU ms per MB (MB = 10^6 bytes of values),
the on/off ratio and the min-max of the repetitions.  Roots are interleaved too (root A off and on,
root B on and off, ...), so a before/after comparison shares the machine's load:

    python bench/quotas.py --repeat 5 --records 200000
    python bench/quotas.py --root before=/tmp/main --root after=. --repeat 4 --phases produce,produce16k,consume

``--callgrind N`` counts instead of timing, for a figure the machine's load does not move: each
root's broker runs under valgrind's callgrind (Debian's ``valgrind``), off and on, and the
instructions it executes while a producer sends N records in ~16 KiB requests are divided by the
Produce requests it served (read from its ``--metrics`` listener):

    python bench/quotas.py --root before=/tmp/main --root after=. --callgrind 20000
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import cpu_per_mb as CPU  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
    from . import throughput as T  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import cpu_per_mb as CPU  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]
    import throughput as T  # type: ignore[no-redef]

NEVER = 1e15  # a quota nobody reaches: everything is counted, nothing throttled


def quotas_on(bootstrap: str, keys=("producer_byte_rate", "consumer_byte_rate", "request_percentage")) -> None:
    sys.path.insert(0, str(peers.REPO_ROOT))
    from admin.client import AdminClient
    from protocol.messages.alter_client_quotas import AlterClientQuotasRequest as A

    req = A(entries=[A.EntryData(entity=[A.EntityData(entity_type="client-id", entity_name=None)],
                                 ops=[A.OpData(key=k, value=NEVER) for k in keys])])
    with AdminClient(bootstrap) as admin:
        resp = admin.request(req)
    codes = [e.error_code for e in resp.entries]
    if codes != [0]:
        raise SystemExit(f"AlterClientQuotas failed: {resp}")


def instructions_per_produce(root: str, mode: str, records: int, keys: list[str]) -> tuple[float, int]:
    """(instructions per Produce request, requests) of ``root``'s broker under callgrind, counted only
    while ``records`` 1 KiB records go out in ~16 KiB requests."""
    port, mport = peers.free_port(), peers.free_port()
    work = tempfile.mkdtemp(prefix=f"sharebroker-quotas-cg-{mode}-")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={work}/callgrind.out",
            sys.executable, "-m", "broker", "--listen", f"{peers.LOOPBACK}:{port}", "--data-dir", f"{work}/data",
            "--metrics", f"{peers.LOOPBACK}:{mport}"]
    with open(f"{work}/broker.log", "w") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        deadline = time.monotonic() + 300  # about 50 times slower under valgrind
        while True:
            try:
                socket.create_connection((peers.LOOPBACK, port), 1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the broker under callgrind did not start: see {work}/broker.log")
                time.sleep(0.5)
        bootstrap = f"{peers.LOOPBACK}:{port}"
        if mode == "on":
            quotas_on(bootstrap, keys)
        topic = C.unique("bench-quotas-cg")
        C.create_topic(bootstrap, topic, 1)
        T.produce(bootstrap, topic, 2000, 1024, CPU.JAVA_BATCH, 300.0)  # warm up

        def produce_requests() -> int:
            text = urllib.request.urlopen(f"http://{peers.LOOPBACK}:{mport}/metrics", timeout=60).read().decode()
            return int(float(re.search(r'requests_total\{request="Produce"\} (\S+)', text).group(1)))

        before = produce_requests()
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        T.produce(bootstrap, topic, records, 1024, CPU.JAVA_BATCH, 600.0)
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
        requests = produce_requests() - before
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
    finally:
        proc.terminate()
        proc.wait(120)
    total = 0
    for path in glob.glob(f"{work}/callgrind.out*"):
        with open(path) as f:
            total += sum(int(line.split()[1]) for line in f if line.startswith("totals:"))
    return total / max(requests, 1), requests


def callgrind(roots, records: int, keys: list[str], json_path) -> int:
    rows = []
    for name, path in roots:
        got = {mode: instructions_per_produce(path, mode, records, keys) for mode in ("off", "on")}
        rows.append({"root": name, "requests": got["on"][1], "off": round(got["off"][0]), "on": round(got["on"][0]),
                     "on-off": round(got["on"][0] - got["off"][0]), "on/off": C.ratio(got["on"][0], got["off"][0])})
    print("\n# broker instructions (callgrind, user space) per ~16 KiB Produce request, quotas off vs on")
    C.table(rows, ["root", "requests", "off", "on", "on-off", "on/off"])
    C.write_json(json_path, {"bench": "quotas-callgrind", "rows": rows})
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR",
                    help="repository checkout to start the broker from (repeatable; default: this one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000, help="1 KiB records per phase")
    ap.add_argument("--phases", default="produce16k,consume")
    ap.add_argument("--keys", default="producer_byte_rate,consumer_byte_rate,request_percentage",
                    help="the quota keys set for 'on'")
    ap.add_argument("--callgrind", type=int, default=0, metavar="N",
                    help="count instructions per Produce request under callgrind (N records) instead of timing")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    roots = C.roots(args.root)
    if args.callgrind:
        return callgrind(roots, args.callgrind, [k for k in args.keys.split(",") if k], args.json)
    phases = [p for p in args.phases.split(",") if p]
    results: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
    turn = 0
    for rep in range(args.repeat):
        for name, path in roots:
            for mode in (("off", "on") if turn % 2 == 0 else ("on", "off")):  # neither always goes first
                bp = CPU.start_root(path, f"quotas-{name}-{mode}")
                try:
                    if mode == "on":
                        quotas_on(bp.bootstrap, [k for k in args.keys.split(",") if k])
                    for phase, v in CPU.one_rep(bp, args.records, phases).items():
                        results.setdefault((name, mode, phase), []).append(v)
                        print(f"rep {rep + 1} {name:>8} {mode:>3} {phase:>10}: {v[0]:.3f} cpu_ms/MB (user "
                              f"{v[1]:.3f}, sys {v[2]:.3f})", flush=True)
                finally:
                    bp.stop()
            turn += 1
    rows = []
    for phase in phases:
        for name, _ in roots:
            off, on = results[(name, "off", phase)], results[(name, "on", phase)]

            def med(vals, i):
                return statistics.median(v[i] for v in vals)

            rows.append({"root": name, "phase": phase, "n": len(off), "off": med(off, 0), "on": med(on, 0),
                         "on/off": C.ratio(med(on, 0), med(off, 0)), "off_user": med(off, 1),
                         "on_user": med(on, 1), "off_sys": med(off, 2), "on_sys": med(on, 2),
                         "off_range": _range(off), "on_range": _range(on)})
    print("\n# broker CPU ms per MB of 1 KiB values, quotas off vs on (medians; user/sys medians; min-max)")
    C.table(rows, ["root", "phase", "n", "off", "on", "on/off", "off_user", "on_user", "off_sys", "on_sys",
                   "off_range", "on_range"])
    C.write_json(args.json, {"bench": "quotas", "rows": rows})
    return 0


def _range(vals) -> str:
    tot = [v[0] for v in vals]
    return f"{min(tot):.2f}-{max(tot):.2f}"


if __name__ == "__main__":
    peers.terminate_on_sigterm()
    sys.exit(main())
