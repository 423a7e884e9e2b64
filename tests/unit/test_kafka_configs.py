"""Our topic and broker config tables against Kafka 4.4's own definitions.

``broker/kafka_configs.json`` is Kafka's dump (``tools/kafka_configs.py`` runs Kafka's ``LogConfig`` /
``KafkaConfig`` definitions through ``tests/kafka_ref/java/ConfigDump.java``). These tests fail when a
topic config Kafka defines is missing here or differs in type, default, range or broker synonym, when
DescribeConfigs of the broker leaves out a Kafka broker config or gives it another type, default or
sensitivity, and (with Java and Maven present) when the committed table no longer matches the jars.
"""
from __future__ import annotations

import re
import shutil

import pytest

from broker.config import BrokerConfig
from broker.configs import _KAFKA_TYPES, _NO_BROKER_DEFAULT, BROKER_DEFAULTS, DEFAULT, BrokerConfigs, BrokerSettings, \
    _fmt, kafka_configs
from broker.log.config import TOPIC_CONFIGS, ConfigError, validate_topic_configs

KAFKA = kafka_configs()


def _range(validator: str | None):
    """(minimum, maximum, also) from Kafka's Range.toString: ``[1,...]``, ``[a,...,b]``, ``[1,...,9] or -1``."""
    m = re.fullmatch(r"\[(-?[\d.]+),\.\.\.(?:,(-?[\d.]+))?\](?: or (-?\d+))?", validator or "")
    if not m:
        return None
    num = (lambda x: None if x is None else float(x) if "." in x else int(x))
    return num(m.group(1)), num(m.group(2)), num(m.group(3))


def test_every_kafka_topic_config_is_defined_with_kafkas_type_default_and_range():
    assert sorted(TOPIC_CONFIGS) == sorted(KAFKA["topic"])
    for name, (type_, default, validator, _) in KAFKA["topic"].items():
        ours = TOPIC_CONFIGS[name]
        assert ours.type == _KAFKA_TYPES[type_], name
        assert _fmt(ours.default) == default, name
        assert ours.synonym == KAFKA["topic_synonyms"].get(name), name
        rng = _range(validator)
        if rng is not None:
            low, high, also = rng
            assert (ours.minimum, ours.maximum, ours.also) == (low, high, also), name
        elif validator and validator.startswith("["):  # a choice of values
            choices = [c.strip().lower() for c in validator.strip("[]").split(",")]
            if ours.choices is not None:
                assert sorted(ours.choices) == sorted(choices), name


def test_kafka_topic_configs_are_accepted_with_kafkas_validation():
    """Each Kafka 4.4 topic config's default is accepted (MirrorMaker 2 copies them all), except
    remote.storage.enable=true, which a broker without tiered storage refuses."""
    validate_topic_configs({n: row[1] for n, row in KAFKA["topic"].items() if row[1] is not None})
    assert validate_topic_configs({"remote.copy.lag.bytes": "1024"}) == {"remote.copy.lag.bytes": 1024}
    for bad, words in [({"remote.copy.lag.ms": "-2"}, "at least -1"),
                       ({"compression.gzip.level": "0"}, "at least 1"),
                       ({"max.decompressed.message.bytes": "0"}, "at least 1"),
                       ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
                       ({"leader.replication.throttled.replicas": "x"}, "must be the literal '*'"),
                       ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "(10) > max.compaction")]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            validate_topic_configs(bad)
    assert validate_topic_configs({"follower.replication.throttled.replicas": "*"})


def test_no_broker_default_matches_kafka():
    assert _NO_BROKER_DEFAULT == {KAFKA["topic_synonyms"][n] for n in KAFKA["topic_synonyms"]
                                  if KAFKA["broker"][KAFKA["topic_synonyms"][n]][1] is None}


def test_broker_describe_lists_every_kafka_broker_config(tmp_path):
    settings = BrokerSettings(BrokerConfig({"ssl.keystore.password": "secret", "num.io.threads": "4"}),
                              1, str(tmp_path))
    entries = {e.name: e for e in BrokerConfigs(settings).describe("1")}
    missing = sorted(set(KAFKA["broker"]) - set(entries))
    assert not missing, f"Kafka broker configs DescribeConfigs leaves out: {missing}"
    for name, (type_, default, _, _) in KAFKA["broker"].items():
        e = entries[name]
        assert e.type == _KAFKA_TYPES[type_], name
        assert e.sensitive == (type_ == "PASSWORD"), name
        if e.source == DEFAULT and not settings.config.is_builtin_default(name) and name != "broker.id":
            # Kafka's default, or the value this one-node broker runs with (BROKER_DEFAULTS)
            assert e.value == BROKER_DEFAULTS.get(name, None if default == "<none>" else default), name
    assert entries["offsets.topic.num.partitions"].value == "1"  # one node, one partition per internal topic
    assert entries["broker.id"].value == "1"
    assert entries["ssl.keystore.password"].value is None
    assert entries["num.io.threads"].value == "4"
    assert not BrokerConfigs(settings).describe("")  # the cluster default: only dynamic defaults


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("mvn") is None, reason="needs java and mvn")
def test_committed_table_matches_kafka_jars():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "kafka_configs.py"  # tests/tools shadows tools/
    spec = importlib.util.spec_from_file_location("kafka_configs_tool", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.TABLE.read_text() == tool.render(tool.dump()), \
        "broker/kafka_configs.json is stale: python -m tools.kafka_configs"
