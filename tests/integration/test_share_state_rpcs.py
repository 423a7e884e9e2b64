"""The five share-state RPCs over a socket (KIP-932's persister API, served by the share coordinator):
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86), ReadShareGroupStateSummary (87), with the project's codec.

Expected values follow Kafka's ``ShareCoordinatorShard`` (share-coordinator module) and
``ShareGroupOffset`` / ``PartitionFactory``:
- initialize writes a fresh snapshot: the request's state epoch and start offset, leader epoch 0,
  no batches, DeliveryCompleteCount -1 if the start offset is -1 else 0; refused with
  FENCED_STATE_EPOCH when the stored state epoch is higher (request -1 skips the check);
- read and write of a share-partition that was never initialized (or was deleted): INVALID_REQUEST;
  write: FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH when the stored epoch is higher (-1 skips);
  a write keeps the stored leader epoch, a read with a new leader epoch records it; a read with a
  lower leader epoch than the stored one: FENCED_LEADER_EPOCH;
- summary of an uninitialized share-partition: start offset -1, DeliveryCompleteCount -1,
  leader and state epoch 0; delete of one: no error;
- a topic id or partition the metadata does not hold: UNKNOWN_TOPIC_OR_PARTITION (initialize,
  summary, delete; read and write check "uninitialized" first); a negative partition: INVALID_REQUEST.
"""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import Errors
from protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as Del
from protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as Init
from protocol.messages.metadata import MetadataRequest
from protocol.messages.read_share_group_state import ReadShareGroupStateRequest as Read
from protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as Summary
from protocol.messages.write_share_group_state import WriteShareGroupStateRequest as Write
from tests.support import unique
from tests.wire import WireClient

AVAILABLE, ACKNOWLEDGED = 0, 2  # Kafka's RecordState ids as stored in state batches
PARTITIONS = 2


def make_topic(bootstrap: str) -> bytes:
    name = unique("sst")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(15)
    with WireClient(bootstrap) as w:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=False), 12)
    return md.topics[0].topic_id


class State:
    """The five RPCs for one share group, each returning its single partition result."""

    def __init__(self, w: WireClient, group: str):
        self.w, self.group = w, group

    @staticmethod
    def _one(resp, tid: bytes, partition: int):
        assert len(resp.results) == 1 and resp.results[0].topic_id == tid, resp
        parts = resp.results[0].partitions
        assert len(parts) == 1 and parts[0].partition == partition, resp
        return parts[0]

    def init(self, tid, p, state_epoch, start_offset):
        r = self.w.request(Init(group_id=self.group, topics=[Init.InitializeStateData(topic_id=tid, partitions=[
            Init.PartitionData(partition=p, state_epoch=state_epoch, start_offset=start_offset)])]), 0)
        return self._one(r, tid, p)

    def write(self, tid, p, state_epoch, leader_epoch, start_offset, batches=(), delivery_complete_count=-1):
        r = self.w.request(Write(group_id=self.group, topics=[Write.WriteStateData(topic_id=tid, partitions=[
            Write.PartitionData(partition=p, state_epoch=state_epoch, leader_epoch=leader_epoch,
                                start_offset=start_offset, delivery_complete_count=delivery_complete_count,
                                state_batches=[Write.StateBatch(first_offset=f, last_offset=last, delivery_state=s,
                                                                delivery_count=c) for f, last, s, c in batches])])]),
                           1)
        return self._one(r, tid, p)

    def read(self, tid, p, leader_epoch):
        r = self.w.request(Read(group_id=self.group, topics=[Read.ReadStateData(topic_id=tid, partitions=[
            Read.PartitionData(partition=p, leader_epoch=leader_epoch)])]), 0)
        return self._one(r, tid, p)

    def summary(self, tid, p):
        r = self.w.request(Summary(group_id=self.group, topics=[Summary.ReadStateSummaryData(topic_id=tid, partitions=[
            Summary.PartitionData(partition=p, leader_epoch=0)])]), 1)
        return self._one(r, tid, p)

    def delete(self, tid, p):
        r = self.w.request(Del(group_id=self.group, topics=[Del.DeleteStateData(topic_id=tid, partitions=[
            Del.PartitionData(partition=p)])]), 0)
        return self._one(r, tid, p)


def batches(read_result) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in read_result.state_batches]


def summary_of(s) -> tuple:
    """(error, start offset, DeliveryCompleteCount, leader epoch, state epoch)."""
    return s.error_code, s.start_offset, s.delivery_complete_count, s.leader_epoch, s.state_epoch


UNINITIALIZED = (0, -1, -1, 0, 0)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from broker.testing import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("share-state")) as b:
        yield b


@pytest.fixture
def state(broker):
    with WireClient(broker.bootstrap) as w:
        yield State(w, unique("g")), make_topic(broker.bootstrap)


def test_round_trip_initialize_write_read_summary_delete(state):
    st, tid = state
    assert summary_of(st.summary(tid, 0)) == UNINITIALIZED
    assert st.read(tid, 0, 0).error_code == Errors.INVALID_REQUEST, "read before initialize"
    assert st.write(tid, 0, 0, 0, 0).error_code == Errors.INVALID_REQUEST, "write before initialize"

    assert st.init(tid, 0, state_epoch=1, start_offset=5).error_code == 0
    assert st.init(tid, 1, state_epoch=1, start_offset=-1).error_code == 0
    assert summary_of(st.summary(tid, 0)) == (0, 5, 0, 0, 1)
    assert summary_of(st.summary(tid, 1)) == (0, -1, -1, 0, 1), "SPSO -1: DeliveryCompleteCount unknown"

    r = st.read(tid, 0, leader_epoch=1)  # a new share-partition leader
    assert (r.error_code, r.state_epoch, r.start_offset, batches(r)) == (0, 1, 5, [])
    assert st.summary(tid, 0).leader_epoch == 1, "the read recorded the new leader epoch"

    w = st.write(tid, 0, state_epoch=1, leader_epoch=1, start_offset=5, delivery_complete_count=3,
                 batches=[(5, 7, ACKNOWLEDGED, 1), (8, 9, AVAILABLE, 1)])
    assert w.error_code == 0
    r = st.read(tid, 0, leader_epoch=1)
    assert (r.error_code, r.state_epoch, r.start_offset) == (0, 1, 5)
    assert batches(r) == [(5, 7, ACKNOWLEDGED, 1), (8, 9, AVAILABLE, 1)]
    assert summary_of(st.summary(tid, 0)) == (0, 5, 3, 1, 1)

    # the start offset moves to 8: batches below it go, a higher delivery count replaces 8-9
    assert st.write(tid, 0, 1, 1, 8, batches=[(8, 9, ACKNOWLEDGED, 2)], delivery_complete_count=5).error_code == 0
    r = st.read(tid, 0, 1)
    assert (r.start_offset, batches(r)) == (8, [(8, 9, ACKNOWLEDGED, 2)])
    assert summary_of(st.summary(tid, 0)) == (0, 8, 5, 1, 1)
    assert summary_of(st.summary(tid, 1)) == (0, -1, -1, 0, 1), "partition 1 untouched"

    assert st.delete(tid, 0).error_code == 0
    assert st.read(tid, 0, 1).error_code == Errors.INVALID_REQUEST, "read after delete"
    assert st.write(tid, 0, 1, 1, 8).error_code == Errors.INVALID_REQUEST, "write after delete"
    assert summary_of(st.summary(tid, 0)) == UNINITIALIZED
    assert st.delete(tid, 0).error_code == 0, "deleting state that is not there is not an error"
    assert summary_of(st.summary(tid, 1)) == (0, -1, -1, 0, 1), "the other partition's state is kept"

    # initialized again after the delete: a fresh state
    assert st.init(tid, 0, state_epoch=2, start_offset=30).error_code == 0
    r = st.read(tid, 0, 1)
    assert (r.error_code, r.state_epoch, r.start_offset, batches(r)) == (0, 2, 30, [])


def test_epoch_fencing(state):
    st, tid = state
    assert st.init(tid, 0, state_epoch=3, start_offset=0).error_code == 0
    assert st.read(tid, 0, leader_epoch=4).error_code == 0
    assert st.write(tid, 0, 3, 4, 0, batches=[(0, 4, ACKNOWLEDGED, 1)]).error_code == 0

    assert st.write(tid, 0, 2, 4, 5).error_code == Errors.FENCED_STATE_EPOCH, "older state epoch"
    assert st.write(tid, 0, 3, 3, 5).error_code == Errors.FENCED_LEADER_EPOCH, "older leader epoch"
    assert st.read(tid, 0, leader_epoch=3).error_code == Errors.FENCED_LEADER_EPOCH
    assert st.init(tid, 0, state_epoch=2, start_offset=9).error_code == Errors.FENCED_STATE_EPOCH
    r = st.read(tid, 0, 4)
    assert (r.error_code, r.state_epoch, r.start_offset, batches(r)) == (0, 3, 0, [(0, 4, ACKNOWLEDGED, 1)]), \
        "fenced requests change nothing"

    # -1 skips the epoch checks of a write; a write keeps the stored leader epoch
    assert st.write(tid, 0, -1, -1, 5).error_code == 0
    assert summary_of(st.summary(tid, 0))[1:] == (5, -1, 4, 3)

    # a re-initialize with a newer state epoch replaces the state and fences the older epoch
    assert st.init(tid, 0, state_epoch=4, start_offset=10).error_code == 0
    r = st.read(tid, 0, 4)
    assert (r.state_epoch, r.start_offset, batches(r)) == (4, 10, [])
    assert st.write(tid, 0, 3, 4, 11).error_code == Errors.FENCED_STATE_EPOCH
    assert st.write(tid, 0, 4, 4, 11).error_code == 0
    assert st.init(tid, 0, state_epoch=-1, start_offset=12).error_code == 0, "-1 skips the check"


def test_unknown_topics_and_partitions(state):
    st, tid = state
    unknown = uuid.uuid4().bytes
    for t, p in ((unknown, 0), (tid, PARTITIONS)):
        assert st.init(t, p, 1, 0).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION, (t, p)
        assert st.summary(t, p).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION, (t, p)
        assert st.delete(t, p).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION, (t, p)
        # read and write refuse the uninitialized share-partition before looking at metadata
        assert st.read(t, p, 0).error_code == Errors.INVALID_REQUEST, (t, p)
        assert st.write(t, p, 1, 0, 0).error_code == Errors.INVALID_REQUEST, (t, p)
    for rpc in (lambda: st.init(tid, -1, 1, 0), lambda: st.summary(tid, -1), lambda: st.delete(tid, -1),
                lambda: st.read(tid, -1, 0), lambda: st.write(tid, -1, 1, 0, 0)):
        assert rpc().error_code == Errors.INVALID_REQUEST
    # another group's state is its own
    assert st.init(tid, 0, 1, 7).error_code == 0
    other = State(st.w, unique("g"))
    assert summary_of(other.summary(tid, 0)) == UNINITIALIZED
    assert other.read(tid, 0, 0).error_code == Errors.INVALID_REQUEST


def test_state_survives_a_restart(broker_factory):
    b = broker_factory()
    tid = make_topic(b.bootstrap)
    group = unique("g")
    with WireClient(b.bootstrap) as w:
        st = State(w, group)
        assert st.init(tid, 1, 2, 100).error_code == 0
        assert st.read(tid, 1, 3).error_code == 0
        assert st.write(tid, 1, 2, 3, 100, batches=[(100, 104, ACKNOWLEDGED, 1), (105, 105, AVAILABLE, 2)],
                        delivery_complete_count=5).error_code == 0
    b.restart()
    with WireClient(b.bootstrap) as w:
        st = State(w, group)
        r = st.read(tid, 1, 3)
        assert (r.error_code, r.state_epoch, r.start_offset) == (0, 2, 100)
        assert batches(r) == [(100, 104, ACKNOWLEDGED, 1), (105, 105, AVAILABLE, 2)]
        assert summary_of(st.summary(tid, 1)) == (0, 100, 5, 3, 2)
        assert st.read(tid, 1, 2).error_code == Errors.FENCED_LEADER_EPOCH, "the leader epoch was persisted too"
