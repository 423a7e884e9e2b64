"""Share coordinator: the five share-state RPCs, records, replay, pruning, fencing, failures."""
from __future__ import annotations

import asyncio
import random

import pytest

from coordinator.runtime import MemoryRecordLog, decode_record
from coordinator.share_state import ShareCoordinator, StateBatch as B, combine_state_batches
from protocol.coordinator_records.registry import SHARE_COORDINATOR_RECORDS
from protocol.errors import Errors, KafkaError
from protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as Del
from protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as Init
from protocol.messages.read_share_group_state import ReadShareGroupStateRequest as Read
from protocol.messages.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest as Sum, ReadShareGroupStateSummaryResponse as SumResp)
from protocol.messages.write_share_group_state import WriteShareGroupStateRequest as Write

T1 = bytes(range(16))
T2 = bytes(range(16, 32))
G = "g1"
UPDATES = "share.coordinator.snapshot.update.records.per.snapshot"
COLD = "share.coordinator.cold.partition.snapshot.interval.ms"


class Config(dict):
    def get_int(self, name, default):
        return int(self.get(name, default))


class Clock:
    def __init__(self, now=1_000):
        self.now = now

    def __call__(self):
        return self.now


async def coordinator(log=None, clock=None, **config) -> ShareCoordinator:
    c = ShareCoordinator(log if log is not None else MemoryRecordLog(), Config(config), clock or Clock())
    await c.load()
    return c


def init(part=0, state_epoch=0, start=-1, topic=T1, group=G):
    return Init(group, [Init.InitializeStateData(topic, [Init.PartitionData(part, state_epoch, start)])])


def write(batches=(), start=-1, part=0, state_epoch=0, leader_epoch=0, dcc=-1, topic=T1, group=G):
    sb = [Write.StateBatch(*b) for b in batches]
    return Write(group, [Write.WriteStateData(topic, [Write.PartitionData(part, state_epoch, leader_epoch, start, dcc, sb)])])


def read(part=0, leader_epoch=0, topic=T1, group=G):
    return Read(group, [Read.ReadStateData(topic, [Read.PartitionData(part, leader_epoch)])])


def summary(part=0, topic=T1, group=G):
    return Sum(group, [Sum.ReadStateSummaryData(topic, [Sum.PartitionData(part, 0)])])


def delete(part=0, topic=T1, group=G):
    return Del(group, [Del.DeleteStateData(topic, [Del.PartitionData(part)])])


def one(response):
    """The single partition result of a single-partition response."""
    assert len(response.results) == 1 and len(response.results[0].partitions) == 1
    return response.results[0].partitions[0]


class AuditLog(MemoryRecordLog):
    """Keeps every record ever appended, whatever pruning removed."""

    def __init__(self):
        super().__init__()
        self.history = []

    async def append(self, recs):
        recs = list(recs)
        last = await super().append(recs)
        self.history.extend((last - len(recs) + 1 + i, k, v) for i, (k, v) in enumerate(recs))
        return last


def records(log, history=False):
    """The log decoded: (offset, record type name, value or None)."""
    out = []
    for off, k, v in (log.history if history else log.replay()):
        r = decode_record(SHARE_COORDINATOR_RECORDS, k, v)
        out.append((off, "S" if r.record_type == 0 else "U", r.value))
    return out


async def ok(coro):
    p = one(await coro)
    assert p.error_code == 0, p
    return p


def batches(c, part=0, topic=T1):
    return list(c.state_of(G, topic, part).state_batches)


# --------------------------------------------------------------------------- combiner

def brute_force(so_far, new, start):
    """Per-offset model: highest (count, state) wins, then runs are coalesced."""
    best = {}
    for b in (*so_far, *new):
        for o in range(max(b.first_offset, start if start != -1 else b.first_offset), b.last_offset + 1):
            cand = (b.delivery_count, b.delivery_state)
            best[o] = max(best.get(o, cand), cand)
    out = []
    for o in sorted(best):
        count, state = best[o]
        if out and out[-1].last_offset + 1 == o and out[-1][2:] == (state, count):
            out[-1] = out[-1]._replace(last_offset=o)
        else:
            out.append(B(o, o, state, count))
    return out


@pytest.mark.parametrize("so_far,new,start,expected", [
    # Runs below the start offset are dropped, a straddling run is clipped.
    ([B(100, 130, 0, 1)], [], 120, [B(120, 130, 0, 1)]),
    ([], [B(100, 130, 0, 1)], 120, [B(120, 130, 0, 1)]),
    # Same state: overlapping or adjacent runs coalesce.
    ([B(100, 110, 0, 1)], [B(105, 115, 0, 1)], -1, [B(100, 115, 0, 1)]),
    ([B(100, 110, 0, 1)], [B(111, 115, 0, 1)], -1, [B(100, 115, 0, 1)]),
    # A higher delivery count punches a hole into an older run.
    ([B(100, 115, 0, 1)], [B(105, 110, 0, 2)], -1, [B(100, 104, 0, 1), B(105, 110, 0, 2), B(111, 115, 0, 1)]),
    # Same count, higher state (acknowledged) wins; a lower-priority newcomer loses.
    ([B(100, 115, 0, 1)], [B(105, 110, 2, 1)], -1, [B(100, 104, 0, 1), B(105, 110, 2, 1), B(111, 115, 0, 1)]),
    ([B(100, 115, 2, 1)], [B(105, 110, 0, 1)], -1, [B(100, 115, 2, 1)]),
    # Kafka's worked cases (PersisterStateBatchCombinerTest).
    ([B(100, 110, 0, 1)], [B(101, 105, 1, 2), B(101, 115, 2, 2), B(101, 120, 3, 2)], -1,
     [B(100, 100, 0, 1), B(101, 120, 3, 2)]),
    ([B(100, 110, 0, 1), B(121, 130, 0, 1)], [B(111, 119, 2, 2), B(116, 123, 2, 2)], 120,
     [B(120, 123, 2, 2), B(124, 130, 0, 1)]),
    ([B(111, 120, 0, 1)], [B(111, 113, 0, 2), B(114, 114, 2, 1), B(115, 119, 0, 2)], -1,
     [B(111, 113, 0, 2), B(114, 114, 2, 1), B(115, 119, 0, 2), B(120, 120, 0, 1)]),
    # Inverted runs are ignored.
    ([B(10, 5, 0, 1)], [B(1, 2, 0, 1)], -1, [B(1, 2, 0, 1)]),
])
def test_combiner_worked_examples(so_far, new, start, expected):
    assert list(combine_state_batches(so_far, new, start)) == expected


def test_combiner_partial_acks_do_not_fragment_state():
    state = (B(0, 99, 0, 1),)
    acked = set()
    for o in range(100):  # acknowledge one offset at a time, out of order
        o = (o * 37) % 100
        acked.add(o)
        state = combine_state_batches(state, [B(o, o, 2, 1)], -1)
        # Never more runs than the per-offset state has maximal runs.
        runs = 1 + sum((i in acked) != (i - 1 in acked) for i in range(1, 100))
        assert len(state) == runs
    assert state == (B(0, 99, 2, 1),)
    # In-order acks (the common case) keep at most two runs all along.
    state = (B(0, 99, 0, 1),)
    for o in range(100):
        state = combine_state_batches(state, [B(o, o, 2, 1)], -1)
        assert len(state) <= 2


def test_combiner_matches_per_offset_model():
    rng = random.Random(932)
    for _ in range(300):
        def runs(n):
            out = []
            for _ in range(n):
                first = rng.randrange(0, 60)
                out.append(B(first, first + rng.randrange(0, 15), rng.choice((0, 2, 4)), rng.randrange(1, 4)))
            return out
        so_far, new, start = runs(rng.randrange(0, 5)), runs(rng.randrange(0, 5)), rng.choice((-1, 0, 20, 45))
        got = list(combine_state_batches(so_far, new, start))
        assert got == brute_force(so_far, new, start), (so_far, new, start)
        assert all(a.last_offset < b.first_offset for a, b in zip(got, got[1:]))


# ------------------------------------------------------------------------ operations

async def test_initialize_write_read_delete_round_trip():
    log = MemoryRecordLog()
    c = await coordinator(log)
    p = await ok(c.initialize_state(init(state_epoch=3, start=-1)))
    assert p.error_message is None
    p = await ok(c.read_state(read(leader_epoch=0)))
    assert (p.state_epoch, p.start_offset, p.state_batches) == (3, -1, [])
    await ok(c.write_state(write([(10, 19, 0, 1)], start=10, state_epoch=3)))
    await ok(c.write_state(write([(12, 14, 2, 1)], state_epoch=3)))  # start -1: unchanged
    p = await ok(c.read_state(read()))
    assert p.start_offset == 10
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches] == [
        (10, 11, 0, 1), (12, 14, 2, 1), (15, 19, 0, 1)]
    assert [r[1] for r in records(log)] == ["S", "U", "U"]

    await ok(c.delete_state(delete()))
    off, kind, value = records(log)[-1]
    assert (kind, value) == ("S", None)  # tombstone on the ShareSnapshot key
    assert c.state_of(G, T1, 0) is None
    p = one(await c.read_state(read()))
    assert (p.error_code, p.error_message) == (
        Errors.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
    # Deleting an unknown share-partition succeeds and writes nothing.
    n = len(log.records)
    await ok(c.delete_state(delete(part=5)))
    assert len(log.records) == n
    # The deletion survives replay.
    fresh = await coordinator(log)
    assert fresh.soft_state() == {}
    p = await ok(fresh.read_state_summary(summary()))
    assert (p.start_offset, p.delivery_complete_count) == (-1, -1)


async def test_uninitialized_and_invalid_partitions():
    log = MemoryRecordLog()
    c = await coordinator(log)
    p = one(await c.write_state(write([(0, 5, 0, 1)], start=0)))
    assert (p.error_code, p.error_message) == (
        Errors.INVALID_REQUEST, "Write operation on uninitialized share partition not allowed.")
    p = await ok(c.read_state_summary(summary()))
    assert (p.state_epoch, p.leader_epoch, p.start_offset, p.delivery_complete_count) == (0, 0, -1, -1)
    for req in (init(part=-1), read(part=-1), write(part=-1), delete(part=-1), summary(part=-1)):
        p = one(await getattr(c, {Init: "initialize_state", Read: "read_state", Write: "write_state",
                                  Del: "delete_state", Sum: "read_state_summary"}[type(req)])(req))
        assert (p.partition, p.error_code, p.error_message) == (
            -1, Errors.INVALID_REQUEST, "The partition id cannot be a negative number.")
    assert log.records == []


async def test_request_shape_load_and_shutdown():
    log = MemoryRecordLog()
    c = ShareCoordinator(log, None, Clock())
    p = one(await c.initialize_state(init()))
    assert p.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert p.error_message.startswith("Unable to initialize share group state: ")
    await c.load()
    await ok(c.initialize_state(init()))
    # Malformed requests get an empty response, as in Kafka.
    assert (await c.write_state(write(group=""))).results == []
    assert (await c.read_state(Read(G, []))).results == []
    assert (await c.write_state(Write(G, [Write.WriteStateData(T1, [])]))).results == []
    c.shutdown()
    for resp in (await c.write_state(write()), await c.read_state_summary(summary())):
        p = one(resp)
        assert (p.error_code, p.error_message) == (Errors.COORDINATOR_NOT_AVAILABLE, "Share coordinator is not available.")


async def test_unknown_topic_partition_hook():
    c = ShareCoordinator(MemoryRecordLog(), None, Clock(), partition_exists=lambda t, p: t == T1 and p < 2)
    await c.load()
    await ok(c.initialize_state(init(part=1)))
    for resp in (await c.initialize_state(init(topic=T2)), await c.read_state_summary(summary(part=2)),
                 await c.delete_state(delete(topic=T2))):
        assert one(resp).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert one(resp).error_message == "This server does not host this topic-partition."


async def test_multi_partition_request_grouped_by_topic():
    c = await coordinator()
    req = Init(G, [Init.InitializeStateData(T1, [Init.PartitionData(0, 0, -1), Init.PartitionData(1, 0, 5)]),
                   Init.InitializeStateData(T2, [Init.PartitionData(0, 0, 7)])])
    resp = await c.initialize_state(req)
    assert [(r.topic_id, [p.partition for p in r.partitions]) for r in resp.results] == [(T1, [0, 1]), (T2, [0])]
    req = Write(G, [Write.WriteStateData(T1, [Write.PartitionData(1, 0, 0, 6, 1, []),
                                              Write.PartitionData(3, 0, 0, 6, 1, [])]),
                    Write.WriteStateData(T2, [Write.PartitionData(0, 0, 0, 9, 2, [])])])
    resp = await c.write_state(req)
    assert [[p.error_code for p in r.partitions] for r in resp.results] == [[0, Errors.INVALID_REQUEST], [0]]
    assert c.state_of(G, T1, 1).start_offset == 6 and c.state_of(G, T2, 0).start_offset == 9


# ----------------------------------------------------------------- snapshots, replay

async def test_snapshot_cadence_every_n_updates():
    log = AuditLog()
    c = await coordinator(log, **{UPDATES: 2})
    await ok(c.initialize_state(init(start=0)))
    for i in range(7):
        await ok(c.write_state(write([(i * 10, i * 10 + 9, 2, 1)], start=0)))
    recs = records(log, history=True)
    assert [r[1] for r in recs] == ["S", "U", "U", "S", "U", "U", "S", "U"]
    assert [r[2].snapshot_epoch for r in recs] == [0, 0, 0, 1, 1, 1, 2, 2]
    # A snapshot carries the whole merged state, an update only its delta.
    assert [(b.first_offset, b.last_offset) for b in recs[6][2].state_batches] == [(0, 59)]
    assert [(b.first_offset, b.last_offset) for b in recs[7][2].state_batches] == [(60, 69)]
    assert batches(c) == [B(0, 69, 2, 1)]
    assert [r[0] for r in records(log)] == [6, 7]  # pruned below the latest snapshot
    assert (await coordinator(log, **{UPDATES: 2})).soft_state() == c.soft_state()


async def test_only_count_triggered_snapshots_reset_the_update_count():
    log = AuditLog()
    c = await coordinator(log, **{UPDATES: 3})
    await ok(c.initialize_state(init(start=0)))
    await ok(c.write_state(write([(0, 0, 2, 1)])))
    await ok(c.write_state(write([(1, 1, 2, 1)])))
    await ok(c.initialize_state(init(state_epoch=1, start=5)))  # a snapshot, but the count stays at 2
    await ok(c.write_state(write([(5, 5, 2, 1)], state_epoch=1)))
    await ok(c.write_state(write([(6, 6, 2, 1)], state_epoch=1)))
    assert [r[1] for r in records(log, history=True)] == ["S", "U", "U", "S", "U", "S"]


async def test_snapshot_on_every_write_when_n_is_zero():
    log = AuditLog()
    c = await coordinator(log, **{UPDATES: 0})
    await ok(c.initialize_state(init(start=100)))
    # Kafka's "non-sequential batch updates": b2 must survive a later snapshot.
    await ok(c.write_state(write([(100, 109, 1, 1), (110, 119, 1, 2), (120, 129, 1, 0)], start=100, dcc=0)))
    await ok(c.write_state(write([(100, 109, 2, 1)], dcc=10)))
    await ok(c.write_state(write([(120, 129, 2, 1)], start=110, dcc=10)))
    assert [r[1] for r in records(log, history=True)] == ["S", "S", "S", "S"]
    s = c.state_of(G, T1, 0)
    assert (s.snapshot_epoch, s.start_offset, s.delivery_complete_count) == (3, 110, 10)
    assert list(s.state_batches) == [B(110, 119, 1, 2), B(120, 129, 2, 1)]


async def test_fresh_coordinator_replays_identical_state_after_pruning():
    log = MemoryRecordLog()
    clock = Clock()
    c = await coordinator(log, clock, **{UPDATES: 1})
    await ok(c.initialize_state(init(part=0, start=0)))          # 0 S(A)
    await ok(c.initialize_state(init(part=1, start=0)))          # 1 S(B)
    await ok(c.write_state(write([(0, 4, 2, 1)], part=0)))        # 2 U(A)
    assert log.start_offset == 0
    await ok(c.write_state(write([(5, 9, 0, 2)], part=0)))        # 3 S(A): B's snapshot at 1 is the oldest needed
    assert c.last_redundant_offset == 1 and log.start_offset == 1
    await ok(c.write_state(write([(0, 2, 2, 1)], part=1, dcc=3)))  # 4 U(B)
    await ok(c.write_state(write([(3, 3, 4, 1)], part=1, dcc=4)))  # 5 S(B)
    assert c.last_redundant_offset == 3 and log.start_offset == 3
    await ok(c.read_state(read(part=1, leader_epoch=7)))          # 6 U(B) leader epoch bump
    await ok(c.initialize_state(init(part=2, start=50, topic=T2)))
    await ok(c.delete_state(delete(part=2, topic=T2)))
    assert [r[0] for r in records(log)][0] == 3
    fresh = await coordinator(log, clock, **{UPDATES: 1})
    assert fresh.soft_state() == c.soft_state()
    assert fresh.state_of(G, T1, 0).state_batches == (B(0, 4, 2, 1), B(5, 9, 0, 2))
    p = await ok(fresh.read_state_summary(summary(part=1)))
    assert (p.leader_epoch, p.delivery_complete_count) == (7, 4)
    # Both go on identically from there.
    for x in (c, fresh):
        await ok(x.write_state(write([(10, 12, 0, 1)], part=0, leader_epoch=7)))
    assert fresh.soft_state() == c.soft_state()


async def test_deleted_share_partition_stops_holding_back_pruning():
    log = MemoryRecordLog()
    c = await coordinator(log, **{UPDATES: 0})
    await ok(c.initialize_state(init(part=0)))  # 0
    await ok(c.initialize_state(init(part=1)))  # 1
    await ok(c.delete_state(delete(part=0)))    # 2 tombstone
    await ok(c.write_state(write(part=1)))      # 3 snapshot of B: nothing below it is needed
    assert log.start_offset == 3
    fresh = await coordinator(log)
    assert set(fresh.soft_state()) == {(G, T1, 1)}


async def test_a_quiet_share_partition_does_not_hold_pruning_back(monkeypatch):
    """A share-partition written once, while another is written on and on, gets a fresh snapshot once
    its latest one lies PRUNE_LAG_BYTES behind the log end, so the log is pruned past it (it would
    otherwise wait for its cold snapshot); its state is unchanged."""
    import coordinator.share_state.coordinator as sc

    monkeypatch.setattr(sc, "PRUNE_LAG_BYTES", 40 * 100, raising=False)
    log = MemoryRecordLog()
    c = await coordinator(log, **{UPDATES: 5})
    await ok(c.initialize_state(init(part=0, start=0)))
    await ok(c.write_state(write([(0, 9, 2, 1)], part=0)))   # the quiet one
    quiet = c.state_of(G, T1, 0)
    await ok(c.initialize_state(init(part=1, start=0)))
    for i in range(200):
        await ok(c.write_state(write([(i, i, 2, 1)], part=1)))
        await asyncio.sleep(0)  # the refresh runs as its own task
    assert log.start_offset > 150, "pruned past the quiet share-partition's first snapshot"
    s = c.state_of(G, T1, 0)
    assert (s.state_batches, s.start_offset, s.state_epoch) == (quiet.state_batches, 0, quiet.state_epoch)
    assert s.snapshot_epoch > quiet.snapshot_epoch
    fresh = await coordinator(log)
    assert fresh.soft_state() == c.soft_state(), "replaying the pruned log gives the same state"


async def test_cold_partitions_get_a_fresh_snapshot():
    log = MemoryRecordLog()
    clock = Clock(1_000)
    c = await coordinator(log, clock, **{COLD: 10_000})
    await ok(c.initialize_state(init(part=0, start=0)))
    await ok(c.initialize_state(init(part=1, start=0)))
    await ok(c.write_state(write([(0, 9, 2, 1)], part=0)))
    clock.now = 5_000
    await ok(c.write_state(write([(0, 0, 2, 1)], part=1, state_epoch=0, start=0)))
    clock.now = 10_999
    assert await c.snapshot_cold_partitions() == 0
    clock.now = 11_000
    assert await c.snapshot_cold_partitions() == 2
    s = c.state_of(G, T1, 0)
    assert (s.snapshot_epoch, s.create_timestamp, s.write_timestamp) == (1, 1_000, 11_000)
    assert s.state_batches == (B(0, 9, 2, 1),)
    assert log.start_offset == 4  # the cold snapshots (4, 5) make everything before them redundant
    clock.now = 50_000
    assert await c.snapshot_cold_partitions() == 0  # all already cold-snapshotted: Kafka skips


async def test_periodic_cold_snapshot_timer():
    clock = Clock(0)
    c = await coordinator(clock=clock, **{COLD: 5})
    await ok(c.initialize_state(init(start=0)))
    clock.now = 100
    c.start_periodic_jobs()
    for _ in range(200):
        if c.state_of(G, T1, 0).snapshot_epoch == 1:
            break
        await asyncio.sleep(0.005)
    assert c.state_of(G, T1, 0).write_timestamp == 100
    c.shutdown()


async def test_topic_deletion_tombstones_its_share_partitions():
    c = await coordinator()
    for topic, part in ((T1, 0), (T1, 1), (T2, 0)):
        await ok(c.initialize_state(init(part=part, topic=topic)))
    assert await c.on_topics_deleted([T1]) == 2
    assert set(c.soft_state()) == {(G, T2, 0)}


# ------------------------------------------------------------------------- fencing

async def test_state_and_leader_epoch_fencing():
    log = MemoryRecordLog()
    c = await coordinator(log)
    await ok(c.initialize_state(init(state_epoch=2, start=0)))
    n = len(log.records)
    p = one(await c.write_state(write([(0, 0, 2, 1)], state_epoch=1)))
    assert (p.error_code, p.error_message) == (
        Errors.FENCED_STATE_EPOCH,
        "The share coordinator rejected the request because the share-group state epoch did not match.")
    assert len(log.records) == n
    await ok(c.write_state(write([(0, 0, 2, 1)], state_epoch=-1)))  # -1: not checked
    await ok(c.write_state(write([(1, 1, 2, 1)], state_epoch=3)))   # newer is accepted, not stored
    assert (await ok(c.read_state_summary(summary()))).state_epoch == 2

    # A new leader reads with its epoch: persisted before the answer, older leaders are fenced.
    n = len(log.records)
    await ok(c.read_state(read(leader_epoch=5)))
    assert len(log.records) == n + 1
    assert (await ok(c.read_state_summary(summary()))).leader_epoch == 5
    await ok(c.read_state(read(leader_epoch=5)))
    assert len(log.records) == n + 1  # same epoch: nothing to write
    p = one(await c.write_state(write([(2, 2, 2, 1)], state_epoch=2, leader_epoch=4)))
    assert (p.error_code, p.error_message) == (
        Errors.FENCED_LEADER_EPOCH, "The leader epoch in the request is older than the epoch on the broker.")
    await ok(c.write_state(write([(2, 2, 2, 1)], state_epoch=2, leader_epoch=-1)))
    assert one(await c.read_state(read(leader_epoch=4))).error_code == Errors.FENCED_LEADER_EPOCH
    # Kafka 4.4 has no -1 exemption on reads once a leader epoch is stored.
    assert one(await c.read_state(read(leader_epoch=-1))).error_code == Errors.FENCED_LEADER_EPOCH
    # Writes never move the persisted leader epoch; only reads do.
    assert c.state_of(G, T1, 0).leader_epoch == 5

    # Re-initialization: an older state epoch is fenced, a newer one resets the state.
    assert one(await c.initialize_state(init(state_epoch=1, start=0))).error_code == Errors.FENCED_STATE_EPOCH
    await ok(c.initialize_state(init(state_epoch=4, start=100)))
    s = c.state_of(G, T1, 0)
    assert (s.state_epoch, s.start_offset, s.state_batches, s.snapshot_epoch, s.delivery_complete_count) == (
        4, 100, (), 1, 0)
    assert one(await c.write_state(write(state_epoch=2, leader_epoch=-1))).error_code == Errors.FENCED_STATE_EPOCH
    # The highest leader epoch seen still fences, as in Kafka's leader epoch map.
    assert one(await c.write_state(write(state_epoch=4, leader_epoch=4))).error_code == Errors.FENCED_LEADER_EPOCH
    # The re-initialization snapshot pruned the older records, so after a restart
    # the state is the same but leader epoch 5 is forgotten (Kafka rebuilds the
    # map the same way; the newer state epoch fences old leaders anyway).
    fresh = await coordinator(log)
    assert fresh.state_of(G, T1, 0) == c.state_of(G, T1, 0)
    assert fresh.soft_state()[(G, T1, 0)][1:] == (0, 4)


# -------------------------------------------------------------------------- failures

@pytest.mark.parametrize("exc,code", [
    (RuntimeError("disk on fire"), Errors.UNKNOWN_SERVER_ERROR),
    (KafkaError(Errors.NOT_ENOUGH_REPLICAS), Errors.COORDINATOR_NOT_AVAILABLE),
    (KafkaError(Errors.REQUEST_TIMED_OUT), Errors.COORDINATOR_NOT_AVAILABLE),
    (OSError(28, "No space left on device"), Errors.NOT_COORDINATOR),
    (KafkaError(Errors.MESSAGE_TOO_LARGE), Errors.UNKNOWN_SERVER_ERROR),
])
async def test_failed_append_leaves_state_unchanged(exc, code):
    log = MemoryRecordLog()
    c = await coordinator(log, **{UPDATES: 1})
    await ok(c.initialize_state(init(start=0)))
    await ok(c.write_state(write([(0, 4, 2, 1)])))
    before, n = c.soft_state(), len(log.records)
    for req, method, what in (
        (write([(5, 9, 2, 1)], start=5), c.write_state, "write share group state"),   # would be a snapshot
        (read(leader_epoch=3), c.read_state, "read share group state"),
        (delete(), c.delete_state, "delete share group state"),
        (init(state_epoch=1), c.initialize_state, "initialize share group state"),
        (init(part=9), c.initialize_state, "initialize share group state"),
    ):
        log.fail_next = exc
        p = one(await method(req))
        assert p.error_code == code
        assert p.error_message == f"Unable to {what}: {exc}"
        assert c.soft_state() == before and len(log.records) == n
    # The next write goes through and replay agrees.
    await ok(c.write_state(write([(5, 9, 2, 1)], start=5)))
    assert (await coordinator(log, **{UPDATES: 1})).soft_state() == c.soft_state()


async def test_concurrent_writes_are_serialized():
    class SlowLog(MemoryRecordLog):
        async def append(self, recs):
            for _ in range(3):
                await asyncio.sleep(0)
            return await super().append(recs)

    log = SlowLog()
    c = await coordinator(log, **{UPDATES: 0})  # every write is a full snapshot
    await ok(c.initialize_state(init(start=0)))
    results = await asyncio.gather(*(c.write_state(write([(i, i, 2, 1)])) for i in range(5)))
    assert all(one(r).error_code == 0 for r in results)
    assert batches(c) == [B(0, 4, 2, 1)]
    assert (await coordinator(log, **{UPDATES: 0})).soft_state() == c.soft_state()


# --------------------------------------------------------------- KIP-932 and KIP-1226

def effective_spso(state):
    """The SPSO the leader derives: the start offset moved over a terminal prefix."""
    spso = state.start_offset
    for b in state.state_batches:
        if b.first_offset != spso or b.delivery_state not in (2, 4):
            break
        spso = b.last_offset + 1
    return spso


async def test_kip932_examples_with_share_group_state():
    log = MemoryRecordLog()
    c = await coordinator(log)
    await ok(c.initialize_state(Init("G1", [Init.InitializeStateData(T1, [Init.PartitionData(0, 0, -1)])])))
    AV, ACK = 0, 2
    # (write: StartOffset, StateBatches) -> (durable batches, SPSO in the KIP's cumulative state column)
    steps = [
        ((100, []), ([], 100)),                                        # starting state
        ((110, []), ([], 110)),                                        # acknowledge 100-109
        ((-1, [(110, 110, AV, 1)]), ([B(110, 110, AV, 1)], 110)),      # release 110
        ((-1, [(119, 119, ACK, 1)]), ([B(110, 110, AV, 1), B(119, 119, ACK, 1)], 110)),  # ack 119
        ((-1, [(111, 112, AV, 1)]), ([B(110, 112, AV, 1), B(119, 119, ACK, 1)], 110)),   # lock timeout
        ((-1, [(113, 118, ACK, 1)]), ([B(110, 112, AV, 1), B(113, 119, ACK, 1)], 110)),  # ack 113-118
        ((-1, [(110, 110, ACK, 2)]), ([B(110, 110, ACK, 2), B(111, 112, AV, 1), B(113, 119, ACK, 1)], 111)),
        ((120, []), ([], 120)),                                        # ack 111, 112
    ]
    for (start, sb), (expected, spso) in steps:
        await ok(c.write_state(write(sb, start=start, group="G1")))
        s = c.state_of("G1", T1, 0)
        assert list(s.state_batches) == expected
        assert effective_spso(s) == spso
    assert [r[1] for r in records(log)] == ["S"] + ["U"] * len(steps)
    assert (await coordinator(log)).soft_state() == c.soft_state()


async def test_delivery_complete_count_over_the_wire():
    log = MemoryRecordLog()
    c = await coordinator(log)

    async def wire(method, req, version):
        resp = await method(type(req).decode(req.encode(version), version))
        return type(resp).decode(resp.encode(version), version)

    await ok(c.initialize_state(init(start=-1)))
    assert c.state_of(G, T1, 0).delivery_complete_count == -1  # lag unknown until SPSO is known
    await ok(c.initialize_state(init(part=1, start=40)))
    assert c.state_of(G, T1, 1).delivery_complete_count == 0

    p = one(await wire(c.write_state, write([(0, 6, 2, 1)], start=0, dcc=7), 1))
    assert p.error_code == 0
    assert records(log)[-1][2].delivery_complete_count == 7  # tagged field 0 of ShareUpdateValue
    p = one(await wire(c.read_state_summary, summary(), 1))
    assert (p.start_offset, p.state_epoch, p.leader_epoch, p.delivery_complete_count) == (0, 0, 0, 7)
    # v0 of the summary has no DeliveryCompleteCount on the wire.
    assert SumResp.PartitionResult().delivery_complete_count == -1
    assert one(await wire(c.read_state_summary, summary(), 0)).delivery_complete_count == -1
    assert (await coordinator(log)).state_of(G, T1, 0).delivery_complete_count == 7

    # A v0 write carries no DeliveryCompleteCount: stored as -1, as Kafka does.
    await ok(wire(c.write_state, write([(7, 7, 2, 1)], dcc=8), 0))
    assert one(await wire(c.read_state_summary, summary(), 1)).delivery_complete_count == -1
    # A snapshot keeps it too.
    c.updates_per_snapshot = 0
    await ok(wire(c.write_state, write([(8, 8, 2, 1)], dcc=9), 1))
    assert records(log)[-1][1] == "S" and records(log)[-1][2].delivery_complete_count == 9
    assert (await coordinator(log)).state_of(G, T1, 0).delivery_complete_count == 9
