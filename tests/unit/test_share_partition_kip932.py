"""The KIP-932 example table, acquisition through persisted share-group state, with Kafka's payloads."""
from __future__ import annotations

from broker.share.acks import ACK_ACCEPT as ACC, ACK_RELEASE as REL
from broker.share.config import ShareGroupConfig
from broker.share.partition import ACKNOWLEDGED, ACQUIRED, AVAILABLE, SharePartition
from tests.unit.share_partition_support import GROUP, TOPIC, AckBatch, FakeLog, FakePersister, FakeTimers, H, payload


# ---------------------------------------------------------------- KIP-932 example table

async def test_kip932_examples_with_share_group_state():
    """The KIP-932 "Examples with share-group state" sequence, with Kafka 4.4's payloads.

    Where the KIP text differs it is noted: Kafka sends the SPSO at the time of the
    write (never -1), and an acknowledgement that moves the SPSO is written with the
    acknowledged batches; the moved SPSO goes out with the next write.
    """
    # Starting state, latest offset 100 (KIP: StartOffset 100, no batches).
    timers, persister = FakeTimers(), FakePersister()
    log = FakeLog(start=100)
    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=persister, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms, leader_epoch=7)
    h = H(sp, timers, persister, log)
    await sp.initialize()
    assert [payload(w) for w in persister.writes] == [(100, 0, [])]

    # Fetch 100-109, acknowledge 100-109 (KIP: StartOffset 110, no batches).
    log.append(10)
    assert h.fetch("c1") == [(100, 109, 1)]
    assert await h.ack("c1", 100, 109, ACC) == 0
    assert h.last_write() == (100, 10, [(100, 109, ACKNOWLEDGED, 1)])
    assert sp.start_offset == 110

    # Fetch 110-119: consumer 1 gets 110-112, consumer 2 113-118, consumer 3 119.
    for n in (3, 6, 1):
        log.append(n)
    assert h.fetch("c1", max_records=3) == [(110, 112, 1)]
    timers.advance(1000)
    assert h.fetch("c2", max_records=6) == [(113, 118, 1)]
    assert h.fetch("c3", max_records=1) == [(119, 119, 1)]

    # Release 110 (consumer 1) (KIP: StartOffset -1).
    assert await h.ack("c1", 110, 110, REL) == 0
    assert h.last_write() == (110, 0, [(110, 110, AVAILABLE, 1)])

    # Acknowledge 119 (consumer 3).
    assert await h.ack("c3", 119, 119, ACC) == 0
    assert h.last_write() == (110, 1, [(119, 119, ACKNOWLEDGED, 1)])

    # Fetch records 110, 120 (consumer 1).
    log.append(1)
    timers.advance(9000)
    assert h.fetch("c1", max_records=2) == [(110, 110, 2), (120, 120, 1)]

    # Lock timeout elapsed 111, 112 (consumer 1's records): one write.
    writes = len(persister.writes)
    timers.advance(20_000)
    await sp.drain()
    assert len(persister.writes) == writes + 1
    assert h.last_write() == (110, 1, [(111, 112, AVAILABLE, 1)])

    # Acknowledge 113-118 (consumer 2).
    assert await h.ack("c2", 113, 118, ACC) == 0
    assert h.last_write() == (110, 7, [(113, 118, ACKNOWLEDGED, 1)])

    # Fetch records 111, 112 (consumer 3).
    assert h.fetch("c3", max_records=2) == [(111, 112, 2)]

    # Acknowledge 110 (consumer 1): SPSO 111.
    assert await h.ack("c1", 110, 110, ACC) == 0
    assert h.last_write() == (110, 8, [(110, 110, ACKNOWLEDGED, 2)])
    assert sp.start_offset == 111

    # Acknowledge 111, 112 (consumer 3): SPSO 120 (KIP: StartOffset 120, no batches).
    assert await h.sp.acknowledge("c3", [AckBatch(111, 112, [ACC, ACC])]) == 0
    assert h.last_write() == (111, 9, [(111, 112, ACKNOWLEDGED, 2)])
    assert sp.start_offset == 120 and sp.delivery_complete_count == 0
    assert h.state(120) == (ACQUIRED, 1, "c1", False)
    h.check_dcc()
