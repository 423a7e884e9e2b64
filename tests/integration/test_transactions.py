"""Transactions (issue 11): confluent-kafka's transactional producer against the real broker.

Committed transactions are visible to read_committed consumers, aborted ones never;
read_uncommitted consumers see both; the last stable offset stalls behind an open
transaction and moves when it ends; two-phase commit survives kill -9; zombies are
fenced; abandoned transactions time out; misuse gets Kafka's error codes.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from protocol.messages.describe_producers import DescribeProducersRequest
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.end_txn import EndTxnRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from tests.support import create_topic, unique, until
from tests.wire import WireClient


def txn_producer(bootstrap: str, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                  "retry.backoff.ms": 20, "retry.backoff.max.ms": 100, **extra})
    p.init_transactions(15)
    return p


def consume_all(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int = 1,
                timeout: float = 15.0) -> list[bytes]:
    """Values of ``topic`` read from the start with ``isolation``, waiting for ``expect`` of them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "isolation.level": isolation,
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    try:
        def enough():
            for m in c.consume(1000, 0.1):
                if m.error() is None:
                    out.append(m.value())
            return len(out) >= expect
        until(enough, timeout, f"{expect} {isolation} records of {topic}")
        for m in c.consume(1000, 0.3):  # nothing more is there
            if m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


def list_offset(bootstrap: str, topic: str, isolation: int) -> int:
    T, P = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition
    with WireClient(bootstrap) as w:
        r = w.request(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
            T(name=topic, partitions=[P(partition_index=0, timestamp=-1)])]), 7)
    return r.topics[0].partitions[0].offset


def test_commit_visible_abort_never(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs, partitions=2)
    p = txn_producer(bs, unique("tx"))
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"c1-%d" % i, partition=i % 2)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(7):
        p.produce(topic, b"a-%d" % i, partition=i % 2)
    p.flush(10)  # librdkafka drops what it has not sent yet when aborting
    p.abort_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"c2-%d" % i, partition=i % 2)
    p.commit_transaction(15)
    committed = consume_all(bs, topic, "read_committed", 15, partitions=2)
    assert sorted(committed) == sorted([b"c1-%d" % i for i in range(10)] + [b"c2-%d" % i for i in range(5)])
    everything = consume_all(bs, topic, "read_uncommitted", 22, partitions=2)
    assert len(everything) == 22 and {b"a-%d" % i for i in range(7)} <= set(everything)


def test_lso_stalls_behind_open_transaction(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    plain = Producer({"bootstrap.servers": bs})
    for i in range(3):
        plain.produce(topic, b"plain-%d" % i, partition=0)
    plain.flush(10)
    p = txn_producer(bs, unique("tx"))
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, b"open-%d" % i, partition=0)
    p.flush(10)
    assert list_offset(bs, topic, 0) == 7  # high watermark
    assert list_offset(bs, topic, 1) == 3  # LSO: first offset of the open transaction
    assert sorted(consume_all(bs, topic, "read_committed", 3)) == [b"plain-0", b"plain-1", b"plain-2"]
    p.commit_transaction(15)
    assert list_offset(bs, topic, 1) == 8  # 7 records + the COMMIT marker
    assert len(consume_all(bs, topic, "read_committed", 7)) == 7


def test_prepared_commit_is_completed_after_kill9(sharebroker_factory):
    broker = sharebroker_factory()
    bs = broker.bootstrap
    topic = create_topic(bs)
    tid = unique("tx")
    p = txn_producer(bs, tid)
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, b"k-%d" % i, partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"open-%d" % i, partition=0)
    p.flush(10)
    broker.kill9()
    broker.start()
    # the committed transaction is still committed; the open one is still open (LSO stays before it)
    assert list_offset(bs, topic, 1) == 21
    assert len(consume_all(bs, topic, "read_committed", 20)) == 20
    # a new instance with the same id aborts the open transaction, fencing the old one
    p2 = txn_producer(bs, tid)
    assert list_offset(bs, topic, 1) == list_offset(bs, topic, 0)
    p2.begin_transaction()
    p2.produce(topic, b"after", partition=0)
    p2.commit_transaction(15)
    values = consume_all(bs, topic, "read_committed", 21)
    assert b"after" in values and not any(v.startswith(b"open-") for v in values)


def _wire_init(w: WireClient, tid: str, timeout_ms: int = 60000, version: int = 4, pid: int = -1,
               epoch: int = -1):
    return w.request(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                           producer_id=pid, producer_epoch=epoch), version)


def _add(w: WireClient, tid: str, pid: int, epoch: int, topic: str, version: int = 3):
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    r = w.request(AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                            v3_and_below_producer_epoch=epoch,
                                            v3_and_below_topics=[T(name=topic, partitions=[0])]), version)
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _end(w: WireClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3):
    return w.request(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                   committed=commit), version)


@pytest.mark.sharebroker({"transaction.max.timeout.ms": 60000})
def test_error_codes_of_misuse(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    tid = unique("tx")
    with WireClient(bs) as w:
        assert _wire_init(w, tid, timeout_ms=60001).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
        assert _wire_init(w, tid, timeout_ms=0).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
        assert _wire_init(w, "").error_code == Errors.INVALID_REQUEST
        # unknown transactional id
        assert _add(w, unique("nope"), 1, 0, topic) == Errors.INVALID_PRODUCER_ID_MAPPING
        assert _end(w, unique("nope"), 1, 0, True).error_code == Errors.INVALID_PRODUCER_ID_MAPPING
        r = _wire_init(w, tid)
        assert r.error_code == 0 and r.producer_epoch == 0
        pid = r.producer_id
        # EndTxn with no transaction (v0-4): INVALID_TXN_STATE
        assert _end(w, tid, pid, 0, True).error_code == Errors.INVALID_TXN_STATE
        assert _add(w, tid, pid + 1, 0, topic) == Errors.INVALID_PRODUCER_ID_MAPPING
        assert _add(w, tid, pid, 1, topic) == Errors.PRODUCER_FENCED
        assert _add(w, tid, pid, 0, unique("missing")) == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert _add(w, tid, pid, 0, topic) == Errors.NONE
        assert _end(w, tid, pid, 0, True).error_code == Errors.NONE
        assert _end(w, tid, pid, 0, True).error_code == Errors.NONE  # a retry of the completed commit
        assert _end(w, tid, pid, 0, False).error_code == Errors.INVALID_TXN_STATE  # commit done: not abort
        # a second InitProducerId bumps the epoch: the old epoch is fenced
        r2 = _wire_init(w, tid)
        assert (r2.producer_id, r2.producer_epoch) == (pid, 1)
        assert _add(w, tid, pid, 0, topic) == Errors.PRODUCER_FENCED
        assert _end(w, tid, pid, 0, False).error_code == Errors.PRODUCER_FENCED
        # KIP-360: an InitProducerId naming a producer id/epoch that is not current is fenced
        assert _wire_init(w, tid, pid=pid + 7, epoch=0).error_code == Errors.PRODUCER_FENCED
        # an ongoing transaction is aborted by a new InitProducerId: CONCURRENT_TRANSACTIONS, then the bump
        assert _add(w, tid, pid, 1, topic) == Errors.NONE
        assert _wire_init(w, tid).error_code == Errors.CONCURRENT_TRANSACTIONS
        r3 = until(lambda: (lambda r: r if r.error_code == 0 else None)(_wire_init(w, tid)), 10, "re-init")
        assert r3.producer_epoch >= 3
        d = w.request(DescribeTransactionsRequest(transactional_ids=[tid, unique("nope")]), 0)
        assert d.transaction_states[0].transaction_state == "Empty"
        assert d.transaction_states[0].producer_epoch == r3.producer_epoch
        assert d.transaction_states[1].error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND


def test_fenced_code_old_versions_understand(sharebroker):
    """PRODUCER_FENCED (90) came with InitProducerId v4 and EndTxn / AddPartitionsToTxn / AddOffsetsToTxn
    v2: older versions get INVALID_PRODUCER_EPOCH in its place (KafkaApis), as aiokafka (v0) needs."""
    from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest

    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    tid = unique("tx")
    fenced, old_code = Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH
    with WireClient(bs) as w:
        pid = _wire_init(w, tid).producer_id
        assert _wire_init(w, tid).producer_epoch == 1  # epoch 0 is now fenced
        for version, code in ((0, old_code), (1, old_code), (2, fenced), (3, fenced)):
            assert _add(w, tid, pid, 0, topic, version=version) == code, version
            assert _end(w, tid, pid, 0, False, version=version).error_code == code, version
            r = w.request(AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=0,
                                                 group_id=unique("g")), version)
            assert r.error_code == code, version
        # KIP-360 InitProducerId naming a stale epoch (v3+)
        for version, code in ((3, old_code), (4, fenced), (5, fenced)):
            assert _wire_init(w, tid, version=version, pid=pid, epoch=0).error_code == code, version


def test_zombie_is_fenced(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    tid = unique("tx")
    old = txn_producer(bs, tid)
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    old.flush(10)
    new = txn_producer(bs, tid)  # aborts the zombie's transaction and bumps the epoch
    new.begin_transaction()
    new.produce(topic, b"fresh", partition=0)
    new.commit_transaction(15)
    with pytest.raises(KafkaException) as info:
        old.produce(topic, b"zombie-2", partition=0)
        old.commit_transaction(10)
    assert info.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)
    assert consume_all(bs, topic, "read_committed", 1) == [b"fresh"]


def abandoned_transaction(bs: str, timeout_ms: int) -> tuple[str, str, Producer]:
    """A topic, a transactional id whose open transaction holds one record, and its producer, which the
    test keeps (alive, never ending the transaction)."""
    topic = create_topic(bs)
    tid = unique("tx")
    p = txn_producer(bs, tid, **{"transaction.timeout.ms": timeout_ms})
    p.begin_transaction()
    p.produce(topic, b"abandoned", partition=0)
    p.flush(10)
    return topic, tid, p


@pytest.mark.sharebroker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
def test_abandoned_transaction_times_out(sharebroker):
    bs = sharebroker.bootstrap
    topic, tid, _producer = abandoned_transaction(bs, 1000)
    assert list_offset(bs, topic, 1) == 0
    until(lambda: list_offset(bs, topic, 1) == 2, 10, "the coordinator to abort the transaction")
    with WireClient(bs) as w:
        d = w.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0)
        assert d.transaction_states[0].transaction_state == "CompleteAbort"
        lt = w.request(ListTransactionsRequest(state_filters=["CompleteAbort", "Bogus"], producer_id_filters=[]), 1)
        assert tid in [s.transactional_id for s in lt.transaction_states]
        assert lt.unknown_state_filters == ["Bogus"]
    assert consume_all(bs, topic, "read_uncommitted", 1) == [b"abandoned"]
    assert consume_all(bs, topic, "read_committed", 0) == []


@pytest.mark.sharebroker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000})
def test_timed_out_transaction_is_aborted_by_kafkas_rule(sharebroker):
    """Issue 35 item 6: Kafka's TransactionCoordinator.abortTimedOutTransactions runs every
    transaction.abort.timed.out.transaction.cleanup.interval.ms and aborts a transaction once its start
    (the first partition added) plus transaction.timeout.ms is past: never before the timeout, and at the
    latest one interval after it (here 2 s and 1 s; plus a loaded machine's slack)."""
    bs = sharebroker.bootstrap
    topic, tid, _producer = abandoned_transaction(bs, 2000)
    with WireClient(bs) as w:
        state = w.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]
    started_s = state.transaction_start_time_ms / 1000
    assert state.transaction_state == "Ongoing" and state.transaction_timeout_ms == 2000
    until(lambda: list_offset(bs, topic, 1) == 2, 10, "the coordinator to abort the transaction", 0.02)
    aborted_after = time.time() - started_s
    assert 2.0 <= aborted_after <= 2.0 + 1.0 + 1.0, f"aborted {aborted_after:.2f} s after the transaction started"


def test_describe_producers_shows_open_transaction(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    p = txn_producer(bs, unique("tx"))
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"v%d" % i, partition=0)
    p.flush(10)
    with WireClient(bs) as w:
        T = DescribeProducersRequest.TopicRequest
        r = w.request(DescribeProducersRequest(topics=[T(name=topic, partition_indexes=[0])]), 0)
        active = r.topics[0].partitions[0].active_producers
        assert len(active) == 1 and active[0].current_txn_start_offset == 0 and active[0].last_sequence == 2
        lt = w.request(ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[active[0].producer_id]),
                       0)
        assert [s.transaction_state for s in lt.transaction_states] == ["Ongoing"]
    p.commit_transaction(15)
    with WireClient(bs) as w:
        r = w.request(DescribeProducersRequest(topics=[T(name=topic, partition_indexes=[0])]), 0)
        assert r.topics[0].partitions[0].active_producers[0].current_txn_start_offset == -1


def test_restart_keeps_transactional_ids(tmp_path):
    broker = BrokerProcess(tmp_path).start()
    try:
        tid = unique("tx")
        with WireClient(broker.bootstrap) as w:
            first = _wire_init(w, tid)
        broker.stop()
        broker.start()
        with WireClient(broker.bootstrap) as w:
            second = _wire_init(w, tid)
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    finally:
        broker.stop()


def _produce_txn(w: WireClient, tid: str, topic: str, pid: int, epoch: int, seq: int, value: bytes, version: int):
    from protocol.messages.produce import ProduceRequest
    from protocol.records import build_batch

    batch = build_batch([(None, value, [])], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=True)
    T, P = ProduceRequest.TopicProduceData, ProduceRequest.PartitionProduceData
    r = w.request(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[P(index=0, records=batch)])]), version)
    return r.responses[0].partition_responses[0].error_code


def test_transaction_version_2_flow(sharebroker):
    """KIP-890 (transaction.version 2): Produce v12 adds the partition, EndTxn v5 bumps the epoch;
    before v12 a partition not added to the transaction is refused: TRANSACTION_ABORTABLE at v11 (the first
    version whose clients know it), INVALID_TXN_STATE below (AddPartitionsToTxnManager)."""
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    tid = unique("tv2")
    with WireClient(bs) as w:
        r = _wire_init(w, tid, version=5)
        pid, epoch = r.producer_id, r.producer_epoch
        assert _produce_txn(w, tid, topic, pid, epoch, 0, b"v10", 10) == Errors.INVALID_TXN_STATE
        assert _produce_txn(w, tid, topic, pid, epoch, 0, b"v11", 11) == Errors.TRANSACTION_ABORTABLE
        assert _produce_txn(w, tid, topic, pid, epoch, 0, b"tv2-a", 12) == Errors.NONE
        assert list_offset(bs, topic, 1) == 0
        end = _end(w, tid, pid, epoch, True, version=5)
        assert (end.error_code, end.producer_id, end.producer_epoch) == (0, pid, epoch + 1)
        retry = _end(w, tid, pid, epoch, True, version=5)  # a retry with the old epoch: the same answer
        assert (retry.error_code, retry.producer_epoch) == (0, epoch + 1)
        # a retry's epoch asking for the other outcome: INVALID_TXN_STATE (endTransaction's TV2 table)
        assert _end(w, tid, pid, epoch, False, version=5).error_code == Errors.INVALID_TXN_STATE
        assert _end(w, tid, pid, epoch - 1, True, version=5).error_code == Errors.PRODUCER_FENCED
        # the next transaction runs at the bumped epoch, sequence 0; the old epoch is fenced
        assert _produce_txn(w, tid, topic, pid, epoch, 1, b"zombie", 12) == Errors.INVALID_PRODUCER_EPOCH
        assert _produce_txn(w, tid, topic, pid, epoch + 1, 0, b"tv2-b", 12) == Errors.NONE
        abort = _end(w, tid, pid, epoch + 1, False, version=5)
        assert (abort.error_code, abort.producer_epoch) == (0, epoch + 2)
    assert consume_all(bs, topic, "read_committed", 1) == [b"tv2-a"]
    assert sorted(consume_all(bs, topic, "read_uncommitted", 2)) == [b"tv2-a", b"tv2-b"]


def test_delete_records_inside_an_open_transaction(sharebroker):
    """DeleteRecords may move the log start into an open transaction (up to the high watermark, as Kafka);
    the LSO never falls below the log start, and the transaction still ends normally."""
    from confluent_kafka.admin import AdminClient

    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    p = txn_producer(bs, unique("tx"))
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, b"x%d" % i, partition=0)
    p.flush(10)
    assert list_offset(bs, topic, 1) == 0
    tp = TopicPartition(topic, 0, 4)
    admin = AdminClient({"bootstrap.servers": bs})  # referenced until the result is in
    assert admin.delete_records([tp])[tp].result(10).low_watermark == 4
    assert list_offset(bs, topic, 1) == 4  # the open transaction now starts at the log start
    p.commit_transaction(15)
    assert list_offset(bs, topic, 1) == 7
    assert sorted(consume_all(bs, topic, "read_committed", 2)) == [b"x4", b"x5"]


def _fetch_offset(w: WireClient, group: str, topic: str, stable: bool) -> tuple[int, int]:
    from protocol.messages.offset_fetch import OffsetFetchRequest

    r = w.request(OffsetFetchRequest(group_id=group, require_stable=stable, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 7)
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def _txn_commit_offset(w: WireClient, tid: str, pid: int, epoch: int, group: str, topic: str, offset: int) -> int:
    from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
    from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest as Req

    assert w.request(AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                            group_id=group), 3).error_code == 0
    r = w.request(Req(transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, topics=[
        Req.TxnOffsetCommitRequestTopic(name=topic, partitions=[
            Req.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]), 3)
    return r.topics[0].partitions[0].error_code


def test_txn_offsets_are_visible_only_on_commit_and_survive_restart(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    group, tid = unique("g"), unique("tx")
    with WireClient(bs) as w:
        r = _wire_init(w, tid)
        pid = r.producer_id
        assert _txn_commit_offset(w, tid, pid, 0, group, topic, 42) == 0
        assert _fetch_offset(w, group, topic, False) == (0, -1)  # pending: not the group's offset yet
        assert _fetch_offset(w, group, topic, True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        assert _end(w, tid, pid, 0, False).error_code == 0  # aborted: dropped
        assert _fetch_offset(w, group, topic, True) == (0, -1)
        assert _txn_commit_offset(w, tid, pid, 0, group, topic, 7) == 0
    sharebroker.kill9()  # the transaction is open: its offsets are pending again after the restart
    sharebroker.start()
    with WireClient(bs) as w:
        assert _fetch_offset(w, group, topic, True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        assert _end(w, tid, pid, 0, True).error_code == 0
        assert _fetch_offset(w, group, topic, True) == (0, 7)
    sharebroker.stop()
    sharebroker.start()
    with WireClient(bs) as w:
        assert _fetch_offset(w, group, topic, True) == (0, 7)
        # a zombie's TxnOffsetCommit after a new InitProducerId is refused
        assert _wire_init(w, tid).producer_epoch == 1
        from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest as Req
        r = w.request(Req(transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=0, topics=[
            Req.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                Req.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=99)])]), 3)
        assert r.topics[0].partitions[0].error_code == Errors.INVALID_PRODUCER_EPOCH
