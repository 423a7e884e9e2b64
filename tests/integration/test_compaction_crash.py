"""Compaction and crashes: kill -9 at every point of a cleaning pass, and producer state across cleaning.

The torture test starts the broker with the test-only ``sharebroker.log.cleaner.test.crash.phase``
(the broker kills itself, SIGKILL, when a pass reaches that point: a cleaned segment half
written in the worker, written, each rename of the swap, before the checkpoint moves), then
at random moments of cleaning; after every restart a reader from the earliest offset must
find every acknowledged record that a reader should still see: the latest value of each key,
at the offset it was acknowledged with, and nothing that was never written there.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from broker.testing import BrokerProcess
from tests.integration.test_compaction import BROKER, Writer, cleaned_to, create, read_all
from tests.support import until

PHASES = ["writing", "cleaned", "swap", "deleted", "done", "checkpoint"]
LAG_MS = 1500  # min.compaction.lag.ms: a round is produced and flushed before the cleaner may touch it


def _workers_of(pid: int) -> list[int]:
    """Cleaner worker processes started by broker ``pid`` that are still alive."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"broker.log.cleaner" in args and str(pid).encode() in args:
            out.append(int(entry))
    return out


def _check(b: BrokerProcess, topic: str, acked: dict) -> list:
    """Every record read is what was acknowledged at its offset; each key's latest record is there."""
    end = max(acked) + 1
    got = read_all(b.bootstrap, topic, end)
    for off, k, v in got:
        assert acked.get(off) == (k, v), f"{topic} offset {off}: read {(k, v)}, acknowledged {acked.get(off)}"
    want = {}
    for off in sorted(acked):
        want[acked[off][0]] = off
    have = {off for off, _, _ in got}
    missing = {k: off for k, off in want.items() if off not in have}
    assert not missing, f"{topic}: latest records lost: {missing}"
    return got


def test_kill9_at_every_point_of_cleaning(tmp_path):
    """One topic per round (older ones are clean by then, so the crash comes from the new round's
    pass), read back after each restart; every topic is read back at the end."""
    b = BrokerProcess(tmp_path / "d", config=BROKER)
    topics: dict[str, dict[int, tuple]] = {}
    rng = random.Random(7)
    rounds = [(phase, None) for phase in PHASES] + [(None, rng.uniform(0.0, 1.0)) for _ in range(2)]
    for r, (phase, delay) in enumerate(rounds):
        b.config = {**BROKER, **({"sharebroker.log.cleaner.test.crash.phase": phase} if phase else {})}
        b.start()
        pid = b.proc.pid
        topic = create(b.bootstrap, min_compaction_lag_ms=LAG_MS)
        w = Writer(b.bootstrap, topic)
        for i in range(2000):
            w.put(b"k%d" % rng.randrange(100), b"r%d-%d" % (r, i))
        roll = w.roll()
        topics[topic] = dict(w.acked)
        if phase:
            until(lambda: b.proc.poll() is not None, 60, f"the broker to die at phase {phase}")
            b.stop()  # dead already: waits until its last lines (written just before the kill) are read
            assert any(f"crash.phase={phase}" in line for line in b.log_lines)
        else:
            until(lambda: time.time() * 1000 - w.sent_ms[0] > LAG_MS, 10, "the round to be cleanable")
            time.sleep(delay)  # a random moment of the cleaning (or just after it)
            b.kill9()
        until(lambda: not _workers_of(pid), 10, "the cleaner worker to die with the broker")
        b.proc = None
        b.config = dict(BROKER)
        b.start()
        _check(b, topic, topics[topic])
        # the pass is redone after the restart, and nothing is lost either
        until(lambda: cleaned_to(b, topic) >= roll, 60, "the pass to be done again")
        assert len([r for r in _check(b, topic, topics[topic]) if r[0] < roll]) <= 100
        b.stop()
    b.start()
    for t, acked in topics.items():  # the earlier rounds' topics are intact too
        _check(b, t, acked)
    b.stop()


def test_idempotent_producer_continues_after_cleaning_and_restart(tmp_path):
    from protocol.messages.describe_producers import DescribeProducersRequest
    from tests.wire import WireClient

    b = BrokerProcess(tmp_path / "d", config=BROKER).start()
    try:
        bs = b.bootstrap
        topic = create(bs)
        idem = Writer(bs, topic, **{"enable.idempotence": True, "enable.gapless.guarantee": True})
        for i in range(300):
            idem.put(b"shared", b"idem-%d" % i)
        idem.flush()
        other = Writer(bs, topic)
        for i in range(300):
            other.put(b"shared", b"other-%d" % i)  # the idempotent producer's records become obsolete
        roll = other.roll()
        until(lambda: cleaned_to(b, topic) >= roll, 60, "cleaning")
        assert not [v for _, _, v in read_all(bs, topic, roll) if v.startswith(b"idem")]
        b.kill9()
        b.start()

        def producers():
            req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
                name=topic, partition_indexes=[0])])
            with WireClient(bs) as wire:
                part = wire.request(req, 0).topics[0].partitions[0]
            return {p.producer_id: p.last_sequence for p in part.active_producers}
        # the producer's last batch was kept (emptied), so its state survived cleaning and the restart
        assert sorted(producers().values()) == [-1, 299] or 299 in producers().values()
        idem.put(b"shared", b"idem-after")
        idem.flush()  # the next sequence is accepted (gapless guarantee: a sequence error would be fatal)
        assert 300 in producers().values()
        got = read_all(bs, topic, max(idem.acked) + 1)
        assert got[-1][2] == b"idem-after"
    finally:
        b.stop()
