"""Consumer groups end to end with real clients over sockets: confluent-kafka (classic and KIP-848
protocols), kafka-python and aiokafka.

For every client: three consumers in one group share a 6-partition topic (disjoint assignments, each
record consumed exactly once), a leaving member's partitions go to the others, committed offsets are
resumed by new consumers, after a clean broker restart and after kill -9.  Also: the classic initial
rebalance delay with default settings, ListGroups type filters with classic, consumer and share groups side by side,
DeleteGroups, and group ids used with the wrong group type.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
import time
import uuid
from collections import Counter

import pytest
from aiokafka.errors import IllegalStateError
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.wire import WireClient
from tests.support import unique, until

pytestmark = pytest.mark.filterwarnings("ignore:read_text is deprecated", "ignore:open_text is deprecated")

PARTITIONS = 6
PER_BATCH = 60  # records per phase, 10 per partition

# Short enough rebalances for a fast suite; nothing here waits for a session timeout.
FAST_GROUPS = {
    "group.initial.rebalance.delay.ms": "300",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


# ------------------------------------------------------------------ helpers
Broker = BrokerProcess  # start() returns only once the new process accepts connections


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data", config=FAST_GROUPS)
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("cg"), config=FAST_GROUPS)
    b.start()
    try:
        yield b
    finally:
        b.close()


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = unique("t")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until the result is in
    admin.create_topics([NewTopic(name, partitions)])[name].result(15)
    return name


def produce_batch(bootstrap: str, topic: str, tag: str, n: int = PER_BATCH) -> set[str]:
    """n records spread evenly over all partitions; returns their values."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    values = set()
    for i in range(n):
        v = f"{tag}-{i}"
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS)
        values.add(v)
    assert p.flush(15) == 0
    return values


# ------------------------------------------------------------------ one interface over four clients
class ConfluentHandle:
    def __init__(self, bootstrap, group, topic, protocol):
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        if protocol == "classic":
            conf["heartbeat.interval.ms"] = 300  # notice rebalances quickly
        self.c = Consumer(conf)
        self.c.subscribe([topic])

    def poll(self, timeout=0.1):
        out = []
        for m in self.c.consume(500, timeout):
            if m.error():
                raise AssertionError(f"consumer error: {m.error()}")
            out.append((m.partition(), m.offset(), m.value().decode()))
        return out

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def positions(self) -> dict[int, int | None]:
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in self.c.position(self.c.assignment())}

    def commit(self) -> None:
        try:
            self.c.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed since the last commit
                raise

    def close(self) -> None:
        self.c.close()


class KafkaPythonHandle:
    """kafka-python drives its group membership from poll(), and a JoinGroup is answered only once
    every member rejoined, so (as in a real application) each consumer polls in its own thread;
    the test thread takes the records and the assignment that thread saw."""

    def __init__(self, bootstrap, group, topic):
        self._cmds: queue.Queue = queue.Queue()
        self._cond = threading.Condition()
        self._records: list = []
        self._assignment: set[int] = set()
        self._positions: dict[int, int | None] = {}
        self._error: BaseException | None = None
        started = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, group, topic, started), daemon=True)
        self._thread.start()
        started.result(30)

    def _run(self, bootstrap, group, topic, started):
        from kafka import KafkaConsumer

        try:
            c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                              auto_offset_reset="earliest", heartbeat_interval_ms=300)
            c.subscribe([topic])
        except BaseException as e:  # noqa: BLE001 - reported to the constructor
            started.set_exception(e)
            return
        started.set_result(None)
        while True:
            try:
                cmd, done = self._cmds.get_nowait()
            except queue.Empty:
                cmd = None
            if cmd is not None:
                try:
                    done.set_result(c.commit() if cmd == "commit" else c.close())
                except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                    done.set_exception(e)
                if cmd == "close":
                    return
                continue
            try:
                batches = c.poll(timeout_ms=50)
                assigned = c.assignment()
                positions = {tp.partition: c.position(tp, timeout_ms=10) for tp in assigned}
            except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                with self._cond:
                    self._error = e
                    self._cond.notify_all()
                return
            with self._cond:
                for records in batches.values():
                    self._records += [(r.partition, r.offset, r.value.decode()) for r in records]
                self._assignment = set(positions)
                self._positions = positions
                self._cond.notify_all()

    def _check(self):
        if self._error is not None:
            raise AssertionError(f"kafka-python consumer failed: {self._error!r}")

    def poll(self, timeout=0.1):
        with self._cond:
            self._cond.wait_for(lambda: self._records or self._error, timeout)
            self._check()
            out, self._records = self._records, []
            return out

    def assignment(self) -> set[int]:
        with self._cond:
            self._check()
            return set(self._assignment)

    def positions(self) -> dict[int, int | None]:
        with self._cond:
            self._check()
            return dict(self._positions)

    def _call(self, cmd):
        done = concurrent.futures.Future()
        self._cmds.put((cmd, done))
        return done.result(30)

    def commit(self) -> None:
        self._call("commit")

    def close(self) -> None:
        if self._thread.is_alive():
            self._call("close")
        self._thread.join(30)


class _LoopThread:
    """An asyncio loop in a daemon thread, so aiokafka keeps heartbeating while the test thread waits."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class AioKafkaHandle:
    def __init__(self, loop: _LoopThread, bootstrap, group, topic):
        from aiokafka import AIOKafkaConsumer

        self.loop = loop

        async def start():
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                 auto_offset_reset="earliest", heartbeat_interval_ms=300)
            c.subscribe([topic])
            await c.start()
            return c

        self.c = loop.run(start())

    def poll(self, timeout=0.1):
        batches = self.loop.run(self.c.getmany(timeout_ms=int(timeout * 1000)))
        return [(r.partition, r.offset, r.value.decode()) for records in batches.values() for r in records]

    def assignment(self) -> set[int]:
        async def get():
            return {tp.partition for tp in self.c.assignment()}
        return self.loop.run(get())

    def positions(self) -> dict[int, int | None]:
        async def get():
            out = {}
            for tp in self.c.assignment():
                try:
                    out[tp.partition] = await asyncio.wait_for(self.c.position(tp), 0.2)
                except (TimeoutError, IllegalStateError):
                    out[tp.partition] = None
            return out
        return self.loop.run(get())

    def commit(self) -> None:
        self.loop.run(self.c.commit())

    def close(self) -> None:
        self.loop.run(self.c.stop())


CLIENTS = ["confluent-classic", "confluent-consumer", "kafka-python", "aiokafka"]


@pytest.fixture
def make_consumer():
    """make_consumer(client, bootstrap, group, topic) -> handle; handles still open are closed at teardown."""
    opened: list = []
    loops: list[_LoopThread] = []

    def make(client, bootstrap, group, topic):
        if client == "confluent-classic":
            h = ConfluentHandle(bootstrap, group, topic, "classic")
        elif client == "confluent-consumer":
            h = ConfluentHandle(bootstrap, group, topic, "consumer")
        elif client == "kafka-python":
            h = KafkaPythonHandle(bootstrap, group, topic)
        else:
            if not loops:
                loops.append(_LoopThread())
            h = AioKafkaHandle(loops[0], bootstrap, group, topic)
        opened.append(h)
        return h

    def close(h):
        if h in opened:
            opened.remove(h)
            h.close()

    make.close = close
    yield make
    for h in opened:
        with contextlib.suppress(Exception):  # best effort at teardown; the test already failed
            h.close()
    for lp in loops:
        lp.stop()


def settle(handles, timeout: float = 30.0, what: str = "") -> tuple[list[set[int]], list[list]]:
    """Poll every handle until their assignments are non-empty, disjoint and cover all partitions.

    Returns the assignments and, per handle, the records it polled meanwhile."""
    early: list[list] = [[] for _ in handles]

    def settled():
        for i, h in enumerate(handles):
            early[i].extend(h.poll(0.05))
        sets = [h.assignment() for h in handles]
        if all(sets) and sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS)):
            return sets
        return None

    sets = until(settled, timeout, f"{len(handles)} consumers to share {PARTITIONS} partitions {what}")
    return sets, early


def wait_stable(handles, timeout: float = 30.0, what: str = "") -> list[set[int]]:
    """settle(), where nothing may be delivered meanwhile: everything produced so far was committed."""
    sets, early = settle(handles, timeout, what)
    stray = [r for g in early for r in g]
    assert not stray, f"records delivered although everything before was committed: {stray[:5]}"
    return sets


def consume(handles, assignments, expected: set[str], early=None, once: bool = True, ends=None,
            timeout: float = 30.0) -> list[list]:
    """Poll until every expected value arrived (counting ``early`` records too) and, with ``ends``
    ({partition: log end offset}), until every owner's position is at the end.  Nothing else may
    arrive; with ``once`` each record exactly once and only from partitions its consumer owns
    (``assignments``)."""
    got: list[list] = [[] for _ in handles]
    early = early or [[] for _ in handles]

    def at_end():
        return all(pos == ends[p] for h in handles for p, pos in h.positions().items())

    def done():
        for i, h in enumerate(handles):
            got[i].extend(h.poll(0.05))
        return expected <= {v for g in got + early for _, _, v in g} and (ends is None or at_end())

    until(done, timeout, f"{len(expected)} records")
    values = Counter(v for g in got + early for _, _, v in g)
    assert set(values) == expected, f"records that should not come (again): {sorted(set(values) - expected)[:10]}"
    if once:
        dup = {v: n for v, n in values.items() if n > 1}
        assert not dup, f"records consumed more than once: {dup}"
        for i, g in enumerate(got):
            parts = {p for p, _, _ in g}
            assert parts <= assignments[i], f"consumer {i} got records of {parts - assignments[i]} it does not own"
    return got


# ------------------------------------------------------------------ 1. share, rebalance, resume, restart, crash
@pytest.mark.parametrize("client", CLIENTS)
def test_three_consumers_share_rebalance_resume_restart_and_crash(broker, make_consumer, client):
    bs = broker.bootstrap
    topic = create_topic(bs)
    group = unique("g")

    def commit_and_close(handles):
        for h in handles:
            h.commit()
        for h in handles:
            make_consumer.close(h)

    # three members: disjoint, balanced, covering; every record consumed exactly once
    members = [make_consumer(client, bs, group, topic) for _ in range(3)]
    sets = wait_stable(members, what="(3 members)")
    assert sorted(map(len, sets)) == [2, 2, 2], sets
    got = consume(members, sets, produce_batch(bs, topic, "b1"))
    assert all(got), "a member consumed nothing although it owns two partitions"
    for h in members:
        h.commit()

    # a member leaves: the other two take its partitions and consume new records there
    leaver, leaver_parts = members.pop(), sets.pop()
    make_consumer.close(leaver)
    sets = wait_stable(members, what="after a member left")
    assert leaver_parts <= sets[0] | sets[1]
    got = consume(members, sets, produce_batch(bs, topic, "b2"))
    assert sum(1 for g in got for p, _, _ in g if p in leaver_parts) == PER_BATCH // PARTITIONS * len(leaver_parts)
    commit_and_close(members)

    # new consumers resume at the committed offsets (wait_stable: nothing old is delivered)
    members = [make_consumer(client, bs, group, topic) for _ in range(3)]
    sets = wait_stable(members, what="after the consumers restarted")
    consume(members, sets, produce_batch(bs, topic, "b3"))
    for h in members:
        h.commit()
    uncommitted = produce_batch(bs, topic, "b4")
    consume(members, sets, uncommitted)  # consumed, never committed
    for h in members:
        make_consumer.close(h)

    # clean broker restart, then kill -9: each time the committed records stay consumed and the
    # uncommitted ones are consumed again.  Records that are there before the group forms may be
    # delivered twice while it forms (at least once: a partition that moves restarts at the
    # committed offset), so here only which records come is checked, and the phase ends once every
    # owner's position is at the log end.
    for crash in (False, True):
        if crash:
            broker.kill9()
            broker.start()
        else:
            broker.restart()
        members = [make_consumer(client, bs, group, topic) for _ in range(3)]
        sets, early = settle(members, what=f"after a broker {'crash' if crash else 'restart'}")
        ends = {p: PER_BATCH // PARTITIONS * (4 + crash) for p in range(PARTITIONS)}
        consume(members, sets, uncommitted, early=early, once=False, ends=ends)
        for h in members:
            h.commit()
        uncommitted = produce_batch(bs, topic, f"b{5 + crash}")
        consume(members, sets, uncommitted)
        for h in members:
            make_consumer.close(h)


# ------------------------------------------------------------------ 2. the initial rebalance delay, default settings
# Kafka's default group.initial.rebalance.delay.ms (GroupCoordinatorConfig); the broker runs with defaults.
DEFAULT_INITIAL_REBALANCE_DELAY_S = 3.0


def classic_join(w: WireClient, group: str, member_id: str = "", rebalance_timeout_ms: int = 3000) -> int:
    """Send a JoinGroup v9 (consumer protocol type, one 'range' protocol) without waiting; returns its correlation id."""
    return w.send(JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=rebalance_timeout_ms,
                                   member_id=member_id, protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]), 9)


def test_initial_rebalance_delay_holds_the_first_join_for_late_members(tmp_path):
    """Kafka's classic-group initial delay (GroupMetadataManager.prepareRebalance on an EMPTY group schedules the
    join completion ``group.initial.rebalance.delay.ms`` later): the first member's JoinGroup is not answered
    before the delay has passed, and a member that joins within the delay ends in the same, first generation.
    Lower bounds only: nothing here depends on how fast the broker completes after the delay."""
    with Broker(tmp_path / "data") as b:  # every broker setting at its default
        topic = create_topic(b.bootstrap)
        group = unique("delay")
        with WireClient(b.bootstrap) as wa, WireClient(b.bootstrap) as wb:
            ids = {}
            for name, w in (("a", wa), ("b", wb)):  # v4+: the first join only hands out a member id
                classic_join(w, group)
                _, r = w.receive(JoinGroupRequest.API_KEY, 9)
                assert r.error_code == Errors.MEMBER_ID_REQUIRED and r.member_id, r
                ids[name] = r.member_id
            # rebalance timeout == the delay: Kafka's remaining time is 0, so the delay is not extended
            sent = time.monotonic()
            corr_a = classic_join(wa, group, ids["a"])
            corr_b = classic_join(wb, group, ids["b"])  # well within the delay
            got_a, ra = wa.receive(JoinGroupRequest.API_KEY, 9)
            waited = time.monotonic() - sent
            got_b, rb = wb.receive(JoinGroupRequest.API_KEY, 9)
        assert (got_a, got_b) == (corr_a, corr_b)
        assert ra.error_code == 0 and rb.error_code == 0, (ra, rb)
        assert waited >= DEFAULT_INITIAL_REBALANCE_DELAY_S, f"the first join completed after {waited:.2f}s"
        assert ra.generation_id == rb.generation_id == 1, (ra.generation_id, rb.generation_id)
        assert ra.leader == rb.leader and ra.leader in ids.values()
        leader = ra if ra.leader == ra.member_id else rb
        assert sorted(m.member_id for m in leader.members) == sorted(ids.values())

        # A KIP-848 group has no initial delay; with defaults a real consumer gets every partition.
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("join"), "group.protocol": "consumer"})
        try:
            c.subscribe([topic])
            until(lambda: c.poll(0.02) is None and c.assignment(), 15, "a consumer-protocol assignment")
            assert len(c.assignment()) == PARTITIONS
        finally:
            c.close()


# ------------------------------------------------------------------ 3. ListGroups, DeleteGroups, group types
def share_join(w: WireClient, group: str, topic: str, member: str | None = None):
    return w.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member or uuid.uuid4().hex[:22],
                                                member_epoch=0, subscribed_topic_names=[topic]), 1)


def list_groups(w: WireClient, types=(), states=()) -> dict[str, tuple[str, str, str]]:
    r = w.request(ListGroupsRequest(types_filter=list(types), states_filter=list(states)), 5)
    assert r.error_code == 0
    return {g.group_id: (g.group_type, g.protocol_type, g.group_state) for g in r.groups}


def joined(handle, timeout=15.0):
    until(lambda: handle.poll(0.05) == [] and handle.assignment(), timeout, "an assignment")
    return handle


def test_list_groups_type_filters_with_share_groups(shared_broker, make_consumer):
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    classic, consumer, share, simple = unique("classic"), unique("consumer"), unique("share"), unique("simple")
    joined(make_consumer("confluent-classic", bs, classic, topic))
    joined(make_consumer("confluent-consumer", bs, consumer, topic))
    admin = AdminClient({"bootstrap.servers": bs})
    with WireClient(bs) as w:
        # a standalone commit (no membership) makes an Empty classic group without a protocol type
        r = w.request(OffsetCommitRequest(group_id=simple, generation_id_or_member_epoch=-1, member_id="",
                                          topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                              name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                                                  partition_index=0, committed_offset=0)])]), 8)
        assert r.topics[0].partitions[0].error_code == 0
        assert share_join(w, share, topic).error_code == 0

        mine = {classic, consumer, share, simple}
        every = {g: v for g, v in list_groups(w).items() if g in mine}
        assert every == {classic: ("classic", "consumer", "Stable"),
                         consumer: ("consumer", "consumer", "Stable"),
                         share: ("share", "share", "Stable"),
                         simple: ("classic", "", "Empty")}
        assert set(list_groups(w, ["consumer"])) & mine == {consumer}
        assert set(list_groups(w, ["classic"])) & mine == {classic, simple}
        assert set(list_groups(w, ["share"])) & mine == {share}
        assert set(list_groups(w, ["Share", "CONSUMER"])) & mine == {share, consumer}  # case-insensitive
        assert set(list_groups(w, ["classic"], ["Empty"])) & mine == {simple}
        assert set(list_groups(w, ["streams"])) & mine == set()
        # v4 and older have no type field; v2 lists every group with its protocol type
        old = w.request(ListGroupsRequest(), 2)
        assert {g.group_id: g.protocol_type for g in old.groups if g.group_id in mine} == {
            classic: "consumer", consumer: "consumer", share: "share", simple: ""}

    # confluent's AdminClient: type filters and the group type it reports
    def listed(**kw):
        res = admin.list_consumer_groups(**kw).result(15)
        assert not res.errors, res.errors
        return {g.group_id: g for g in res.valid if g.group_id in mine}

    # without a filter the share group is left out: librdkafka keeps protocol types "consumer" and ""
    got = listed()
    assert set(got) == {classic, consumer, simple}
    assert {g: v.type for g, v in got.items()} == {classic: ConsumerGroupType.CLASSIC,
                                                  consumer: ConsumerGroupType.CONSUMER,
                                                  simple: ConsumerGroupType.CLASSIC}
    assert got[simple].is_simple_consumer_group and not got[classic].is_simple_consumer_group
    got = listed(types={ConsumerGroupType.CONSUMER})
    assert set(got) == {consumer} and got[consumer].type == ConsumerGroupType.CONSUMER
    got = listed(types={ConsumerGroupType.CLASSIC})
    assert set(got) == {classic, simple} and got[classic].type == ConsumerGroupType.CLASSIC
    got = listed(types={ConsumerGroupType.CLASSIC}, states={ConsumerGroupState.STABLE})
    assert set(got) == {classic}


def test_delete_groups_refuses_non_empty_and_deletes_empty(shared_broker, make_consumer):
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    classic, consumer, share = unique("classic"), unique("consumer"), unique("share")
    handles = {g: joined(make_consumer(p, bs, g, topic))
               for g, p in ((classic, "confluent-classic"), (consumer, "confluent-consumer"))}
    produce_batch(bs, topic, "x")
    for h in handles.values():  # commit something so deletion also has offsets to remove
        until(h.poll, 15, "records")
        h.commit()
    admin = AdminClient({"bootstrap.servers": bs})
    with WireClient(bs) as w:
        member = uuid.uuid4().hex[:22]
        assert share_join(w, share, topic, member).error_code == 0

        futures = admin.delete_consumer_groups([classic, consumer, share], request_timeout=15)
        for g, f in futures.items():
            with pytest.raises(KafkaException) as e:
                f.result(15)
            assert e.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, (g, e.value)
        assert {classic, consumer, share} <= set(list_groups(w))

        # empty them: consumers leave, the share member leaves with epoch -1
        for h in handles.values():
            make_consumer.close(h)
        r = w.request(ShareGroupHeartbeatRequest(group_id=share, member_id=member, member_epoch=-1), 1)
        assert r.error_code == 0
        until(lambda: all(s[2] == "Empty" for g, s in list_groups(w).items() if g in (classic, consumer, share)),
              15, "the three groups to be Empty")

        futures = admin.delete_consumer_groups([classic, consumer, share], request_timeout=15)
        for g, f in futures.items():
            f.result(15)
        assert not {classic, consumer, share} & set(list_groups(w))
        # deleted means gone: offsets too, and a second delete finds nothing
        d = w.request(DeleteGroupsRequest(groups_names=[classic, consumer, share, ""]), 2)
        assert [(r.group_id, r.error_code) for r in d.results] == [
            (classic, Errors.GROUP_ID_NOT_FOUND), (consumer, Errors.GROUP_ID_NOT_FOUND),
            (share, Errors.GROUP_ID_NOT_FOUND), ("", Errors.INVALID_GROUP_ID)]
    for g in (classic, consumer):
        req = ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p) for p in range(PARTITIONS)])
        res = admin.list_consumer_group_offsets([req])[g].result(15)
        assert all(tp.offset < 0 for tp in res.topic_partitions), res.topic_partitions


def _error_message(m):
    return m if m is not None and m.error() else None


def test_group_id_of_one_type_cannot_be_used_as_another(shared_broker, make_consumer):
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    classic, consumer, share = unique("classic"), unique("consumer"), unique("share")
    joined(make_consumer("confluent-classic", bs, classic, topic))
    joined(make_consumer("confluent-consumer", bs, consumer, topic))
    with WireClient(bs) as w:
        assert share_join(w, share, topic).error_code == 0

        # a consumer (classic or KIP-848) group id as a share group: GROUP_ID_NOT_FOUND, as Kafka
        for g in (classic, consumer):
            r = share_join(w, g, topic)
            assert (r.error_code, r.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {g} is not a share group.")
            d = w.request(ShareGroupDescribeRequest(group_ids=[g]), 1).groups[0]
            assert d.error_code == Errors.GROUP_ID_NOT_FOUND
        # a share group id with the consumer protocols
        j = w.request(JoinGroupRequest(group_id=share, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                       member_id="", protocol_type="consumer",
                                       protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                            metadata=b"")]), 9)
        assert j.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
        h = w.request(ConsumerGroupHeartbeatRequest(group_id=share, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                                                    rebalance_timeout_ms=10000, subscribed_topic_names=[topic],
                                                    topic_partitions=[]), 1)
        assert (h.error_code, h.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {share} is not a consumer group.")
        d = w.request(ConsumerGroupDescribeRequest(group_ids=[share]), 1).groups[0]
        assert d.error_code == Errors.GROUP_ID_NOT_FOUND
        d = w.request(DescribeGroupsRequest(groups=[share, consumer]), 6).groups
        assert [(g.error_code, g.group_state) for g in d] == [(Errors.GROUP_ID_NOT_FOUND, "Dead")] * 2
        # (Kafka answers an internal error here; we answer GROUP_ID_NOT_FOUND, see coordinator/group/README.md)
        c = w.request(OffsetCommitRequest(group_id=share, generation_id_or_member_epoch=-1, member_id="",
                                          topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                              name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                                                  partition_index=0, committed_offset=0)])]), 8)
        assert c.topics[0].partitions[0].error_code == Errors.GROUP_ID_NOT_FOUND
        # nothing changed type
        types = list_groups(w)
        assert (types[classic][0], types[consumer][0], types[share][0]) == ("classic", "consumer", "share")

    # and the real clients fail the way they fail against Kafka
    for protocol, code in (("classic", KafkaError.INCONSISTENT_GROUP_PROTOCOL), ("consumer", KafkaError._FATAL)):
        c = Consumer({"bootstrap.servers": bs, "group.id": share, "group.protocol": protocol})
        try:
            c.subscribe([topic])
            m = until(lambda c=c: _error_message(c.poll(0.05)), 15,
                      f"a {protocol} consumer error on a share group id")
            assert m.error().code() == code, m.error()
            if protocol == "consumer":
                assert "group id does not exist" in m.error().str()
            assert c.assignment() == []
        finally:
            c.close()
    s = ShareConsumer({"bootstrap.servers": bs, "group.id": consumer})
    try:
        s.subscribe([topic])

        def share_error():
            try:
                for m in s.poll(0.05) or []:
                    if m.error():
                        return m.error()
            except KafkaException as e:
                return e.args[0]
            return None

        err = until(share_error, 15, "a share consumer error on a consumer group id")
        assert err.code() == KafkaError.GROUP_ID_NOT_FOUND, err
    finally:
        s.close()
