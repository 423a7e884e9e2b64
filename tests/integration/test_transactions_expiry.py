"""transactional.id.expiration.ms with confluent-kafka's transactional producer: an idle transactional id
disappears from DescribeTransactions / ListTransactions, an id with an open transaction never expires, a
restart replays the tombstone (the id stays gone), and the id used again starts afresh."""
from __future__ import annotations

from protocol.errors import Errors
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from tests.integration.test_transactions import consume_all, txn_producer
from tests.support import create_topic, unique, until
from tests.wire import WireClient

EXPIRING = {"transactional.id.expiration.ms": 2000, "transaction.remove.expired.transaction.cleanup.interval.ms": 200}


def describe(bs: str, tid: str):
    with WireClient(bs) as w:
        return w.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]


def listed(bs: str) -> set[str]:
    with WireClient(bs) as w:
        r = w.request(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
    assert r.error_code == Errors.NONE
    return {s.transactional_id for s in r.transaction_states}


def gone(bs: str, tid: str) -> bool:
    return describe(bs, tid).error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND and tid not in listed(bs)


def test_idle_ids_expire_open_ones_never_and_a_restart_keeps_them_gone(sharebroker_factory):
    broker = sharebroker_factory(EXPIRING)
    bs = broker.bootstrap
    topic = create_topic(bs)
    done, open_, witness = unique("tx-done"), unique("tx-open"), unique("tx-witness")

    p = txn_producer(bs, done)
    p.begin_transaction()
    p.produce(topic, b"before", partition=0)
    p.commit_transaction(15)
    old = describe(bs, done)
    assert (old.error_code, old.transaction_state) == (Errors.NONE, "CompleteCommit")

    o = txn_producer(bs, open_, **{"transaction.timeout.ms": 60000})
    o.begin_transaction()
    o.produce(topic, b"open", partition=0)
    o.flush(10)
    assert describe(bs, open_).transaction_state == "Ongoing"
    txn_producer(bs, witness)  # Empty, last updated after the open transaction's last update

    until(lambda: gone(bs, done), 20, "the committed transactional id to expire")
    # the witness expiring proves a cleanup ran after the open transaction's expiration time too
    until(lambda: gone(bs, witness), 20, "the idle witness id to expire")
    assert describe(bs, open_).transaction_state == "Ongoing"
    assert open_ in listed(bs)
    o.commit_transaction(15)  # never fenced: its id was kept

    # a restart (kill -9) with expiration off in practice: a replayed-back id would stay
    broker.kill9()
    broker.config["transactional.id.expiration.ms"] = "604800000"
    broker.start()
    until(lambda: describe(bs, done).error_code != Errors.COORDINATOR_LOAD_IN_PROGRESS, 20, "the coordinator to load")
    assert gone(bs, done) and gone(bs, witness)
    assert describe(bs, open_).transaction_state == "CompleteCommit"

    again = txn_producer(bs, done)  # starts afresh, as a new id
    again.begin_transaction()
    again.produce(topic, b"after", partition=0)
    again.commit_transaction(15)
    now = describe(bs, done)
    assert (now.error_code, now.transaction_state) == (Errors.NONE, "CompleteCommit")
    # a fresh id: a new producer id, at the epoch a first use has (not the old producer id's epoch + 1)
    assert now.producer_id != old.producer_id and now.producer_epoch == old.producer_epoch
    assert sorted(consume_all(bs, topic, "read_committed", 3)) == [b"after", b"before", b"open"]
