"""SharePartition and the persister: initialization (share.auto.offset.reset, persisted state, gaps),
persist-then-commit and rollback, fencing, the log start offset, and KIP-1226 DeliveryCompleteCount
(the lag the share coordinator gives is exact, checked against brute-force counts)."""
from __future__ import annotations

import asyncio

import pytest

from protocol.errors import Errors

from broker.share.acks import ACK_ACCEPT as ACC, ACK_GAP as GAP, ACK_REJECT as REJ, ACK_RELEASE as REL
from broker.share.config import ShareGroupConfig
from broker.share.errors import ShareError
from broker.share.partition import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, FAILED, FENCED, RECORD_LIMIT, SharePartition,
)
from tests.unit.share_partition_support import (
    GROUP, TOPIC, AckBatch, FakeLog, FakePersister, FakeTimers, H, Ref, make, payload,
)


# ---------------------------------------------------------------- initialization

async def test_uninitialized_spso_resets_to_latest_and_is_persisted():
    h = await make(sizes=(10,) * 10)
    assert h.sp.start_offset == 100 and h.sp.next_fetch_offset() == 100
    assert [payload(w) for w in h.p.writes] == [(100, 0, [])]
    assert h.fetch("a") == []  # nothing past the latest offset yet
    h.log.append(5)
    assert h.fetch("a") == [(100, 104, 1)]


async def test_reset_earliest_and_by_duration():
    h = await make(auto_offset_reset="earliest", log_start=20)
    assert h.sp.start_offset == 20 and payload(h.p.writes[0])[0] == 20

    timers = FakeTimers()
    timers.now = 10_000_000
    log = FakeLog((10,) * 5)
    log.by_timestamp = (30, 9_999_999)
    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=FakePersister(), scheduler=timers,
                        now_ms=lambda: 0, wall_ms=timers.now_ms, leader_epoch=7,
                        config=ShareGroupConfig(auto_offset_reset="by_duration:PT1H30M"))
    await sp.initialize()
    assert sp.start_offset == 30 and log.asked_timestamp == 10_000_000 - 5_400_000

    log.by_timestamp = None  # nothing that recent: the log end
    sp2 = SharePartition(GROUP, TOPIC, 0, log=log, persister=FakePersister(), scheduler=timers,
                         now_ms=timers.now_ms, wall_ms=timers.now_ms,
                         config=ShareGroupConfig(auto_offset_reset="by_duration:P1D"))
    await sp2.initialize()
    assert sp2.start_offset == 50


async def test_initialize_from_persisted_state_with_gap():
    h = await make(start=10, batches=[(15, 20, ACKNOWLEDGED, 1), (21, 25, AVAILABLE, 2),
                                     (26, 30, ARCHIVED, 3)])
    assert h.p.writes == []  # a known SPSO is not rewritten
    assert h.sp.start_offset == 10 and h.sp.end_offset == 31
    assert h.sp.delivery_complete_count == 6 + 5
    assert h.state(12) == (AVAILABLE, 0, "", False)  # unknown gap: offered again
    assert h.sp.next_fetch_offset() == 10
    assert h.fetch("a") == [(10, 14, 1), (21, 25, 3), (31, 99, 1)]
    h.check_dcc()


async def test_initialize_advances_over_terminal_prefix():
    h = await make(start=10, batches=[(10, 14, ACKNOWLEDGED, 1), (15, 16, ARCHIVED, 5),
                                     (17, 19, AVAILABLE, 1)])
    assert h.sp.start_offset == 17 and h.sp.delivery_complete_count == 0
    assert h.fetch("a", max_records=3) == [(17, 19, 2)]


async def test_initialize_failure_is_sticky():
    timers = FakeTimers()
    p = FakePersister(read_error=Errors.COORDINATOR_LOAD_IN_PROGRESS)
    sp = SharePartition(GROUP, TOPIC, 0, log=FakeLog(), persister=p, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms)
    with pytest.raises(ShareError) as e:
        await sp.initialize()
    assert e.value.code == Errors.COORDINATOR_NOT_AVAILABLE and sp.status == FAILED
    with pytest.raises(ShareError):
        await sp.initialize()
    assert sp.acquire("a", [Ref(0, 9)], max_records=10, batch_size=10) == ([], [], 0)
    assert await sp.acknowledge("a", [AckBatch(0, 9, [1])]) == Errors.COORDINATOR_NOT_AVAILABLE


async def test_failing_to_persist_the_reset_spso_fails_initialization():
    timers = FakeTimers()
    p = FakePersister()
    p.errors = [Errors.NOT_COORDINATOR]
    sp = SharePartition(GROUP, TOPIC, 0, log=FakeLog((10,)), persister=p, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms)
    with pytest.raises(ShareError) as e:
        await sp.initialize()
    assert e.value.code == Errors.COORDINATOR_NOT_AVAILABLE and sp.status == FAILED


async def test_concurrent_initialize_reads_once():
    timers = FakeTimers()
    p = FakePersister(start_offset=0)
    calls = []
    orig = p.read_state

    async def counting(req):
        calls.append(req)
        return await orig(req)

    p.read_state = counting
    sp = SharePartition(GROUP, TOPIC, 0, log=FakeLog((10,)), persister=p, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms)
    await asyncio.gather(sp.initialize(), sp.initialize())
    assert len(calls) == 1 and sp.start_offset == 0
    assert calls[0].topics[0].topic_id == TOPIC and calls[0].group_id == GROUP

# ---------------------------------------------------------------- persist, then commit

async def test_persist_failure_rolls_back():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.errors = [Errors.COORDINATOR_LOAD_IN_PROGRESS]
    assert await h.ack("a", 0, 9, ACC) == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.state(0) == (ACQUIRED, 1, "a", False)
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 0
    assert h.t.pending() == [30_000]
    assert await h.ack("a", 0, 9, ACC) == 0
    assert h.sp.start_offset == 10


async def test_persister_exception_and_fencing():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)

    async def boom(req):
        raise RuntimeError("disk on fire")

    write = h.p.write_state
    h.p.write_state = boom
    assert await h.ack("a", 0, 9, ACC) == Errors.UNKNOWN_SERVER_ERROR
    h.p.write_state = write
    h.p.errors = [Errors.FENCED_STATE_EPOCH]
    assert await h.ack("a", 0, 9, ACC) == Errors.NOT_LEADER_OR_FOLLOWER
    assert h.sp.status == FENCED
    assert await h.ack("a", 0, 9, ACC) == Errors.NOT_LEADER_OR_FOLLOWER
    assert h.fetch("a") == []


async def test_records_in_transition_are_skipped_and_rejected():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    release = asyncio.ensure_future(h.ack("a", 0, 4, REL))
    await h.p.wait_held(1)
    assert h.state(0) == (AVAILABLE, 1, "", True)
    assert h.sp.next_fetch_offset() == 10                # not offered while in transition
    assert h.sp.acquire("b", h.log.read(0), max_records=10, batch_size=10,
                        fetch_offset=0).acquired == [(10, 19, 1)]
    assert await h.ack("a", 0, 4, ACC) == Errors.INVALID_RECORD_STATE
    accept = asyncio.ensure_future(h.ack("a", 5, 9, ACC))
    await h.p.wait_held(2)
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 0
    assert payload(h.p.writes[-1]) == (0, 5, [(5, 9, ACKNOWLEDGED, 1)])
    h.p.complete(1, 0)
    assert await accept == 0
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 5
    h.p.complete(0, 0)
    assert await release == 0
    assert h.sp.next_fetch_offset() == 0
    h.check_dcc()


async def test_lock_expiring_during_a_failed_ack_write_releases_the_records():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    accept = asyncio.ensure_future(h.ack("a", 0, 9, ACC))
    await h.p.wait_held(1)
    h.t.advance(30_000)                                   # lock runs out while writing
    assert h.state(0) == (ACKNOWLEDGED, 1, "", True)
    h.p.hold = False
    h.p.complete(0, Errors.COORDINATOR_NOT_AVAILABLE)
    assert await accept == Errors.COORDINATOR_NOT_AVAILABLE
    await h.sp.drain()
    assert h.last_write() == (0, 0, [(0, 9, AVAILABLE, 1)])
    assert h.state(0) == (AVAILABLE, 1, "", False)


async def test_lock_expiring_during_a_successful_ack_write_keeps_the_ack():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    accept = asyncio.ensure_future(h.ack("a", 0, 9, ACC))
    await h.p.wait_held(1)
    h.t.advance(30_000)
    h.p.complete(0, 0)
    assert await accept == 0
    await h.sp.drain()
    assert len(h.p.writes) == 1 and h.sp.start_offset == 10   # nothing was left to expire

# ---------------------------------------------------------------- log start offset

async def test_spso_follows_the_log_start_offset():
    h = await make(sizes=(10,) * 3, start=0)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    assert h.fetch("b", max_records=10) == [(10, 19, 1)]
    assert await h.ack("b", 10, 14, ACC) == 0
    h.log.log_start_offset = 12
    wakeups, writes = h.wakeups, len(h.p.writes)
    assert h.sp.next_fetch_offset() == 20         # a query: the log start is followed explicitly
    assert h.sp.start_offset == 0 and len(h.p.writes) == writes and h.wakeups == wakeups
    h.sp.update_log_start_offset(h.log.log_start_offset)
    assert h.sp.next_fetch_offset() == 20
    assert h.wakeups > wakeups
    assert h.sp.start_offset == 15 and h.sp.delivery_complete_count == 0
    assert h.t.pending() == [30_000]              # a's lock is gone with its records
    assert await h.ack("a", 0, 9, ACC) == 0       # below the SPSO: skipped
    assert await h.ack("b", 10, 19, ACC) == 0
    assert h.last_write() == (15, 5, [(15, 19, ACKNOWLEDGED, 1)])
    assert h.sp.start_offset == 20
    h.sp.update_log_start_offset(50)
    assert h.sp.start_offset == 50 and h.sp.end_offset == 50 and h.sp.in_flight_count == 0
    h.log.log_start_offset = 50
    assert h.fetch("a") == []


async def test_log_start_moving_during_a_write():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    accept = asyncio.ensure_future(h.ack("a", 0, 9, ACC))
    await h.p.wait_held(1)
    h.sp.update_log_start_offset(5)
    await h.p.wait_held(2)
    # the moved SPSO is written at once; of the acknowledgement in flight only 5-9 count (KIP-1226)
    assert payload(h.p.writes[-1]) == (5, 5, [])
    h.p.complete(0, Errors.COORDINATOR_NOT_AVAILABLE)
    assert await accept == Errors.COORDINATOR_NOT_AVAILABLE
    h.p.complete(0)
    await h.sp.drain()
    assert h.state(2) == (ARCHIVED, 1, "", False) and h.state(5) == (ACQUIRED, 1, "a", False)
    assert h.sp.start_offset == 5
    h.check_dcc()


async def test_close_stops_timers_and_refuses_work():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.sp.close()
    assert h.t.pending() == [] and h.sp.status == FENCED
    h.t.advance(60_000)
    await h.sp.drain()
    assert h.p.writes == []
    assert await h.ack("a", 0, 9, ACC) == Errors.NOT_LEADER_OR_FOLLOWER
    assert h.fetch("b") == []
    with pytest.raises(ShareError):
        await h.sp.initialize()

# ---------------------------------------------------------------- KIP-1226 DeliveryCompleteCount

class CoordinatorModel:
    """What the share coordinator keeps of the writes: the last StartOffset and DeliveryCompleteCount,
    and the state of every offset at or after the StartOffset (later writes win)."""

    def __init__(self, persister):
        """Starts from the state the persister answered the partition's ReadShareGroupState with."""
        self.start, self.states, self.seen = persister.start_offset, {}, 0
        for first, last, state, count in persister.batches:
            for off in range(max(first, self.start), last + 1):
                self.states[off] = (state, count)
        self.dcc = sum(1 for st, _ in self.states.values() if st in (ACKNOWLEDGED, ARCHIVED))

    def take(self, persister, upto=None):
        """Apply the writes not taken yet (up to index `upto`: later ones were lost in a crash)."""
        upto = len(persister.writes) if upto is None else upto
        for req in persister.writes[self.seen:upto]:
            start, dcc, batches = payload(req)
            self.start, self.dcc = start, dcc
            for first, last, state, count in batches:
                for off in range(first, last + 1):
                    self.states[off] = (state, count)
            self.states = {o: v for o, v in self.states.items() if o >= start}
        self.seen = upto

    def lag(self, leo):
        return leo - self.start - self.dcc

    def batches(self):
        return [(o, o, st, dc) for o, (st, dc) in sorted(self.states.items())]


def brute_lag(sp, leo):
    """LEO - SPSO - (settled ACKNOWLEDGED/ARCHIVED offsets at or after the SPSO), counted offset by offset."""
    done = 0
    for off in range(sp.start_offset, sp.end_offset):
        st = sp.record_state(off)
        if st is not None and st[0] in (ACKNOWLEDGED, ARCHIVED) and not st[3]:
            done += 1
    return leo - sp.start_offset - done


async def settle(h, coord):
    """Let every write finish, feed them to the coordinator model and check what was sent."""
    await h.sp.drain()
    coord.take(h.p)
    h.check_dcc()
    leo = h.log.log_end_offset
    assert coord.lag(leo) == brute_lag(h.sp, leo), (coord.start, coord.dcc, h.sp)
    # the count agrees with the terminal states the coordinator was sent (what a restart loads)
    assert coord.dcc == sum(1 for st, _ in coord.states.values() if st in (ACKNOWLEDGED, ARCHIVED))


async def restarted(h, coord, log=None):
    """A new leader of the same partition, loaded from what the coordinator kept."""
    h2 = H(None, FakeTimers(), FakePersister(start_offset=coord.start, batches=coord.batches()), log or h.log)
    h2.sp = SharePartition(GROUP, TOPIC, 0, log=h2.log, persister=h2.p, config=h.sp.config, scheduler=h2.t,
                           now_ms=h2.t.now_ms, leader_epoch=7)
    await h2.sp.initialize()
    return h2


async def test_delivery_complete_count_sent_gives_the_exact_lag():
    h = await make(sizes=(10,) * 6, start=0, delivery_count_limit=3)
    coord = CoordinatorModel(h.p)
    await settle(h, coord)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    assert h.fetch("b", max_records=10) == [(10, 19, 1)]
    # acknowledgements of every type, partial: 0-2 ACCEPT, 3 REJECT, 4 GAP, 5-6 RELEASE, 7-9 held
    assert await h.ack("a", 0, 6, ACC, ACC, ACC, REJ, GAP, REL, REL) == 0
    await settle(h, coord)
    assert (coord.start, coord.dcc) == (0, 5) and h.sp.start_offset == 5
    assert await h.ack("b", 12, 13, ACC) == 0                    # terminal records past a hole
    await settle(h, coord)
    assert await h.sp.release_member("a") == 0                   # session closed: 7-9 released
    await settle(h, coord)
    h.t.advance(30_000)                                          # b's locks run out
    await settle(h, coord)
    # redeliveries up to the delivery count limit: RELEASE, then lock expiry, archive at the limit
    for attempt in (2, 3):
        got = h.fetch("c", max_records=50)
        assert got and {dc for _, _, dc in got} <= {attempt, attempt + 1, 1}
        if attempt == 2:
            assert await h.sp.acknowledge("c", [AckBatch(f, last, [REL]) for f, last, _ in got]) == 0
        else:
            h.t.advance(30_000)
        await settle(h, coord)
    # retention moves the log start into the in-flight records (acquired ones included)
    h.fetch("d", max_records=25)
    h.log.log_start_offset = 23
    h.sp.update_log_start_offset(23)
    await settle(h, coord)
    assert coord.start == h.sp.start_offset >= 23
    # a clean restart: the new leader's state gives the same lag as the coordinator's numbers
    assert await h.sp.acknowledge("d", [AckBatch(h.sp.start_offset, h.sp.start_offset, [ACC])]) in (0, Errors.INVALID_RECORD_STATE)
    await settle(h, coord)
    h2 = await restarted(h, coord)
    leo = h.log.log_end_offset
    assert brute_lag(h2.sp, leo) == coord.lag(leo)
    assert h2.sp.delivery_complete_count + h2.sp.start_offset == coord.dcc + coord.start
    # kill -9 with an acknowledgement in flight: the coordinator never got it, the restart agrees
    got = h2.fetch("e", max_records=5)
    h2.p.hold = True
    lost = asyncio.ensure_future(h2.sp.acknowledge("e", [AckBatch(got[0][0], got[0][0], [ACC])]))
    await h2.p.wait_held(1)
    coord2 = CoordinatorModel(h2.p)
    coord2.take(h2.p, upto=len(h2.p.writes) - 1)       # everything but the write still held
    assert payload(h2.p.writes[-1])[2] == [(got[0][0], got[0][0], ACKNOWLEDGED, got[0][2])]
    h3 = await restarted(h2, coord2)
    assert brute_lag(h3.sp, leo) == coord2.lag(leo)
    lost.cancel()
    # retention while no leader ran: the new leader persists the moved SPSO at once
    h.log.log_start_offset = 41
    h4 = await restarted(h3, coord2)
    coord2.seen = 0
    coord2.take(h4.p)
    assert coord2.start == 41 and coord2.lag(leo) == brute_lag(h4.sp, leo)
    for x in (h, h2, h3, h4):
        x.sp.close()


@pytest.mark.parametrize("seed", range(12))
async def test_delivery_complete_count_against_brute_force_counts(seed):
    """Random acquisitions, acknowledgements of every type, releases, lock expiries, delivery-limit
    archiving, log start moves, appends and restarts: after every step the last WriteShareGroupState
    gives LEO - StartOffset - DeliveryCompleteCount = the lag counted record by record."""
    import random
    rnd = random.Random(seed)
    h = await make(sizes=[rnd.randint(1, 8) for _ in range(12)], start=0, delivery_count_limit=rnd.choice((2, 3, 5)),
                   partition_max_record_locks=rnd.choice((10, 40, 2000)))
    coord = CoordinatorModel(h.p)
    await settle(h, coord)
    members = ["a", "b", "c"]
    for _ in range(60):
        op = rnd.random()
        sp = h.sp
        if op < 0.3:
            h.fetch(rnd.choice(members), max_records=rnd.randint(1, 12), mode=rnd.choice((0, RECORD_LIMIT)))
        elif op < 0.6:
            m = rnd.choice(members)
            held = [o for o in range(sp.start_offset, sp.end_offset)
                    if (st := sp.record_state(o)) and st[0] == ACQUIRED and st[2] == m and not st[3]]
            if held:
                i = rnd.randrange(len(held))
                j = i
                while j + 1 < len(held) and held[j + 1] == held[j] + 1 and rnd.random() < 0.8:
                    j += 1
                first, last = held[i], held[j]
                if rnd.random() < 0.5:
                    types = [rnd.choice((ACC, REL, REJ, GAP))]
                else:
                    types = [rnd.choice((ACC, REL, REJ, GAP)) for _ in range(last - first + 1)]
                assert await sp.acknowledge(m, [AckBatch(first, last, types)]) == 0
        elif op < 0.68:
            await sp.release_member(rnd.choice(members))
        elif op < 0.78:
            h.t.advance(rnd.choice((10_000, 30_000)))
        elif op < 0.86:
            h.log.append(rnd.randint(1, 6))
        elif op < 0.93:
            lso = min(h.log.log_end_offset, h.log.log_start_offset + rnd.randint(1, 6))
            h.log.log_start_offset = max(h.log.log_start_offset, lso)
            sp.update_log_start_offset(h.log.log_start_offset)
        else:
            await settle(h, coord)
            h.sp.close()
            h = await restarted(h, coord)
            coord.seen = 0
        await settle(h, coord)
    h.sp.close()
