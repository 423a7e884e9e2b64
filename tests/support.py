"""Small helpers shared by the integration tests."""
from __future__ import annotations

import time
import uuid


def until(cond, timeout: float, what: str = "condition", interval: float = 0.01):
    """Return ``cond()``'s first truthy value; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- topics and groups
def create_topic(bootstrap: str, partitions: int = 1, prefix: str = "t", **configs) -> str:
    """A new topic (configs by Kafka name, ``_`` for ``.``); returns its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = unique(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    conf = {k.replace("_", "."): str(v) for k, v in configs.items()}
    admin.create_topics([NewTopic(name, partitions, 1, config=conf)])[name].result(15)
    return name


def topic_id(bootstrap: str, name: str) -> bytes:
    """The topic's id, from Metadata v12 over our codec."""
    from protocol.messages.metadata import MetadataRequest
    from tests.wire import WireClient

    with WireClient(bootstrap) as w:
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=False), 12)
    assert md.topics[0].error_code == 0, md.topics[0]
    return md.topics[0].topic_id


def set_group_configs(bootstrap: str, group: str, **configs) -> None:
    """IncrementalAlterConfigs SET on a GROUP resource (``_`` for ``.`` in names)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([res])[res].result(15)


def share_member_assigned(w, group: str, member: str, topic: str, tid: bytes, partitions=(0,),
                          timeout: float = 15.0) -> int:
    """Join share group ``group`` as ``member`` over WireClient ``w`` (ShareGroupHeartbeat v1) and
    heartbeat until its assignment holds ``partitions`` of topic id ``tid``; returns the member epoch."""
    from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HB

    state = {"epoch": 0}

    def assigned():
        r = w.request(HB(group_id=group, member_id=member, member_epoch=state["epoch"],
                         subscribed_topic_names=[topic] if state["epoch"] == 0 else None), 1)
        assert r.error_code == 0, r
        state["epoch"] = r.member_epoch
        return r.assignment is not None and any(
            t.topic_id == tid and set(partitions) <= set(t.partitions) for t in r.assignment.topic_partitions)

    until(assigned, timeout, "the share member's assignment")
    return state["epoch"]
