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
"""

from __future__ import annotations

import argparse
import statistics
import sys

try:
    from . import _common as C  # type: ignore[import-not-found]
    from . import cpu_per_mb as CPU  # type: ignore[import-not-found]
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import cpu_per_mb as CPU  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR",
                    help="repository checkout to start the broker from (repeatable; default: this one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000, help="1 KiB records per phase")
    ap.add_argument("--phases", default="produce16k,consume")
    ap.add_argument("--keys", default="producer_byte_rate,consumer_byte_rate,request_percentage",
                    help="the quota keys set for 'on'")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    roots = C.roots(args.root)
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
