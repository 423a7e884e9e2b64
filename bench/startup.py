"""Cold start and idle memory of sharebroker, before and after, in one run.

For each ``--root`` (a checkout of this repository) and each data-directory
state it starts ``python -m broker`` and measures the wall time from spawn until
the port accepts a TCP connection, then the broker's RSS once it is idle:

* ``empty``: a fresh data directory;
* ``topics``: a data directory holding ``--topics`` (1,000) one-partition topics,
  created through CreateTopics on a first broker that was then stopped cleanly
  (SIGTERM), so the start measured is a restart after a clean shutdown.

"nocache" runs the interpreter with ``PYTHONDONTWRITEBYTECODE=1`` (the
project's modules are compiled at every start, as on a fresh checkout or in an
environment that sets that variable; the standard library uses its installed
bytecode; a root containing ``__pycache__`` directories is reported); "cached"
first warms a private ``PYTHONPYCACHEPREFIX`` and then starts with it; "installed"
is what ``pip install`` gives a user: the root is installed once with
``pip install --no-deps --target DIR ROOT`` (a wheel built from it; pip compiles the
bytecode at install time) and the broker starts from DIR, with
``PYTHONDONTWRITEBYTECODE=1``, which then changes nothing.  Runs are interleaved across
roots; the table gives medians.

    python bench/startup.py --root before=/tmp/baseline --root after=. --repeat 5
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
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]
    import peers  # type: ignore[no-redef]


def _env(root: str, pycache: str | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    if pycache is None:  # the stdlib keeps its own cached bytecode; the project's is compiled
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def install(root: str) -> str:
    """``pip install`` ``root`` (no dependencies: they are this interpreter's) into a new directory."""
    target = tempfile.mkdtemp(prefix="sb-installed-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--target", target, os.path.abspath(root)], check=True, env=env, cwd=target,
                   stdout=subprocess.DEVNULL, timeout=600)
    return target


def _installed_env(target: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = target
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def start(root: str, data_dir: str, env: dict, timeout: float = 60.0) -> tuple[subprocess.Popen, float, int]:
    """Spawn the broker in ``root`` (the working directory); return (process, seconds until the port accepts, port)."""
    port = peers.free_port()
    argv = [sys.executable, "-m", "broker", "--listen", f"127.0.0.1:{port}", "--data-dir", data_dir]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL)
    deadline = t0 + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return p, time.perf_counter() - t0, port
        except OSError:
            if p.poll() is not None:
                raise RuntimeError(f"broker from {root} exited with {p.returncode}")
            if time.perf_counter() > deadline:
                p.kill()
                raise RuntimeError("broker did not start in time")
            time.sleep(0.002)


def stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def idle_rss(pid: int, settle: float = 1.0) -> float:
    time.sleep(settle)
    return peers.rss_mb(pid)[0]


def make_topics_dir(root: str, n: int) -> str:
    """A data dir with ``n`` one-partition topics, left by a clean shutdown."""
    from confluent_kafka.admin import AdminClient, NewTopic

    data = tempfile.mkdtemp(prefix="sb-startup-topics-")
    p, _, port = start(root, data, _env(root, None))
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        for i in range(0, n, 200):
            futs = admin.create_topics([NewTopic(f"t{j:05d}", 1, 1) for j in range(i, min(n, i + 200))],
                                       operation_timeout=60, request_timeout=60)
            for f in futs.values():
                f.result(60)
    finally:
        stop(p)
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", default=[], metavar="[NAME=]DIR")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--modes", default="nocache,cached,installed")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    roots = C.roots(args.root)
    modes = [m for m in args.modes.split(",") if m]
    for name, root in roots:
        for sub in ("broker", "protocol", "coordinator"):
            if any("__pycache__" in dirs for _p, dirs, _f in os.walk(os.path.join(root, sub))):
                print(f"!! {name}: {root}/{sub} holds __pycache__: 'nocache' is not cold there", file=sys.stderr)
                break
    caches = {}
    for name, root in roots:
        if "cached" in modes:  # warm a private bytecode cache for this root
            caches[name] = tempfile.mkdtemp(prefix=f"sb-pycache-{name}-")
            d = tempfile.mkdtemp(prefix="sb-warm-")
            p, _, _ = start(root, d, _env(root, caches[name]))
            stop(p)
            shutil.rmtree(d, ignore_errors=True)
    installed = {name: install(root) for name, root in roots} if "installed" in modes else {}
    topic_dirs = {}
    if args.topics:
        for name, root in roots:
            topic_dirs[name] = make_topics_dir(root, args.topics)
    samples: dict[tuple, list[float]] = {}
    rss: dict[tuple, list[float]] = {}
    for rep in range(args.repeat):
        for mode in modes:
            for state in ["empty"] + (["topics"] if args.topics else []):
                for name, root in roots:
                    if mode == "installed":  # from the installed copy, in its own directory (not the checkout)
                        cwd, env = installed[name], _installed_env(installed[name])
                    else:
                        cwd, env = root, _env(root, caches.get(name) if mode == "cached" else None)
                    data = tempfile.mkdtemp(prefix="sb-startup-") if state == "empty" else topic_dirs[name]
                    p, secs, _ = start(cwd, data, env)
                    key = (name, mode, state)
                    samples.setdefault(key, []).append(secs)
                    rss.setdefault(key, []).append(idle_rss(p.pid))
                    stop(p)
                    if state == "empty":
                        shutil.rmtree(data, ignore_errors=True)
                    print(f"rep {rep + 1} {name:>8} {mode:>8} {state:>6}: {secs * 1000:7.1f} ms", flush=True)
    rows = []
    for (name, mode, state), vals in samples.items():
        label = state if state == "empty" else f"{args.topics} topics"
        rows.append({"root": name, "bytecode": mode, "data dir": label, "n": len(vals),
                     "median_ms": 1000 * statistics.median(vals), "min_ms": 1000 * min(vals),
                     "max_ms": 1000 * max(vals), "idle_rss_MiB": statistics.median(rss.get((name, mode, state), [0]))})
    print("\n# time from spawn to accepting TCP connections (median), and idle RSS")
    C.table(rows, ["root", "bytecode", "data dir", "n", "median_ms", "min_ms", "max_ms", "idle_rss_MiB"])
    C.write_json(args.json, {"bench": "startup", "rows": rows})
    for d in [*topic_dirs.values(), *installed.values()]:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    peers.terminate_on_sigterm()
    sys.exit(main())
