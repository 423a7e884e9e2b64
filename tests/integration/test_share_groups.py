"""Share-group membership and group configs over sockets: ShareGroupHeartbeat / ShareGroupDescribe
with our codec, GROUP config resources with confluent-kafka's AdminClient, and both across a restart."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.share_group_describe import ShareGroupDescribeRequest as DescReq
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HbReq
from tests.wire import WireClient


def new_topic(admin: AdminClient, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions)])[name].result(15)
    return name


def heartbeat(w: WireClient, group: str, member: str, epoch: int, topics=None):
    return w.request(HbReq(group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics), 1)


def assigned(resp) -> dict[bytes, list[int]]:
    return {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions} if resp.assignment else None


def partitions_of(r) -> list[int] | None:
    """The partitions a heartbeat answer assigns (None: the answer carries no assignment)."""
    return None if r.assignment is None else sorted(p for ps in assigned(r).values() for p in ps)


def heartbeat_until(w: WireClient, group: str, member: str, epoch: int, done, what: str, timeout: float = 20,
                    parts: list[int] | None = None):
    """Heartbeat ``member`` (at the epoch each answer gives) until ``done(partitions)`` holds for the
    member's latest assignment (``parts``: what its last answer assigned); return (member epoch,
    partitions). A joining member's answer carries its partitions (ours: Kafka 4.4 assigns them at a
    later heartbeat); a member that joins a formed group gets them once share.assignment.interval.ms
    allows a new target."""
    deadline = time.monotonic() + timeout
    while parts is None or not done(parts):
        assert time.monotonic() < deadline, f"{what}: {member} holds {parts}"
        r = heartbeat(w, group, member, epoch)
        assert r.error_code == 0, r
        epoch = r.member_epoch
        parts = partitions_of(r) if r.assignment is not None else parts
        if parts is None or not done(parts):
            time.sleep(0.1)  # heartbeat pace, not a wait for the outcome
    return epoch, parts


def alter(admin: AdminClient, group: str, **kv):
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET) for k, v in kv.items()])
    return admin.incremental_alter_configs([res])[res].result(15)


def describe_group_configs(admin: AdminClient, group: str) -> dict:
    res = ConfigResource(ConfigResource.Type.GROUP, group)
    return admin.describe_configs([res])[res].result(15)


def test_membership_epochs_and_assignment(sharebroker):
    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    topic = new_topic(admin, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(sharebroker.bootstrap) as w:
        r1 = heartbeat(w, group, "m1", 0, [topic])
        assert r1.error_code == 0 and r1.member_epoch >= 1
        assert 0 < r1.heartbeat_interval_ms <= int(sharebroker.config.get("group.share.heartbeat.interval.ms", 5000))
        assert partitions_of(r1) == [0, 1, 2, 3]  # the joining heartbeat's answer carries them (ours)
        e1, mine = r1.member_epoch, partitions_of(r1)
        r2 = heartbeat(w, group, "m2", 0, [topic])
        assert r2.error_code == 0
        # the 4 partitions end up split 2/2, each member learning its share on a later heartbeat
        e2, theirs = heartbeat_until(w, group, "m2", r2.member_epoch, lambda p: len(p) == 2, "m2 joins")
        e1, mine = heartbeat_until(w, group, "m1", e1, lambda p: len(p) == 2, "m1 gives up half")
        assert sorted(mine + theirs) == [0, 1, 2, 3]
        # a steady heartbeat carries no assignment
        assert heartbeat(w, group, "m1", e1).assignment is None
        # errors
        assert heartbeat(w, group, "m1", e1 + 7).error_code == Errors.FENCED_MEMBER_EPOCH
        assert heartbeat(w, group, "nobody", 3).error_code == Errors.UNKNOWN_MEMBER_ID
        assert heartbeat(w, group, "m3", 0, None).error_code == Errors.INVALID_REQUEST
        assert heartbeat(w, group, "x" * 37, 0, [topic]).error_code == Errors.INVALID_REQUEST
        assert heartbeat(w, "", "m1", 0, [topic]).error_code == Errors.INVALID_REQUEST
        d = w.request(DescReq(group_ids=[group, "no-such-group"]), 1)
        g, missing = d.groups
        assert g.error_code == 0 and g.group_state == "Stable" and g.assignor_name == "simple"
        assert {m.member_id for m in g.members} == {"m1", "m2"}
        assert missing.error_code == Errors.GROUP_ID_NOT_FOUND
        # leaving gives the partitions back to the remaining member
        assert heartbeat(w, group, "m2", -1).member_epoch == -1
        e1, mine = heartbeat_until(w, group, "m1", e1, lambda p: p == [0, 1, 2, 3], "m2 left")
        assert heartbeat(w, group, "m1", -1).error_code == 0
        d = w.request(DescReq(group_ids=[group]), 1)
        assert d.groups[0].group_state == "Empty" and d.groups[0].members == []


def test_group_state_survives_restart(tmp_path):
    with BrokerProcess(tmp_path / "d") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topic = new_topic(admin, 2)
        group = "g-restart"
        with WireClient(b.bootstrap) as w:
            r = heartbeat(w, group, "m1", 0, [topic])
            assert r.error_code == 0
            epoch, parts = heartbeat_until(w, group, "m1", r.member_epoch, lambda p: p == [0, 1], "m1's partitions",
                                           parts=partitions_of(r))
            before = w.request(DescReq(group_ids=[group]), 1).groups[0]
        b.kill9()
        b.start()
        with WireClient(b.bootstrap) as w:
            d = w.request(DescReq(group_ids=[group]), 1).groups[0]
            assert d.error_code == 0 and d.group_epoch == before.group_epoch
            assert [m.member_id for m in d.members] == ["m1"]
            assert sorted(d.members[0].assignment.topic_partitions[0].partitions) == [0, 1]
            # the member carries on with its epoch after the restart
            assert heartbeat(w, group, "m1", epoch).error_code == 0


def test_group_configs_validated_persisted_and_described(tmp_path):
    with BrokerProcess(tmp_path / "d", config={"group.share.record.lock.duration.ms": "20000"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        group = "g-configs"
        before = describe_group_configs(admin, group)
        assert before["share.auto.offset.reset"].value == "latest"
        assert before["share.record.lock.duration.ms"].value == "20000"  # the broker's setting
        assert before["share.delivery.count.limit"].value == "5"
        alter(admin, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=45000,
              share_delivery_count_limit=4)
        for bad in ({"share_record_lock_duration_ms": 1000},     # below group.share.min.record.lock.duration.ms
                    {"share_delivery_count_limit": 11},          # above group.share.max.delivery.count.limit
                    {"share_auto_offset_reset": "sometimes"},
                    {"share_auto_offset_reset": "by_duration:PT-1H"},
                    {"share_isolation_level": "dirty"},
                    {"no_such_key": "1"}):
            with pytest.raises(KafkaException) as e:
                alter(admin, group, **bad)
            assert e.value.args[0].code() == Errors.INVALID_CONFIG, bad
        alter(admin, group, share_auto_offset_reset="by_duration:PT1H")
        b.restart()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        after = describe_group_configs(admin, group)
        assert after["share.auto.offset.reset"].value == "by_duration:PT1H"
        assert after["share.record.lock.duration.ms"].value == "45000"
        assert after["share.delivery.count.limit"].value == "4"


@pytest.mark.parametrize("key,value", [("group.share.min.record.lock.duration.ms", "999"),  # floor 1000 ms
                                       ("group.share.fair.acquisition.enable", "sometimes")])  # ours, a boolean
def test_broker_refuses_bad_share_settings(tmp_path, key, value):
    b = BrokerProcess(tmp_path / "d", config={key: value}, start_timeout=20)
    with pytest.raises(RuntimeError) as e:
        b.start()
    assert key in str(e.value)
    b.close()


def test_silent_member_is_removed_and_group_size_is_bounded(tmp_path):
    cfg = {"group.share.min.session.timeout.ms": "1000", "group.share.min.heartbeat.interval.ms": "200",
           "group.share.max.size": "2"}
    with BrokerProcess(tmp_path / "d", config=cfg) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topic = new_topic(admin, 2)
        group = "g-expiry"
        alter(admin, group, share_session_timeout_ms=1500, share_heartbeat_interval_ms=300)
        with WireClient(b.bootstrap) as w:
            first = heartbeat(w, group, "m1", 0, [topic])
            assert first.error_code == 0
            m2 = heartbeat(w, group, "m2", 0, [topic])
            assert m2.error_code == 0
            assert heartbeat(w, group, "m3", 0, [topic]).error_code == Errors.GROUP_MAX_SIZE_REACHED
            # m1 keeps heartbeating, m2 goes silent: after 1.5 s m2 is removed and m1 gets everything
            epoch = first.member_epoch
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                r = heartbeat(w, group, "m1", epoch)
                assert r.error_code == 0, r
                epoch = r.member_epoch
                if r.assignment is not None and list(assigned(r).values()) == [[0, 1]]:
                    break
                time.sleep(0.1)  # heartbeat pace, not a wait for the outcome
            else:
                raise AssertionError("m2 was not removed")
            d = w.request(DescReq(group_ids=[group]), 1).groups[0]
            assert [m.member_id for m in d.members] == ["m1"]
            assert heartbeat(w, group, "m2", m2.member_epoch).error_code == Errors.UNKNOWN_MEMBER_ID
            assert heartbeat(w, group, "m3", 0, [topic]).error_code == 0
