"""Kafka 4.4's own command-line tools (from the Maven-resolved ``kafka-tools`` 4.4.0 the reference
launcher uses, ``tests/kafka_ref``) against sharebroker, for the operations APIs of issue 27:
``kafka-log-dirs`` (DescribeLogDirs), ``kafka-leader-election`` (ElectLeaders),
``kafka-reassign-partitions --list`` (ListPartitionReassignments), ``kafka-features describe``
(ApiVersions' features), ``kafka-metadata-quorum describe`` (DescribeQuorum), ``add-controller`` /
``remove-controller`` (AddRaftVoter / RemoveRaftVoter), ``kafka-cluster unregister`` /
``unregister-controller`` (UnregisterBroker / UnregisterController) and ``kafka-topics
--describe`` (DescribeTopicPartitions), and the Java consumer of ``kafka-console-consumer`` validating its
committed position with OffsetForLeaderEpoch.  Each tool is a JVM start (5-10 s here).  Skipped where
Java or Maven is missing, as the reference-Kafka tests are.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from confluent_kafka import Producer

from broker.testing import BrokerProcess
from tests.kafka_ref.launcher import classpath
from tests.reference import skip_without_kafka


@pytest.fixture(scope="module")
def tools_cp():
    skip_without_kafka()
    return classpath()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("ops-tools"), config={"sharebroker.metrics.listener": "127.0.0.1:0"})
    b.start()
    admin_topic(b.bootstrap, "tools-t", 2)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce("tools-t", value=b"v" * 200, partition=1)
    assert p.flush(15) == 0
    yield b
    b.stop()


def admin_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its future is done
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def kafka_tool(cp: str, main: str, *args: str, returncode: int = 0) -> str:
    """The tool's stdout (its stderr too when it is expected to fail: ``returncode`` != 0)."""
    r = subprocess.run(["java", "-Xmx256m", "-cp", cp, f"org.apache.kafka.tools.{main}", *args],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == returncode, f"{main} exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout if returncode == 0 else r.stdout + r.stderr


def test_kafka_log_dirs(tools_cp, broker):
    out = kafka_tool(tools_cp, "LogDirsCommand", "--bootstrap-server", broker.bootstrap, "--describe",
                     "--topic-list", "tools-t")
    doc = json.loads(out.strip().splitlines()[-1])
    (b,) = doc["brokers"]
    (d,) = b["logDirs"]
    assert b["broker"] == 1 and d["logDir"] == os.path.abspath(broker.data_dir) and d["error"] is None
    sizes = {p["partition"]: (p["size"], p["offsetLag"], p["isFuture"]) for p in d["partitions"]}
    seg_dir = os.path.join(broker.data_dir, "tools-t-1")
    on_disk = sum(os.path.getsize(os.path.join(seg_dir, f)) for f in os.listdir(seg_dir) if f.endswith(".log"))
    assert sizes == {"tools-t-0": (0, 0, False), "tools-t-1": (on_disk, 0, False)} and on_disk > 2000


def test_kafka_leader_election(tools_cp, broker):
    out = kafka_tool(tools_cp, "LeaderElectionCommand", "--bootstrap-server", broker.bootstrap,
                     "--election-type", "preferred", "--topic", "tools-t", "--partition", "0")
    assert "Valid replica already elected for partitions tools-t-0" in out


def test_kafka_reassign_partitions_list(tools_cp, broker):
    out = kafka_tool(tools_cp, "reassign.ReassignPartitionsCommand", "--bootstrap-server", broker.bootstrap, "--list")
    assert "No partition reassignments found." in out


def test_kafka_features_describe(tools_cp, broker):
    out = kafka_tool(tools_cp, "FeatureCommand", "--bootstrap-server", broker.bootstrap, "describe")
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("Feature:")}
    assert "FinalizedVersionLevel: 2" in rows["share.version"] and "FinalizedVersionLevel: 1" in rows["group.version"]
    assert "FinalizedVersionLevel: 4.4-IV2" in rows["metadata.version"]
    assert "FinalizedVersionLevel: 1" in rows["eligible.leader.replicas.version"]


def test_kafka_configs_describe_broker_all(tools_cp, broker):
    """Issue 35 item 2: ``kafka-configs --describe --entity-type brokers --entity-name 1 --all`` lists every
    broker config Kafka 4.4 defines (tools look keys up by name), a password hidden as Kafka hides it."""
    from broker.configs import kafka_configs

    out = kafka_tool(tools_cp, "ConfigCommand", "--bootstrap-server", broker.bootstrap, "--describe",
                     "--entity-type", "brokers", "--entity-name", "1", "--all")
    listed = {line.strip().split("=", 1)[0] for line in out.splitlines()[1:] if "=" in line}
    assert not set(kafka_configs()["broker"]) - listed
    assert "  queued.max.request.bytes=-1 sensitive=false synonyms={DEFAULT_CONFIG:queued.max.request.bytes=-1}" \
        in out.splitlines()
    assert any(line.startswith("  ssl.keystore.password=null sensitive=true") for line in out.splitlines())


def test_kafka_metadata_quorum_describe(tools_cp, broker):
    status = kafka_tool(tools_cp, "MetadataQuorumCommand", "--bootstrap-server", broker.bootstrap, "describe", "--status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["LeaderId"].strip() == "1" and fields["MaxFollowerLag"].strip() == "0"
    assert f"PLAINTEXT://{broker.bootstrap}" in fields["CurrentVoters"]
    replication = kafka_tool(tools_cp, "MetadataQuorumCommand", "--bootstrap-server", broker.bootstrap, "describe",
                             "--replication")
    (row,) = [line.split() for line in replication.splitlines()[1:] if line.strip()]
    assert row[0] == "1" and row[3] == "0" and row[-1] == "Leader"


def test_kafka_cluster_unregister(tools_cp, broker):
    """``kafka-cluster.sh unregister`` / ``unregister-controller`` get the controller's answers: no such
    broker; this node refused; no such controller (metadata.version 4.4-IV2)."""
    bs = ("--bootstrap-server", broker.bootstrap)
    assert "Broker ID 7 is not currently registered" in kafka_tool(tools_cp, "ClusterTool", "unregister", *bs,
                                                                   "--id", "7", returncode=1)
    assert "Broker cannot unregister itself while it is active." in kafka_tool(
        tools_cp, "ClusterTool", "unregister", *bs, "--id", "1", returncode=1)
    assert "Controller ID 3 is not currently registered." in kafka_tool(
        tools_cp, "ClusterTool", "unregister-controller", *bs, "--id", "3", returncode=1)
    assert "Controller cannot unregister itself while it is active." in kafka_tool(
        tools_cp, "ClusterTool", "unregister-controller", *bs, "--id", "1", returncode=1)


def test_kafka_metadata_quorum_remove_controller(tools_cp, broker):
    """The last voter is never removed (VoterSet.removeVoter): the tool's --unregister advice follows."""
    out = kafka_tool(tools_cp, "MetadataQuorumCommand", "--bootstrap-server", broker.bootstrap, "remove-controller",
                     "--controller-id", "1", "--controller-directory-id", "AQIDBAUGBwgJCgsMDQ4PEA", "--unregister",
                     returncode=1)
    assert ("Failed to remove KRaft voter 1: Cannot remove voter ReplicaKey(id=1, directoryId=AQIDBAUGBwgJCgsMDQ4PEA) "
            "from the set of voters [ReplicaKey(id=1, directoryId=<undefined>)]. To unregister the controller from "
            "the cluster, run `kafka-cluster.sh unregister-controller --id 1`.") in out


def test_kafka_metadata_quorum_add_controller(tools_cp, broker, tmp_path):
    """A new controller, configured and formatted as the tool needs (its meta.properties' directory id), is
    refused: a single node has no metadata log to replicate to it."""
    meta = tmp_path / "metadata"
    meta.mkdir()
    (meta / "meta.properties").write_text(f"version=1\nnode.id=2\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n"
                                          "directory.id=AQIDBAUGBwgJCgsMDQ4PEA\n")
    config = tmp_path / "controller.properties"
    config.write_text(f"process.roles=controller\nnode.id=2\ncontroller.listener.names=CONTROLLER\n"
                      f"listeners=CONTROLLER://127.0.0.1:19093\nmetadata.log.dir={meta}\n")
    out = kafka_tool(tools_cp, "MetadataQuorumCommand", "--bootstrap-server", broker.bootstrap, "--command-config",
                     str(config), "add-controller", returncode=1)
    assert "UnsupportedVersionException: Cluster doesn't support adding voter ReplicaKey(id=2, " \
           "directoryId=AQIDBAUGBwgJCgsMDQ4PEA): sharebroker is a single node" in out


def requests_served(b: BrokerProcess, api: str) -> int:
    """How many ``api`` requests the broker has handled (its /metrics)."""
    import urllib.request

    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    rows = [line for line in text.splitlines()
            if line.startswith(f'kafka_network_requestmetrics_requests_total{{request="{api}"}}')]
    return int(float(rows[0].split()[-1])) if rows else 0


def test_kafka_topics_describe(tools_cp, broker):
    before = requests_served(broker, "DescribeTopicPartitions")
    out = kafka_tool(tools_cp, "TopicCommand", "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "tools-t")
    parts = [line.split("\t") for line in out.splitlines() if "Partition: " in line]
    assert [[f.strip() for f in p if f.strip()][1:5] for p in parts] == [
        ["Partition: 0", "Leader: 1", "Replicas: 1", "Isr: 1"], ["Partition: 1", "Leader: 1", "Replicas: 1", "Isr: 1"]]
    assert requests_served(broker, "DescribeTopicPartitions") > before  # Java's Admin.describeTopics asked with it


def test_java_consumer_validates_its_committed_position(tools_cp, tmp_path):
    """Kafka 4.4's Java consumer (``kafka-console-consumer``) resuming from an offset committed with
    leader epoch 0 validates it with OffsetForLeaderEpoch (KIP-320), which it skips on a broker that
    does not serve v3+, and goes on from exactly there."""
    b = BrokerProcess(tmp_path / "java-consumer", config={"sharebroker.metrics.listener": "127.0.0.1:0"})
    b.start()
    try:
        admin_topic(b.bootstrap, "jc", 1)
        p = Producer({"bootstrap.servers": b.bootstrap})

        def produce(values):
            for i in values:
                p.produce("jc", value=b"m%d" % i)
            assert p.flush(15) == 0

        def consume(n: int) -> list[str]:
            r = subprocess.run(["java", "-Xmx256m", "-cp", tools_cp, "org.apache.kafka.tools.consumer.ConsoleConsumer",
                                "--bootstrap-server", b.bootstrap, "--topic", "jc", "--group", "jg", "--from-beginning",
                                "--max-messages", str(n), "--timeout-ms", "30000"],
                               capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stderr
            return r.stdout.split()

        produce(range(10))
        assert consume(10) == [f"m{i}" for i in range(10)]  # commits offset 10 with leader epoch 0
        assert requests_served(b, "OffsetForLeaderEpoch") == 0
        produce(range(10, 15))
        assert consume(5) == [f"m{i}" for i in range(10, 15)]
        assert requests_served(b, "OffsetForLeaderEpoch") >= 1
    finally:
        b.stop()
