"""Drain time of a share group with the ``simple`` and the ``lag`` share assignors (issue 10, item 4).

A simulation driven by the assignors' real outputs (``coordinator.assignors``), not a broker run:
M share consumers each process a fixed number of records per second; a member holding several
partitions splits its rate evenly over those that still have records (a share consumer's fetches
take what each partition has).  Both assignors assign at t = 0 with every member present.  With
``lag`` the coordinator looks at the backlogs again every ``--interval-ms`` (the broker's
``group.share.lag.rebalance.interval.ms``, default 10000) and each member takes a new target at its
next heartbeat (``--heartbeat-ms``, Kafka's default 5000; member i's heartbeats are staggered by
i/M of it).  ``simple`` has no reason to re-assign (membership does not change).

    python bench/share_lag_assignor.py                  # the issue's figures
    python bench/share_lag_assignor.py --interval-ms 5000 --heartbeat-ms 500

``--broker`` also runs it for real (a few minutes): a sharebroker started here with
``group.share.assignors=simple,lag``, a 4-partition topic per run holding the backlogs, and M
confluent_kafka ShareConsumers (one thread each, implicit acknowledgement, ``max.poll.records=100``)
that each take len(batch) / ``--rate`` seconds to handle a batch; drain time is from subscribe until
every offset was delivered.  Group joins, heartbeats (5 s) and share-state initialization are in it.
Records are produced in batches of at most 100: a share partition hands out whole producer batches,
so with the producer's default batching one member acquires thousands of records at once and the
others on that partition wait, whatever the assignor.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.assignors import MemberSpec, TopicSpec, get_share_assignor  # noqa: E402

TOPIC = bytes(15) + b"\x01"
STEP = 0.01  # seconds per simulation step


def assign(name: str, members: list[str], backlog: list[float], current: dict) -> dict[str, list[int]]:
    specs = {m: MemberSpec(frozenset([TOPIC]), assigned_partitions={TOPIC: set(current.get(m, ()))})
             for m in members}
    result = get_share_assignor(name).assign(specs, {TOPIC: TopicSpec("t", len(backlog))},
                                             lag=lambda t, p: int(round(backlog[p])))
    return {m: sorted(result[m].get(TOPIC, ())) for m in members}


def drain(name: str, backlogs: list[int], members: int, rate: float, interval_s: float, heartbeat_s: float):
    """Seconds until every backlog is 0, the number of assignments that changed something, and the first
    assignment's members per partition."""
    ids = [f"m{i}" for i in range(members)]
    backlog = [float(b) for b in backlogs]
    held = assign(name, ids, backlog, {})
    first = [sum(p in ps for ps in held.values()) for p in range(len(backlog))]
    target, pending, changes, t = dict(held), {}, 0, 0.0
    next_check = interval_s
    while any(b > 0 for b in backlog):
        if name == "lag" and t >= next_check:
            next_check += interval_s
            new = assign(name, ids, backlog, target)
            if new != target:
                changes += 1
                target = new
                pending = {m: t + ((i / members) * heartbeat_s) for i, m in enumerate(ids) if new[m] != held[m]}
        for m, due in list(pending.items()):
            if t >= due:
                held[m] = target[m]
                del pending[m]
        for ps in held.values():
            busy = [p for p in ps if backlog[p] > 0]
            for p in busy:
                backlog[p] = max(0.0, backlog[p] - rate * STEP / len(busy))
        t += STEP
    return t, changes, first


def drain_on_broker(bootstrap: str, name: str, backlogs: list[int], members: int, rate: float) -> float:
    """Seconds from subscribe until every produced offset was delivered, on a real broker."""
    from confluent_kafka import Producer, ShareConsumer

    from tests.support import create_topic, set_group_configs, unique

    topic, group = create_topic(bootstrap, len(backlogs), "lag-bench"), unique("lag-bench")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 100})
    for p, n in enumerate(backlogs):
        for i in range(n):
            producer.produce(topic, b"x" * 100, partition=p)
            if i % 10000 == 0:
                producer.poll(0)
    producer.flush(60)
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_assignor_name=name)
    seen: set[tuple[int, int]] = set()
    lock, done, total = threading.Lock(), threading.Event(), sum(backlogs)

    def consume() -> None:
        sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 100})
        sc.subscribe([topic])
        while not done.is_set():
            good = [(m.partition(), m.offset()) for m in sc.poll(0.2) if m.error() is None]
            with lock:
                seen.update(good)
                if len(seen) >= total:
                    done.set()
            time.sleep(len(good) / rate)  # handling the batch at the consumer's fixed pace
        sc.commit_sync(30)
        sc.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=consume, daemon=True) for _ in range(members)]
    for t in threads:
        t.start()
    done.wait(600)
    elapsed = time.monotonic() - t0
    done.set()
    for t in threads:
        t.join(60)
    return elapsed


def run_broker(args) -> None:
    from broker.testing import BrokerProcess

    config = {"group.share.assignors": "simple,lag",
              "group.share.lag.rebalance.interval.ms": str(args.interval_ms)}
    with tempfile.TemporaryDirectory() as d, BrokerProcess(Path(d) / "data", config=config) as broker:
        print(f"real broker at {broker.bootstrap}: {args.members} ShareConsumers at {args.rate:,.0f} records/s each, "
              f"group.share.lag.rebalance.interval.ms={args.interval_ms}, heartbeats at Kafka's default 5 s")
        for label, backlogs in (("skewed 90,000/5,000/3,000/2,000", [90_000, 5_000, 3_000, 2_000]),
                                ("uniform 4 x 25,000", [25_000] * 4)):
            times = {name: drain_on_broker(broker.bootstrap, name, backlogs, args.members, args.rate)
                     for name in ("simple", "lag")}
            print(f"{label:<34} simple {times['simple']:7.2f} s   lag {times['lag']:7.2f} s   "
                  f"simple/lag {times['simple'] / times['lag']:.2f}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--rate", type=float, default=1000.0, help="records per second per consumer")
    ap.add_argument("--interval-ms", type=int, default=10000, help="group.share.lag.rebalance.interval.ms")
    ap.add_argument("--heartbeat-ms", type=int, default=5000, help="share.heartbeat.interval.ms")
    ap.add_argument("--broker", action="store_true", help="also measure on a real broker (a few minutes)")
    args = ap.parse_args(argv)
    print(f"{args.members} share consumers at {args.rate:,.0f} records/s each; lag re-checks every "
          f"{args.interval_ms} ms, heartbeats every {args.heartbeat_ms} ms (simulation of the assignors' outputs)")
    print(f"{'backlogs':<34} {'assignor':<8} {'members per partition':<22} {'drain s':>8} {'re-assignments':>15}")
    for label, backlogs, requirement in (("skewed 90,000/5,000/3,000/2,000", [90_000, 5_000, 3_000, 2_000], 2.0),
                                         ("uniform 4 x 25,000", [25_000] * 4, None)):
        times = {}
        for name in ("simple", "lag"):  # simple first: the baseline
            t, changes, first = drain(name, backlogs, args.members, args.rate, args.interval_ms / 1000,
                                      args.heartbeat_ms / 1000)
            times[name] = t
            print(f"{label:<34} {name:<8} {'/'.join(map(str, first)):<22} {t:>8.2f} {changes:>15}")
        ratio = times["simple"] / times["lag"]
        if requirement is not None:
            verdict = "meets" if ratio >= requirement else "MISSES"
            print(f"  lag is {ratio:.2f}x faster than simple ({verdict} the >= {requirement:g}x requirement)")
        else:
            diff = abs(times["lag"] - times["simple"]) / times["simple"]
            verdict = "meets" if diff <= 0.10 else "MISSES"
            print(f"  lag within {diff:.1%} of simple ({verdict} the 10% requirement)")
    if args.broker:
        run_broker(args)


if __name__ == "__main__":
    main()
