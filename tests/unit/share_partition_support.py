"""Fakes for the SharePartition unit tests (no tests here): a fake clock and timer scheduler, a
fake persister whose writes can be held and failed, a fake log of batch refs, and ``H``, one
initialized share partition with its fakes (``make``). Deterministic, no sleeps."""
from __future__ import annotations

import asyncio
import heapq
from typing import NamedTuple

from protocol.messages.read_share_group_state import ReadShareGroupStateResponse
from protocol.messages.write_share_group_state import WriteShareGroupStateRequest, WriteShareGroupStateResponse

from broker.share.config import ShareGroupConfig
from broker.share.partition import ACKNOWLEDGED, ARCHIVED, SharePartition

TOPIC = bytes(range(16))
GROUP = "g1"


# ---------------------------------------------------------------- fakes

class Handle:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when, callback):
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self):
        self.cancelled = True


class FakeTimers:
    """Clock in ms plus a call_later(delay_s, cb) scheduler driven by advance()."""

    def __init__(self):
        self.now = 0
        self._heap = []
        self._seq = 0

    def now_ms(self):
        return self.now

    def call_later(self, delay_s, callback):
        h = Handle(self.now + round(delay_s * 1000), callback)
        self._seq += 1
        heapq.heappush(self._heap, (h.when, self._seq, h))
        return h

    def advance(self, ms):
        target = self.now + ms
        while self._heap and self._heap[0][0] <= target:
            when, _, h = heapq.heappop(self._heap)
            self.now = when
            if not h.cancelled:
                h.callback()
        self.now = target

    def pending(self):
        return sorted(h.when for _, _, h in self._heap if not h.cancelled)


class Ref(NamedTuple):
    base_offset: int
    last_offset: int
    data: bytes = b""


class FakeLog:
    def __init__(self, sizes=(), start=0):
        self.batches = []
        self.log_start_offset = start
        self.log_end_offset = start
        self.by_timestamp = None
        for n in sizes:
            self.append(n)

    @property
    def last_stable_offset(self):
        return self.log_end_offset

    def append(self, n):
        self.batches.append(Ref(self.log_end_offset, self.log_end_offset + n - 1))
        self.log_end_offset += n

    def read(self, offset, max_bytes=1 << 30, max_offset=None, min_one=True):
        return [b for b in self.batches if b.last_offset >= offset and b.last_offset >= self.log_start_offset
                and (max_offset is None or b.base_offset < max_offset)]

    def offset_for_timestamp(self, ts):
        self.asked_timestamp = ts
        return self.by_timestamp


class AckBatch(NamedTuple):
    first_offset: int
    last_offset: int
    acknowledge_types: list


class FakePersister:
    """Records WriteShareGroupState requests; can hold them or answer with an error."""

    def __init__(self, start_offset=-1, batches=(), state_epoch=3, read_error=0):
        self.start_offset, self.batches, self.state_epoch = start_offset, list(batches), state_epoch
        self.read_error = read_error
        self.writes = []
        self.errors = []          # error codes for the next writes
        self.hold = False
        self.held = []            # futures of held writes
        self._arrived = asyncio.Event()

    async def read_state(self, req):
        R = ReadShareGroupStateResponse
        t = req.topics[0]
        p = t.partitions[0]
        return R(results=[R.ReadStateResult(topic_id=t.topic_id, partitions=[R.PartitionResult(
            partition=p.partition, error_code=self.read_error, state_epoch=self.state_epoch,
            start_offset=self.start_offset,
            state_batches=[R.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=d)
                           for f, l, s, d in self.batches])])])

    async def write_state(self, req):
        self.writes.append(req)
        code = self.errors.pop(0) if self.errors else 0
        if self.hold:
            fut = asyncio.get_running_loop().create_future()
            self.held.append(fut)
            self._arrived.set()
            code = await fut
        R = WriteShareGroupStateResponse
        t = req.topics[0]
        return R(results=[R.WriteStateResult(topic_id=t.topic_id, partitions=[R.PartitionResult(
            partition=t.partitions[0].partition, error_code=code)])])

    async def wait_held(self, n):
        while len(self.held) < n:
            self._arrived.clear()
            await self._arrived.wait()

    def complete(self, index=0, code=0):
        self.held.pop(index).set_result(code)


def payload(req):
    """(start_offset, delivery_complete_count, [(first, last, state, count)]) of a write."""
    assert isinstance(req, WriteShareGroupStateRequest)
    assert req.group_id == GROUP and len(req.topics) == 1 and req.topics[0].topic_id == TOPIC
    p, = req.topics[0].partitions
    assert p.partition == 0 and p.state_epoch == 3 and p.leader_epoch == 7
    return (p.start_offset, p.delivery_complete_count,
            [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches])


class H:
    """One initialized share partition with its fakes."""

    def __init__(self, sp, timers, persister, log):
        self.sp, self.t, self.p, self.log = sp, timers, persister, log
        self.wakeups = 0

    def fetch(self, member, max_records=500, batch_size=500, mode=0, **kw):
        """What the manager does for one partition of a ShareFetch: follow the log start, read, acquire."""
        self.sp.update_log_start_offset(self.log.log_start_offset)
        offset = self.sp.next_fetch_offset()
        res = self.sp.acquire(member, self.log.read(offset), max_records=max_records,
                              batch_size=batch_size, acquire_mode=mode, fetch_offset=offset, **kw)
        return res.acquired

    async def ack(self, member, first, last, *types):
        return await self.sp.acknowledge(member, [AckBatch(first, last, list(types))])

    def state(self, offset):
        return self.sp.record_state(offset)

    def last_write(self):
        return payload(self.p.writes[-1])

    def check_dcc(self):
        """The maintained DeliveryCompleteCount equals a recount of settled terminal records."""
        sp = self.sp
        n = 0
        for off in range(sp.start_offset, sp.end_offset):
            st = sp.record_state(off)
            if st and st[0] in (ACKNOWLEDGED, ARCHIVED) and not st[3]:
                n += 1
        assert sp.delivery_complete_count == n


async def make(sizes=(10,) * 10, *, start=-1, batches=(), log_start=0, config=None, **cfg):
    timers = FakeTimers()
    log = FakeLog(sizes, start=log_start)
    persister = FakePersister(start_offset=start, batches=batches)
    config = config or ShareGroupConfig(**cfg)
    h = None

    def wake():
        h.wakeups += 1

    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=persister, config=config,
                        scheduler=timers, now_ms=timers.now_ms, leader_epoch=7, on_state_change=wake)
    h = H(sp, timers, persister, log)
    await sp.initialize()
    return h
