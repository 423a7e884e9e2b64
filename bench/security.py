"""What security costs: produce / consume over PLAINTEXT, SSL and SASL_SSL, and ACLs on vs off.

Two brokers are started from this checkout (certificates generated with ``cryptography``):

* ``open``: listeners PLAINTEXT, SSL (no client certificate), SASL_PLAINTEXT and SASL_SSL
  (SCRAM-SHA-256), no authorizer;
* ``acl``: the same with ``authorizer.class.name=...StandardAuthorizer`` and ALLOW ACLs for
  the benchmark user (WRITE / READ on its topics, READ on its consumers' groups,
  IDEMPOTENT_WRITE on the cluster).

For each case and repetition, on a fresh 1-partition topic: ``produce`` N x 1 KiB records
with a default confluent-kafka Producer, ``consume`` them back (assign mode), and
``produce16k`` (``batch.size=16384``, ``linger.ms=5``: ~16 KiB per Produce request, where a
per-request cost such as authorization shows most).  Cases are interleaved so other load
hits all alike; the table gives medians of broker CPU ms per MB (MB = 10^6 bytes of values)
and records/s, and each case's ratio to PLAINTEXT on the open broker.

    python bench/security.py --records 100000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,  # noqa: E402
                                   ResourcePatternType, ResourceType)

from broker.testing import BrokerProcess  # noqa: E402
from tests.support import client_security, make_pki, security_settings  # noqa: E402

try:
    from . import peers  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import peers  # type: ignore[no-redef]

# (label, broker, listener, SASL mechanism)
CASES = [("PLAINTEXT", "open", "PLAINTEXT", None), ("SSL", "open", "SSL", None),
         ("SASL_PLAINTEXT/PLAIN", "open", "SASL_PLAINTEXT", "PLAIN"),
         ("SASL_SSL/SCRAM-SHA-256", "open", "SASL_SSL", "SCRAM-SHA-256"),
         ("SASL_PLAINTEXT/PLAIN + ACLs", "acl", "SASL_PLAINTEXT", "PLAIN")]
PHASES = ("produce", "consume", "produce16k")
VALUE = b"x" * 1024


def start(pki: dict, acls: bool) -> BrokerProcess:
    extra = {"listener.name.ssl.ssl.client.auth": "none"}
    if acls:
        extra.update({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "super.users": "User:admin"})
    b = BrokerProcess(tempfile.mkdtemp(prefix="sharebroker-sec-bench-"), config=security_settings(pki, **extra))
    return b.start()


def conf(b: BrokerProcess, pki: dict, listener: str, mech: str | None) -> dict:
    c = client_security(b, listener, pki, mech, "alice" if mech else None)
    if listener == "SSL":  # no client certificate: the cost of TLS alone
        c.pop("ssl.certificate.location")
        c.pop("ssl.key.location")
    return c


def new_topic(b: BrokerProcess, pki: dict, acl: bool) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_security(b, "SASL_PLAINTEXT", pki, "PLAIN", "admin"))
    admin.create_topics([NewTopic(name, 1)])[name].result(30)
    if acl:
        bindings = [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*", op,
                               AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
        for f in admin.create_acls(bindings).values():
            f.result(30)
    return name


def produce(c: dict, topic: str, n: int, extra: dict | None = None) -> None:
    p = Producer({**c, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000, **(extra or {})})
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("produce did not complete")


def consume(c: dict, topic: str, n: int) -> None:
    cons = Consumer({**c, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                     "fetch.max.bytes": 52428800})
    cons.assign([TopicPartition(topic, 0, 0)])
    got, deadline = 0, time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in cons.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    cons.close()
    if got < n:
        raise RuntimeError(f"consumed {got} of {n}")


def measure(b: BrokerProcess, fn) -> tuple[float, float]:
    """(broker CPU seconds, wall seconds) of ``fn()``."""
    pid = b.proc.pid
    cpu0, t0 = peers.cpu_seconds(pid), time.perf_counter()
    fn()
    return peers.cpu_seconds(pid) - cpu0, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    pki = make_pki(tempfile.mkdtemp(prefix="sharebroker-sec-pki-"))
    brokers = {"open": start(pki, False), "acl": start(pki, True)}
    try:
        admin = AdminClient(client_security(brokers["acl"], "SASL_PLAINTEXT", pki, "PLAIN", "admin"))
        idem = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                          AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)
        group = AclBinding(ResourceType.GROUP, "g-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)  # the consumers' group ids
        for f in admin.create_acls([idem, group]).values():
            f.result(30)
        mb = args.records * len(VALUE) / 1e6
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for rep in range(args.repeat):
            for label, which, listener, mech in CASES:
                b = brokers[which]
                c = conf(b, pki, listener, mech)
                topic = new_topic(b, pki, which == "acl")
                for phase in PHASES:
                    if phase == "produce":
                        r = measure(b, lambda: produce(c, topic, args.records))
                    elif phase == "consume":
                        r = measure(b, lambda: consume(c, topic, args.records))
                    else:
                        t16 = new_topic(b, pki, which == "acl")
                        r = measure(b, lambda: produce(c, t16, args.records, {"batch.size": 16384}))
                    results.setdefault((label, phase), []).append(r)
                print(f"rep {rep + 1}/{args.repeat} {label} done", file=sys.stderr, flush=True)
        base = {p: statistics.median(cpu for cpu, _ in results[("PLAINTEXT", p)]) for p in PHASES}
        base_rate = {p: statistics.median(args.records / wall for _, wall in results[("PLAINTEXT", p)])
                     for p in PHASES}
        print(f"{args.records} x 1 KiB records, median of {args.repeat}; ratio = case / PLAINTEXT")
        print(f"{'case':30} {'phase':11} {'CPU ms/MB':>10} {'rec/s':>10} {'CPU ratio':>10} {'rec/s ratio':>12}")
        for label, *_ in CASES:
            for p in PHASES:
                cpu = statistics.median(x for x, _ in results[(label, p)])
                rate = statistics.median(args.records / w for _, w in results[(label, p)])
                print(f"{label:30} {p:11} {cpu * 1000 / mb:10.2f} {rate:10.0f} {cpu / base[p]:10.2f} "
                      f"{rate / base_rate[p]:12.2f}")
    finally:
        for b in brokers.values():
            b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
