"""Write a data directory with an earlier release of sharebroker, for the upgrade test.

    PYTHONPATH=$PWD python3 tools/make_upgrade_fixture.py [--rev 5cd9cc4] [--out tests/data]

Extracts the broker at ``--rev`` (``git archive``, so the repository is not touched) into a
temporary directory, starts it there on a fresh data directory, drives it with confluent-kafka and
stops it, twice: once with SIGTERM (``upgrade-<rev>-clean.tar.gz``) and once with SIGKILL after the
same workload (``upgrade-<rev>-kill9.tar.gz``). Each archive holds ``data/`` (the data directory)
and ``expected.json``: what the old broker served before it stopped, and what the share group
acknowledged and held. ``tests/integration/test_upgrade.py`` opens the archives with the current
broker and checks that it serves the same.

The workload: ``plain`` (3 partitions, fixed keys, values and timestamps), ``compacted`` (a
compacted topic whose first segments the old broker's cleaner has cleaned), ``txn`` (a committed,
an aborted, then a committed transaction), a classic consumer group with committed offsets on
``plain``, and a share group on ``shared`` that accepted some records, rejected others and holds
more (acquired, never acknowledged) when the broker stops. Topics keep their records forever
(``retention.ms=-1``), so the archive stays valid however old it gets.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.testing import BrokerProcess

T0 = 1_700_000_000_000  # record timestamps: fixed, so the archive is reproducible in content
GROUP, SHARE_GROUP, TXN_ID = "upgrade-group", "upgrade-share-group", "upgrade-txn"
KEEP = {"retention.ms": "-1"}
BROKER_CONFIG = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "200",
                 "group.share.min.record.lock.duration.ms": "1000"}
ROLL_MS = 400
SHARE_ACCEPT, SHARE_REJECT = range(0, 8), range(8, 10)  # offsets acknowledged; later ones are held


def until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def create_topics(bs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    topics = [NewTopic("plain", 3, config=KEEP), NewTopic("txn", 1, config=KEEP),
              NewTopic("shared", 1, config=KEEP),
              NewTopic("compacted", 1, config={"cleanup.policy": "compact", "segment.ms": str(ROLL_MS),
                                               "min.cleanable.dirty.ratio": "0"})]
    for f in admin.create_topics(topics).values():
        f.result(15)
    res = ConfigResource(ConfigResource.Type.GROUP, SHARE_GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)


def produce(bs: str, topic: str, items, **conf) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, **conf})
    for partition, key, value, ts in items:
        p.produce(topic, key=key, value=value, partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def write_plain_and_compacted(bs: str, data_dir: str) -> None:
    produce(bs, "plain", [(i % 3, b"k%d" % i, b"plain-%d" % i, T0 + i) for i in range(30)])
    from broker.log.cleaner import CHECKPOINT_FILE, read_checkpoints  # the current reader: same format

    for round_ in range(3):  # each round after segment.ms: a new segment, keys overwritten
        if round_:
            time.sleep(ROLL_MS / 1000 + 0.1)
        produce(bs, "compacted", [(0, b"key-%d" % k, b"round-%d-%d" % (round_, k), T0 + 10_000 * round_ + k)
                                  for k in range(5 + round_)])
    until(lambda: read_checkpoints(os.path.join(data_dir, CHECKPOINT_FILE)).get(("compacted", 0), 0) > 0,
          30, "the cleaner to clean the compacted topic")


def write_transactions(bs: str) -> None:
    p = Producer({"bootstrap.servers": bs, "transactional.id": TXN_ID, "linger.ms": 5})
    p.init_transactions(30)
    for n, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce("txn", key=b"%s%d" % (n.encode(), i), value=b"txn-%s-%d" % (n.encode(), i), partition=0,
                      timestamp=T0 + i)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)


def write_group_offsets(bs: str) -> dict:
    c = Consumer({"bootstrap.servers": bs, "group.id": GROUP, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["plain"])
    got: list = []
    until(lambda: got.extend(m for m in [c.poll(0.2)] if m is not None and m.error() is None) or len(got) >= 30,
          60, "the consumer group to read plain")
    offsets = {0: 4, 1: 7, 2: 10}
    c.commit(offsets=[TopicPartition("plain", p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()
    return offsets


def write_share_state(bs: str) -> tuple[ShareConsumer, dict]:
    """Accept and reject the first records, hold the next ones (acquired, unacknowledged): returns the
    consumer, still open, so the broker stops with those records in flight."""
    produce(bs, "shared", [(0, b"s%d" % i, b"shared-%d" % i, T0 + i) for i in range(20)])
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": SHARE_GROUP, "share.acknowledgement.mode": "explicit"})
    c.subscribe(["shared"])
    acked: dict[str, list[int]] = {"accepted": [], "rejected": []}
    held: list[int] = []
    deadline = time.monotonic() + 60
    while not held and time.monotonic() < deadline:
        for m in c.poll(0.5) or []:
            assert m.error() is None, m.error()
            if m.offset() in SHARE_ACCEPT or m.offset() in SHARE_REJECT:
                accept = m.offset() in SHARE_ACCEPT
                c.acknowledge(m, AcknowledgeType.ACCEPT if accept else AcknowledgeType.REJECT)
                acked["accepted" if accept else "rejected"].append(m.offset())
            else:
                held.append(m.offset())
        if not held:
            result = c.commit_sync(30)
            assert all(v is None for v in result.values()), result
    if held:  # the acknowledgements of the poll that also returned held records
        result = c.commit_sync(30)
        assert all(v is None for v in result.values()), result
    assert held and len(acked["accepted"]) + len(acked["rejected"]) == 10, (acked, held)
    produce(bs, "shared", [(0, b"s%d" % i, b"shared-%d" % i, T0 + i) for i in range(20, 25)])  # never fetched
    return c, {**acked, "held": sorted(held), "end": 25}


def read_all(bs: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> list:
    c = Consumer({"bootstrap.servers": bs, "group.id": "upgrade-reader", "enable.auto.commit": False,
                  "isolation.level": isolation})
    out = []
    for p in range(partitions):
        _low, high = c.get_watermark_offsets(TopicPartition(topic, p), 10)
        c.assign([TopicPartition(topic, p, 0)])
        last = -1
        while last < high - 1:
            m = c.poll(5)
            if m is None:
                break  # the rest of the partition is transaction markers (or aborted, read_committed)
            assert m.error() is None, m.error()
            out.append([p, m.offset(), m.key().decode(), m.value().decode(), m.timestamp()[1]])
            last = m.offset()
    c.close()
    return out


def generate(src: str, workdir: str, kill9: bool) -> dict:
    data_dir = os.path.join(workdir, "data")
    here = os.getcwd()
    os.chdir(src)  # ``python -m broker`` runs the old release from its own tree
    try:
        b = BrokerProcess(data_dir, config=BROKER_CONFIG).start()
    finally:
        os.chdir(here)
    try:
        bs = b.bootstrap
        create_topics(bs)
        write_plain_and_compacted(bs, data_dir)
        write_transactions(bs)
        offsets = write_group_offsets(bs)
        share_consumer, share = write_share_state(bs)
        expected = {"plain": read_all(bs, "plain", 3), "compacted": read_all(bs, "compacted", 1),
                    "txn_committed": read_all(bs, "txn", 1, "read_committed"), "txn_all": read_all(bs, "txn", 1),
                    "shared": read_all(bs, "shared", 1), "group": {GROUP: offsets}, "share_group": {
                        SHARE_GROUP: share}, "kill9": kill9}
        if kill9:
            b.kill9()
        else:
            assert b.stop() == 0, b.log_lines[-20:]
        assert not b.new_tracebacks(), b.new_tracebacks()
    finally:
        b.stop()
    del share_consumer  # its close would wait for the broker that is gone
    os.unlink(os.path.join(data_dir, ".lock"))
    return expected


def archive(workdir: str, expected: dict, out: str) -> None:
    with tarfile.open(out, "w:gz", compresslevel=9) as tar:
        tar.add(os.path.join(workdir, "data"), arcname="data", filter=_reproducible)
        blob = json.dumps(expected, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo("expected.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))


def _reproducible(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="5cd9cc4", help="git revision of the release that writes the directory")
    ap.add_argument("--out", default="tests/data", help="directory for the archives")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sharebroker-upgrade-") as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        git = subprocess.run(["git", "archive", args.rev], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(git)) as tar:
            tar.extractall(src)
        for variant in ("clean", "kill9"):
            workdir = os.path.join(tmp, variant)
            expected = generate(src, workdir, kill9=variant == "kill9")
            out = os.path.join(args.out, f"upgrade-{args.rev}-{variant}.tar.gz")
            os.makedirs(args.out, exist_ok=True)
            archive(workdir, expected, out)
            print(f"{out}: {os.path.getsize(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
