"""Start-up configuration: invalid settings are refused before the data directory is touched,
with Kafka's message naming the key; unknown keys are warned about; no traceback ever."""
from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from tests.support import unique


def run_broker(tmp_path, *args, timeout=30):
    data = tmp_path / "data"
    p = subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(data), *args],
                       capture_output=True, text=True, timeout=timeout)
    return p, data


@pytest.mark.parametrize("args, message", [
    (["--set", "num.partitions=abc"], "Invalid value abc for configuration num.partitions: Not a number of type INT"),
    (["--set", "num.partitions=-3"], "Invalid value -3 for configuration num.partitions: Value must be at least 1"),
    (["--set", "auto.create.topics.enable=maybe"],
     "Invalid value maybe for configuration auto.create.topics.enable: Expected value to be either true or false"),
    (["--set", "sharebroker.log.syncfs.enable=sometimes"], "Invalid value sometimes for configuration "
     "sharebroker.log.syncfs.enable: Expected value to be either true or false"),
    (["--set", "log.retention.ms=notanumber"],
     "Invalid value notanumber for configuration log.retention.ms: Not a number of type LONG"),
    (["--set", "log.segment.bytes=10"], "for configuration log.segment.bytes: Value must be at least"),
    (["--set", "group.share.delivery.count.limit=11"],
     "Invalid value 11 for configuration group.share.delivery.count.limit: Value must be no more than 10"),
    (["--set", "log.cleaner.dedupe.buffer.size=1000", "--set", "log.cleaner.threads=4"],
     "Invalid value 1000 for configuration log.cleaner.dedupe.buffer.size: the offset map is too small"),
    (["--set", "transactional.id.expiration.ms=0"],
     "Invalid value 0 for configuration transactional.id.expiration.ms: Value must be at least 1"),
    (["--set", "transaction.remove.expired.transaction.cleanup.interval.ms=9999999999"],
     "Invalid value 9999999999 for configuration transaction.remove.expired.transaction.cleanup.interval.ms: "
     "Not a number of type INT"),
    (["--set", "listeners=garbage"], "for configuration listeners"),
    (["--set", "queued.max.request.bytes=1048576"],  # below socket.request.max.bytes' 100 MiB (KafkaConfig)
     "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"),
    (["--set", "listeners=PLAINTEXT://127.0.0.1:70000"], "for configuration listeners"),
])
def test_invalid_settings_refused_before_the_data_dir(tmp_path, args, message):
    p, data = run_broker(tmp_path, *args)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not data.exists()  # refused before anything was written


@pytest.mark.parametrize("args, message", [
    (["--log-level", "VERBOSE"], "invalid choice: 'VERBOSE'"),
    (["--listen", "127.0.0.1:99999"], "port 99999 is outside 0-65535"),
])
def test_bad_flags_are_usage_errors(tmp_path, args, message):
    p, data = run_broker(tmp_path, *args)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr
    assert not data.exists()


def test_impossible_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    p = subprocess.run([sys.executable, "-m", "broker", "--listen", "127.0.0.1:0", "--data-dir",
                        str(blocker / "data")], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "log.dirs" in p.stderr and "Traceback" not in p.stderr


def test_version_and_help():
    v = subprocess.run([sys.executable, "-m", "broker", "--version"], capture_output=True, text=True, timeout=30)
    assert v.returncode == 0 and v.stdout.startswith("sharebroker ")
    h = subprocess.run([sys.executable, "-m", "broker", "--help"], capture_output=True, text=True, timeout=30)
    assert all(level in h.stdout for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))


def test_unknown_keys_warned_kafka_keys_accepted(broker_factory):
    b = broker_factory({"foo.bar": "1", "num.network.threads": "3", "process.roles": "broker,controller"})
    warnings = [line for line in b.log_lines if "isn't a known config" in line]
    assert len(warnings) == 1 and "'foo.bar'" in warnings[0]


def test_defaults_are_described_as_defaults(sharebroker):
    """A topic config left at its default is DEFAULT_CONFIG, not STATIC_BROKER_CONFIG (Kafka hides those)."""
    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    topic = unique("dflt")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    brk = ConfigResource(ResourceType.BROKER, "1")
    bconf = admin.describe_configs([brk])[brk].result(20)
    assert bconf["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_group_configs_of_kafka_4_4_are_described_and_bounded(sharebroker):
    """KIP-1263's assignment intervals and KIP-1240's share keys are group configs, with broker bounds."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    group = unique("cfg")
    res = ConfigResource(ResourceType.GROUP, group)
    described = admin.describe_configs([res])[res].result(20)
    for key, default in (("share.assignment.interval.ms", "1000"), ("consumer.assignment.interval.ms", "1000"),
                         ("share.delivery.count.limit", "5"), ("share.partition.max.record.locks", "2000"),
                         ("share.renew.acknowledge.enable", "true")):
        assert described[key].value == default and described[key].source == ConfigSource.DEFAULT_CONFIG.value, key
    # internal in Kafka 4.4 (KAFKA-20930): settable, not described
    assert "share.assignor.offload.enable" not in described and "consumer.assignor.offload.enable" not in described

    def alter(value):
        r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.assignment.interval.ms", value, incremental_operation=AlterConfigOpType.SET)])
        return admin.incremental_alter_configs([r])[r].exception(20)

    assert alter("500") is None
    assert admin.describe_configs([res])[res].result(20)["share.assignment.interval.ms"].value == "500"
    err = alter("20000")  # above group.share.max.assignment.interval.ms (15000)
    assert err is not None and "group.share.max.assignment.interval.ms" in str(err)
