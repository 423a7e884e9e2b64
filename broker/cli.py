"""Command line: ``sharebroker [--listen HOST:PORT] [--data-dir PATH] [--config FILE] [--set k=v ...]``."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from broker import version
from broker.config import BrokerConfig


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    if int(port) > 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return host.strip("[]") or "0.0.0.0", int(port)


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as a listener setting writes it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_set(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {value!r}")
    return key.strip(), val.strip()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sharebroker",
                                 description="A single-node Kafka-protocol broker with share groups (KIP-932).")
    ap.add_argument("--listen", type=parse_listen, default=None, metavar="HOST:PORT",
                    help="address to accept clients on (default 127.0.0.1:9092; port 0 picks a free port)")
    ap.add_argument("--data-dir", default=None, metavar="PATH", help="where logs and state live (default ./data)")
    ap.add_argument("--config", default=None, metavar="FILE", help="Kafka-style .properties file")
    ap.add_argument("--set", dest="overrides", type=parse_set, action="append", default=[], metavar="KEY=VALUE",
                    help="override one property (Kafka names), repeatable")
    ap.add_argument("--metrics", type=parse_listen, default=None, metavar="HOST:PORT",
                    help="serve Prometheus metrics on http://HOST:PORT/metrics (off by default)")
    ap.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                    help="logging level: " + ", ".join(LOG_LEVELS) + " (default INFO)")
    ap.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    return ap



def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = BrokerConfig.load(args.config, dict(args.overrides))
    except (OSError, ValueError) as e:
        print(f"sharebroker: cannot read config: {e}", file=sys.stderr)
        return 2
    if args.data_dir:
        config.set("log.dirs", args.data_dir)
    if args.listen:
        config.set("listeners", f"PLAINTEXT://{host_port(*args.listen)}")
    if args.metrics:
        config.set("sharebroker.metrics.listener", host_port(*args.metrics))
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a runtime dependency, but stay usable without it
        uvloop = None
    from broker.app import Broker, StartupError

    async def run() -> int:
        broker = Broker(config)
        try:
            await broker.start()
        except StartupError as e:
            print(f"sharebroker: {e}", file=sys.stderr)
            return 1
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        await stop
        logging.getLogger("sharebroker").info("shutting down")
        await broker.stop()
        problem = broker.components.shutdown_problem if broker.components is not None else None
        if problem:
            logging.getLogger("sharebroker").error("shutdown not clean: %s", problem)
            return 1
        return 0

    if uvloop is not None:
        return uvloop.run(run())
    return asyncio.run(run())
