"""The internal topics' configs at start-up (``Topics.ensure_internal``): created with 4 MiB segments;
a ``__share_group_state`` an older broker created with its default 100 MiB segments is converted,
one created from an explicit setting is kept."""
from __future__ import annotations

from broker.config import BrokerConfig
from broker.delayed import Watchers
from broker.log import LogManager
from broker.topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE, Topics

OLD_SHARE_STATE = {"segment.bytes": str(100 << 20), "cleanup.policy": "delete", "retention.ms": "-1"}


def ensure(data_dir, settings: dict | None = None) -> dict[str, dict]:
    logs = LogManager(str(data_dir))
    try:
        Topics(logs, Watchers()).ensure_internal(BrokerConfig(settings or {}))
        return {name: dict(logs.topic(name).configs) for name in (CONSUMER_OFFSETS, SHARE_GROUP_STATE,
                                                                  TRANSACTION_STATE)}
    finally:
        logs.close()


def test_internal_topics_get_4_mib_segments(tmp_path):
    configs = ensure(tmp_path)
    assert {n: c["segment.bytes"] for n, c in configs.items()} == dict.fromkeys(configs, str(4 << 20))
    assert configs[SHARE_GROUP_STATE] == {"segment.bytes": str(4 << 20), "cleanup.policy": "delete",
                                          "retention.ms": "-1"}


def test_share_state_topic_of_an_older_broker_is_converted(tmp_path):
    logs = LogManager(str(tmp_path))
    logs.create_topic(SHARE_GROUP_STATE, 1, OLD_SHARE_STATE)
    logs.close()
    assert ensure(tmp_path)[SHARE_GROUP_STATE]["segment.bytes"] == str(4 << 20)
    logs = LogManager(str(tmp_path))
    try:
        assert logs.effective_config(SHARE_GROUP_STATE).segment_bytes == 4 << 20, "persisted"
    finally:
        logs.close()


def test_explicit_share_state_segment_size_is_kept(tmp_path):
    setting = {"share.coordinator.state.topic.segment.bytes": str(100 << 20)}
    assert ensure(tmp_path, setting)[SHARE_GROUP_STATE] == OLD_SHARE_STATE
    assert ensure(tmp_path, setting)[SHARE_GROUP_STATE] == OLD_SHARE_STATE, "kept at the next start"
    assert ensure(tmp_path / "other", {"share.coordinator.state.topic.segment.bytes": str(8 << 20)})[
        SHARE_GROUP_STATE]["segment.bytes"] == str(8 << 20)
