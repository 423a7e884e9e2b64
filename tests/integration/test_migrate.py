"""``sharebroker-migrate`` against a real 3-node Apache Kafka 4.4 KRaft cluster (``tests/kafka_ref``).

The cluster is started once for the module (replication factor 3 for the copied topics, bounded
heaps) and stopped at its end; each test has its own sharebroker as the source, so ``sync`` copies
only that test's topics. The command runs as the operator runs it (``python -m admin.migrate``), and
real clients (confluent-kafka's Producer, Consumer, ShareConsumer) check the result on the cluster.
"""
from __future__ import annotations

import os
import pty
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                  AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec, ResourcePatternType,
                                  ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from admin.client import AdminClient as WireAdmin
from admin.migrate import SOURCE_OFFSET_HEADER, client_quotas
from admin.share_groups import describe_group as describe_share_group
from broker.testing import BrokerProcess
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest as AlterQuotas
from tests.kafka_ref.launcher import KafkaRef
from tests.reference import kafka_cluster
from tests.support import create_topic, unique, until

pytestmark = pytest.mark.xdist_group("kafka-cluster")
CLUSTER_ENV = "SHAREBROKER_MIGRATE_CLUSTER"
# ACLs need an authorizer on both sides; the tests' clients (PLAINTEXT: User:ANONYMOUS) are super users
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def cluster():
    yield from kafka_cluster(CLUSTER_ENV, settings=AUTHORIZER, scram_listener=True)


@pytest.fixture
def source(tmp_path):
    with BrokerProcess(tmp_path / "source", config={"group.share.min.record.lock.duration.ms": "1000", **AUTHORIZER}) as b:
        yield b


def migrate(cmd: str, src: str, dst: str, *extra: str, check: bool = True, timeout: float = 120):
    p = subprocess.run([sys.executable, "-m", "admin.migrate", cmd, "--source", src, "--target", dst, *extra],
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"migrate {cmd} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def produce(bootstrap: str, topic: str, records, **conf) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for key, value in records:
        p.produce(topic, key=key, value=value)
    assert p.flush(30) == 0


def read_all(bootstrap: str, topic: str, partitions: int = 1) -> list:
    """Every record of ``topic`` on the cluster (read_committed), by partition and offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    ends = {tp.partition: f.result().offset for tp, f in admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}).items()}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, todo = [], {p for p, e in ends.items() if e > 0}
    try:
        def step():
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    out.append(m)
                    if m.offset() >= ends[m.partition()] - 1:
                        todo.discard(m.partition())
            return not todo
        until(step, 60, f"all records of {topic}")
    finally:
        c.close()
    return sorted(out, key=lambda m: (m.partition(), m.offset()))


def copied(bootstrap: str, topic: str, partitions: int) -> int:
    """Records of ``topic`` on the cluster so far (0 while it does not exist yet)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        return 0
    fs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)})
    try:
        return sum(f.result(30).offset for f in fs.values())
    except KafkaException as e:  # a topic just created: not yet known to, or led by, every broker (each a
        # retriable exception in Kafka's clients; librdkafka's retriable() does not say so for all of them)
        assert e.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.NOT_LEADER_FOR_PARTITION,
                                    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
                                    KafkaError.FENCED_LEADER_EPOCH) or e.args[0].retriable(), e
        return 0


def throttle_times(bootstrap: str, topic: str, client_id: str) -> list[float]:
    """The throttle times the cluster answered a producer with ``client_id`` that sent 40 KB at once."""
    times: list[float] = []
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 100,
                  "throttle_cb": lambda event: times.append(event.throttle_time)})
    for _ in range(40):
        p.produce(topic, value=b"z" * 1000)
    assert p.flush(30) == 0
    p.poll(0)
    return [t for t in times if t > 0]


def sasl_read(bootstrap: str, user: str, password: str, topic: str):
    """The first record's value of ``topic`` partition 0 read as ``user`` over SCRAM-SHA-256;
    "denied" when Metadata answers TOPIC_AUTHORIZATION_FAILED; None while the login fails (a
    user just created reaches every node of the cluster through its metadata log)."""
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password}
    try:
        md = AdminClient(conf).list_topics(topic, timeout=10).topics[topic]
    except KafkaException as e:
        assert e.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                                    KafkaError._TIMED_OUT, KafkaError._TRANSPORT), e
        return None
    if md.error is not None:
        assert md.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, md.error
        return "denied"
    c = Consumer({**conf, "group.id": unique("sasl"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])  # no committed offsets: the topic's READ is all it needs
    try:
        def first():
            m = c.poll(0.5)
            if m is not None and m.error() is not None:  # librdkafka looks up the group's coordinator
                assert m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED, m.error()  # even when assigned
                return None
            return m
        return until(first, 30, f"a record of {topic} for {user}").value()
    finally:
        c.close()


def source_offsets(msgs) -> list[int]:
    return [int(dict(m.headers())[SOURCE_OFFSET_HEADER]) for m in msgs]


def share_group_state(bootstrap: str, group: str) -> str:
    with WireAdmin(bootstrap) as client:
        return describe_share_group(client, group).state


def share_poll(c, timeout=0.5) -> list:
    return [m for m in (c.poll(timeout) or []) if m.error() is None]


# ----------------------------------------------------------------------------- groups
def test_share_group_and_consumer_group_move(cluster, source):
    src, dst = source.bootstrap, cluster.bootstrap
    queue, log = create_topic(src, 1), create_topic(src, 2)
    produce(src, queue, [(b"k%d" % i, b"v%d" % i) for i in range(30)])
    produce(src, log, [(b"%d" % i, b"c%d" % i) for i in range(40)])
    group, cgroup = unique("share"), unique("cons")
    admin = AdminClient({"bootstrap.servers": src})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.record.lock.duration.ms", "20000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)

    # half-consume: 0-9 and 15-19 accepted, 10-14 and the rest released, then some taken by a second
    # consumer and left in flight when it goes
    c = ShareConsumer({"bootstrap.servers": src, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([queue])
    accepted = set()
    want = set(range(10)) | set(range(15, 20))
    try:
        def step():
            for m in share_poll(c):
                ok = m.offset() in want
                c.acknowledge(m, AcknowledgeType.ACCEPT if ok else AcknowledgeType.RELEASE)
                accepted.update([m.offset()] if ok else [])
            return accepted == want
        until(step, 60, "the share group half-consumed")
        c.commit_sync()
    finally:
        c.close()
    inflight = ShareConsumer({"bootstrap.servers": src, "group.id": group, "share.acknowledgement.mode": "explicit"})
    inflight.subscribe([queue])
    try:
        taken = until(lambda: share_poll(inflight), 30, "records for the second consumer")
        assert {m.offset() for m in taken} <= set(range(10, 15)) | set(range(20, 30))
    finally:
        inflight.close()
    cons = Consumer({"bootstrap.servers": src, "group.id": cgroup, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    cons.commit(offsets=[TopicPartition(log, 0, 7), TopicPartition(log, 1, 12)], asynchronous=False)
    cons.close()

    until(lambda: share_group_state(src, group) == "Empty", 30, "the share group empty on the source")
    plan = migrate("plan", src, dst).stdout
    assert queue in plan and "create" in plan and group in plan

    out = migrate("sync", src, dst, "--replication-factor", "3").stdout
    assert "total: 70 records" in out, out
    md = AdminClient({"bootstrap.servers": dst}).list_topics(queue, timeout=15).topics[queue]
    assert all(len(p.replicas) == 3 for p in md.partitions.values())

    out = migrate("cutover", src, dst).stdout
    row = next(line for line in out.splitlines() if line.startswith(group))
    assert row.split()[3] == "5", out  # 15-19 acknowledged above the start offset 10: delivered once more

    # the share consumers, pointed at the cluster, get exactly 10-29: the unacknowledged + 5 counted
    got = []  # every delivery: a record delivered twice would show
    tc = ShareConsumer({"bootstrap.servers": dst, "group.id": group})
    tc.subscribe([queue])
    try:
        until(lambda: got.extend(m.value() for m in share_poll(tc)) or len(got) >= 20, 60,
              "20 records on the cluster")
        assert share_poll(tc, 2.0) == []
    finally:
        tc.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(10, 30))

    # the consumer group resumes at the translated offsets
    target_admin = AdminClient({"bootstrap.servers": dst})  # referenced until the result is in
    committed = target_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(cgroup)])[cgroup].result(15)
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == {0: 7, 1: 12}, out
    rc = Consumer({"bootstrap.servers": dst, "group.id": cgroup, "auto.offset.reset": "latest",
                   "enable.auto.commit": False})
    rc.subscribe([log])
    first = {}
    try:
        errors = []

        def first_records():
            m = rc.poll(0.5)
            if m is not None and m.error() is None:
                first.setdefault(m.partition(), m.offset())
            elif m is not None:
                errors.append(str(m.error()))
            return len(first) == 2
        try:
            until(first_records, 90, "records for the consumer group on the cluster")
        except AssertionError as e:
            raise AssertionError(f"{e}: errors {errors[-3:]}, assignment {rc.assignment()}, got {first}") from None
    finally:
        rc.close()
    assert first == {0: 7, 1: 12}

    assert migrate("verify", src, dst).returncode == 0


# ----------------------------------------------------------------------------- records
def test_compacted_and_transactional_topics_incremental_and_verify(cluster, source):
    src, dst = source.bootstrap, cluster.bootstrap
    compacted = create_topic(src, 1, cleanup_policy="compact")
    txn = create_topic(src, 1)
    produce(src, compacted, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(25)] + [(b"k4", None)])
    p = Producer({"bootstrap.servers": src, "transactional.id": unique("tx")})
    p.init_transactions(30)
    for committed, values in ((True, range(10)), (False, range(100, 105)), (True, range(10, 15))):
        p.begin_transaction()
        for i in values:
            p.produce(txn, key=b"t", value=b"%d" % i)
        assert p.flush(30) == 0  # on the log before the commit or abort marker
        p.commit_transaction(30) if committed else p.abort_transaction(30)

    out = migrate("sync", src, dst, "--replication-factor", "3").stdout
    copied = read_all(dst, compacted)
    assert [(m.key(), m.value()) for m in copied] == [(b"k0", b"v20"), (b"k1", b"v21"), (b"k2", b"v22"),
                                                     (b"k3", b"v23")], out  # the live records only
    assert [m.value() for m in read_all(dst, txn)] == [b"%d" % i for i in range(15)]

    # a second sync copies only what is new
    p.begin_transaction()
    for i in range(15, 22):
        p.produce(txn, key=b"t", value=b"%d" % i)
    p.commit_transaction(30)
    out = migrate("sync", src, dst).stdout
    assert f"{txn}: 7 records" in out and f"{compacted}: 0 records" in out, out
    msgs = read_all(dst, txn)
    assert [m.value() for m in msgs] == [b"%d" % i for i in range(22)]
    assert len(set(source_offsets(msgs))) == 22

    # ACLs move: the SCRAM user carol may read the transactional topic
    user = unique("carol")
    acl = AclBinding(ResourceType.TOPIC, txn, ResourcePatternType.LITERAL, f"User:{user}", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    source_admin = AdminClient({"bootstrap.servers": src})  # referenced until the result is in
    source_admin.create_acls([acl])[acl].result(15)
    # a consumer group's position on the transactional topic: source offsets count the markers and the
    # aborted records, target offsets do not (0-9, marker, 11-15 aborted, marker, 17-21 = values 10-14)
    cgroup = unique("cons")
    cons = Consumer({"bootstrap.servers": src, "group.id": cgroup})
    cons.commit(offsets=[TopicPartition(txn, 0, 18)], asynchronous=False)
    cons.close()
    client = unique("slow")  # a client quota moves too
    with WireAdmin(src) as w:
        w.request(AlterQuotas(entries=[AlterQuotas.EntryData(
            entity=[AlterQuotas.EntityData(entity_type="client-id", entity_name=client)],
            ops=[AlterQuotas.OpData(key="producer_byte_rate", value=2048.0)])]))
    # a SCRAM user is listed to be re-created
    scram = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"secret")
    source_admin.alter_user_scram_credentials([scram])[user].result(15)
    out = migrate("plan", src, dst).stdout  # plan names them, with what the protocol tells, and says why
    scram_part = out[out.index("SCRAM USERS"):]
    assert re.search(rf"^{user} +SCRAM-SHA-256: 4096 iterations$", scram_part, re.M), out
    assert "never the salt or keys" in scram_part and "re-create each user on the target" in scram_part, out
    out = migrate("cutover", src, dst).stdout
    assert f"SCRAM users to re-create on the target: {user} (SCRAM-SHA-256: 4096 iterations)" in out, out
    with WireAdmin(dst) as w:
        assert client_quotas(w)[(("client-id", client),)] == {
            "producer_byte_rate": 2048.0}
    target_admin = AdminClient({"bootstrap.servers": dst})  # referenced until the result is in
    # the quota applies on the cluster: 40 KB in one go from that client id is throttled, from another not
    scratch = unique("scratch")  # on the target only: verify compares the source's topics
    target_admin.create_topics([NewTopic(scratch, 1)])[scratch].result(30)
    assert throttle_times(dst, scratch, client) and not throttle_times(dst, scratch, unique("fast"))
    on_target = target_admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, txn, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(15)
    assert on_target == [acl]
    if cluster.scram_bootstrap:  # the ACL applies: carol, re-created as plan says, reads that topic only
        target_admin.alter_user_scram_credentials([scram])[user].result(15)
        assert until(lambda: sasl_read(cluster.scram_bootstrap, user, "secret", txn), 60,
                     f"{user} logged in on the cluster") == b"0"
        assert sasl_read(cluster.scram_bootstrap, user, "secret", compacted) == "denied"
    fut = target_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(cgroup, [TopicPartition(txn, 0)])])[cgroup]
    assert [tp.offset for tp in fut.result(15).topic_partitions] == [11]  # value b"11"

    assert migrate("verify", src, dst).returncode == 0
    produce(dst, txn, [(b"t", b"planted")])  # a difference on the target
    bad = migrate("verify", src, dst, check=False)
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout, bad.stdout + bad.stderr


def test_sync_killed_and_run_again_finishes_without_duplicates(cluster, source):
    src, dst = source.bootstrap, cluster.bootstrap
    topic = create_topic(src, 2)
    n = 6000
    produce(src, topic, [(b"%d" % i, b"x" * 100) for i in range(n)])
    proc = subprocess.Popen([sys.executable, "-m", "admin.migrate", "sync", "--source", src, "--target", dst,
                             "--chunk", "200", "--max-records-per-second", "1500"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until(lambda: copied(dst, topic, 2) >= 700, 90, "part of the topic copied")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert copied(dst, topic, 2) < n, "the sync finished before it was killed"
    migrate("sync", src, dst)
    msgs = read_all(dst, topic, 2)
    assert len(msgs) == n
    for part in range(2):
        offs = source_offsets([m for m in msgs if m.partition() == part])
        assert offs == list(range(len(offs)))  # each source record once, in order
    assert migrate("verify", src, dst).returncode == 0


PROGRESS = re.compile(r"(\S+): (\d+)/(\d+) records \((\d+)%\), (\d+) records/s, ([\d.]+) MB/s, lag (\d+), "
                      r"total (\d+) records$")


def progress_lines(lines: list[str]) -> dict[str, list[tuple[int, ...]]]:
    """Per topic, each progress line's (copied, to copy, percent, rate, lag, total)."""
    out: dict[str, list] = {}
    for line in lines:
        m = PROGRESS.search(line)
        if m:
            out.setdefault(m.group(1), []).append(tuple(int(m.group(i)) for i in (2, 3, 4, 5, 7, 8)))
    return out


def check_progress(rows, to_copy: int, before: int, limit: float) -> None:
    """Copied rises to at most ``to_copy``; with no producers running, copied + lag == to copy (the
    source's end does not move); the running total adds the topics before; the rate is bounded by
    ``--max-records-per-second`` (partitions are copied one after another) plus one pacing step."""
    assert rows, "no progress lines"
    copied = [r[0] for r in rows]
    assert copied == sorted(copied) and 0 < copied[-1] <= to_copy, rows
    for c, total, pct, rate, lag, running in rows:
        assert total == to_copy and c + lag == to_copy and running == before + c, rows
        assert pct == round(100 * c / to_copy) and 0 < rate <= limit * 1.5, rows


def test_sync_shows_progress_per_topic(cluster, source):
    src, dst = source.bootstrap, cluster.bootstrap
    big, small = create_topic(src, 2), create_topic(src, 1)
    produce(src, big, [(b"%d" % i, b"p" * 100) for i in range(2000)])
    produce(src, small, [(b"%d" % i, b"q" * 100) for i in range(600)])
    pace = ["--chunk", "200", "--max-records-per-second", "1000", "--progress-interval", "0.2"]

    # not a terminal (a pipe, a log): plain lines every --progress-interval seconds
    out = migrate("sync", src, dst, *pace).stdout
    rows = progress_lines([line for line in out.splitlines() if line.startswith("progress ")])
    assert sorted(rows) == sorted([big, small]), out
    assert len(rows[big]) >= 3, out  # 2000 records at most 1000/s: 2 s or more
    first, second = (big, small) if out.index(big + ":") < out.index(small + ":") else (small, big)
    n = {big: 2000, small: 600}
    check_progress(rows[first], n[first], 0, 1000)
    check_progress(rows[second], n[second], n[first], 1000)
    assert f"{big}: 2000 records" in out and f"{small}: 600 records" in out and "total: 2600 records" in out, out

    # a terminal: one live line per topic, rewritten in place, with a bar; then the topic's result
    produce(src, small, [(b"%d" % i, b"r" * 100) for i in range(1500)])
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "admin.migrate", "sync", "--source", src, "--target", dst, *pace],
                            stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(slave)
    raw = b""
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command ended and closed its side
                break
            if not data:
                break
            raw += data
        assert proc.wait(60) == 0, raw
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = raw.decode().replace("\r\n", "\n")  # the terminal's ONLCR
    lines = text.split("\n")
    live = next(line for line in lines if small in line)  # the small topic's one line
    updates = [u for u in live.split("\r\x1b[K") if u]
    assert len(updates) >= 4 and updates[-1].startswith(f"{small}: 1500 records, "), updates
    bars = updates[:-1]
    assert all(re.match(r"\[[#.]{24}\] ", u) for u in bars), bars
    check_progress(list(progress_lines(bars).values())[0], 1500, 0, 1000)
    assert bars[-1].count("#") > bars[0].count("#")
    assert f"{big}: 0 records" in text and "total: 1500 records" in text and "progress " not in text, text


# ----------------------------------------------------------------------------- the documented move
def readme_steps() -> list[list[str]]:
    """The ``sharebroker-migrate`` lines of docs/migration.md's example, comments off."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()
    block = re.search(r"^# Moving to an Apache Kafka cluster.*?```sh\n(.*?)```", text, re.S | re.M).group(1)
    return [shlex.split(line.split("#")[0]) for line in block.splitlines() if line.startswith("sharebroker-migrate")]


def test_readme_move_runs_as_written(cluster, source):
    src, dst = source.bootstrap, cluster.bootstrap
    steps = readme_steps()
    assert [s[1] for s in steps] == ["plan", "sync", "sync", "cutover", "verify"]
    topic = create_topic(src, 2)
    group = unique("share")
    admin = AdminClient({"bootstrap.servers": src})  # referenced until the result is in
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)
    produce(src, topic, [(b"%d" % i, b"a%d" % i) for i in range(40)])
    c = ShareConsumer({"bootstrap.servers": src, "group.id": group})  # implicit acknowledgement
    c.subscribe([topic])
    seen = set()

    def run(step):
        argv = [sys.executable, "-m", "admin.migrate", *step[1:]]
        argv = [dst if a == "$T" else src if a == "$S" else a for a in argv]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"{step}: {p.stdout}\n{p.stderr}"
        return p.stdout

    try:
        until(lambda: seen.update(m.value() for m in share_poll(c)) or len(seen) >= 10, 30, "records consumed")
        run(steps[0])
        run(steps[1])  # while the consumer runs and producers write
        produce(src, topic, [(b"%d" % i, b"b%d" % i) for i in range(10)])
        c.poll(0.5)  # acknowledges what it had (implicit mode) before leaving
    finally:
        c.close()
    until(lambda: share_group_state(src, group) == "Empty", 30, "the share group empty on the source")
    for step in steps[2:]:
        out = run(step)
    assert "verify: source and target match" in out
    tc = ShareConsumer({"bootstrap.servers": dst, "group.id": group})
    tc.subscribe([topic])
    got = set()
    try:
        until(lambda: got.update(m.value() for m in share_poll(tc)) or len(got | seen) >= 50, 60,
              "the rest of the records on the cluster")
    finally:
        tc.close()
    assert len(got | seen) == 50  # nothing unacknowledged was skipped


# ----------------------------------------------------------------------------- a cluster node goes
def test_sync_completes_while_a_cluster_broker_is_stopped(cluster, source):
    """Last in the module: it leaves one of the three nodes stopped (the module's teardown stops the rest)."""
    if not isinstance(cluster, KafkaRef):
        pytest.skip("needs the module's own cluster (not SHAREBROKER_MIGRATE_CLUSTER)")
    src, dst = source.bootstrap, cluster.bootstrap
    topic = create_topic(src, 3)
    n = 6000
    produce(src, topic, [(b"%d" % i, b"y" * 100) for i in range(n)])
    proc = subprocess.Popen([sys.executable, "-m", "admin.migrate", "sync", "--source", src, "--target", dst,
                             "--replication-factor", "3", "--chunk", "200", "--max-records-per-second", "1500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: copied(dst, topic, 3) >= 500 or proc.poll() is not None, 90, "part of the topic copied")
        assert proc.poll() is None, "the sync finished before a broker was stopped"
        cluster.nodes[0].stop()  # SIGTERM: a controlled shutdown, leaders move to the other two
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, out + err
    msgs = read_all(dst, topic, 3)
    assert len(msgs) == n
    for part in range(3):
        offs = source_offsets([m for m in msgs if m.partition() == part])
        assert offs == list(range(len(offs)))
