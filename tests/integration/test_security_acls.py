"""ACLs (StandardAuthorizer semantics) and SCRAM credential admin through real clients and the wire."""
from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.add_raft_voter import AddRaftVoterRequest
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_acls import DescribeAclsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.remove_raft_voter import RemoveRaftVoterRequest
from protocol.messages.unregister_broker import UnregisterBrokerRequest
from protocol.messages.unregister_controller import UnregisterControllerRequest
from tests.support import PLAIN_JAAS, client_security, make_pki, security_settings, tls_wire, wire_plain_login
from tests.wire import WireClient


def all_topics(**fields) -> MetadataRequest:
    """A Metadata request for every topic (a null topic list; the constructor turns None into [])."""
    r = MetadataRequest(**fields)
    r.topics = None
    return r

CLIENT_PRINCIPAL = "User:CN=client-1,OU=qa,O=Example\\, Inc.,C=US"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    settings = security_settings(pki, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    })
    b = BrokerProcess(tmp_path_factory.mktemp("acl-broker"), config=settings)
    b.start()
    # the super user's AdminClient, one for the module (a destroyed handle fails its pending futures);
    # dropped before the broker stops, so it does not keep reconnecting to it for the rest of the run
    _ADMINS[id(b)] = AdminClient(client_security(b, "SASL_PLAINTEXT", pki, "PLAIN", "admin"))
    yield b
    del _ADMINS[id(b)]
    b.close()


_ADMINS: dict = {}  # written by the broker fixture, for its lifetime


def admin_client(b, pki) -> AdminClient:
    """The super user's AdminClient of the module's broker."""
    return _ADMINS[id(b)]


def new_topic(b, pki, prefix="t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin_client(b, pki).create_topics([NewTopic(name, 1)])[name].result(15)
    return name


def allow(b, pki, principal, op, topic, pattern=ResourcePatternType.LITERAL, rtype=ResourceType.TOPIC,
          permission=AclPermissionType.ALLOW):
    binding = AclBinding(rtype, topic, pattern, principal, "*", op, permission)
    admin_client(b, pki).create_acls([binding])[binding].result(15)
    return binding


def login(b, user="alice") -> WireClient:
    w = WireClient(b.address("SASL_PLAINTEXT"))
    assert wire_plain_login(w, user, f"{user}-secret").error_code == 0
    return w


def fetch_error(w, topic) -> int:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                           partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    return w.request(req, 12).responses[0].partitions[0].error_code


def produce_error(b, pki, topic, user="alice"):
    p = Producer({**client_security(b, "SASL_PLAINTEXT", pki, "PLAIN", user), "message.timeout.ms": 5000,
                  "enable.idempotence": False})
    got = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: got.append(err))
    p.flush(10)
    return got[0]


# ------------------------------------------------------------------ ACL admin through AdminClient
def test_acl_create_describe_delete_and_restart(broker, pki):
    admin = admin_client(broker, pki)
    lit = allow(broker, pki, "User:carol", AclOperation.READ, "orders")
    pre = allow(broker, pki, "User:carol", AclOperation.WRITE, "pay-", ResourcePatternType.PREFIXED)
    deny = allow(broker, pki, "User:carol", AclOperation.READ, "pay-secret", permission=AclPermissionType.DENY)
    flt = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:carol", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    assert set(admin.describe_acls(flt).result(15)) == {lit, pre, deny}
    match = AclBindingFilter(ResourceType.TOPIC, "pay-secret", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert set(admin.describe_acls(match).result(15)) == {pre, deny}  # the prefix and the literal apply
    broker.restart()
    admin = admin_client(broker, pki)
    assert set(admin.describe_acls(flt).result(15)) == {lit, pre, deny}  # persisted
    gone = AclBindingFilter(ResourceType.TOPIC, "pay-", ResourcePatternType.PREFIXED, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)
    assert admin.delete_acls([gone])[gone].result(15) == [pre]
    broker.restart()
    assert set(admin_client(broker, pki).describe_acls(flt).result(15)) == {lit, deny}


def test_invalid_acls_are_refused(broker):
    with login(broker, "admin") as w:
        bad = [CreateAclsRequest.AclCreation(resource_type=2, resource_name="x", resource_pattern_type=2,
                                             principal="User:a", host="*", operation=3, permission_type=3),
               CreateAclsRequest.AclCreation(resource_type=4, resource_name="other", resource_pattern_type=3,
                                             principal="User:a", host="*", operation=3, permission_type=3),
               CreateAclsRequest.AclCreation(resource_type=2, resource_name="x", resource_pattern_type=3,
                                             principal="nocolon", host="*", operation=3, permission_type=3)]
        r = w.request(CreateAclsRequest(creations=bad), 3)
        assert [x.error_code for x in r.results] == [Errors.INVALID_REQUEST] * 3
        assert r.results[1].error_message == "The only valid name for the CLUSTER resource is kafka-cluster"


def test_cidr_acl_hosts(broker, pki):
    """KIP-1276 (metadata.version 4.4-IV1, which this broker finalizes): an ACL's host may be a CIDR block
    (AclControlManager.validateHostPattern); a malformed one is INVALID_REQUEST; the client's address in
    the block is matched, one outside it is not."""
    topic = new_topic(broker, pki)

    def create(host):
        with login(broker, "admin") as w:
            r = w.request(CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
                resource_type=2, resource_name=topic, resource_pattern_type=3, principal="User:alice", host=host,
                operation=4, permission_type=3)]), 3)  # ALLOW WRITE
            return r.results[0].error_code, r.results[0].error_message

    code, message = create("10.0.0.0/33")
    assert code == Errors.INVALID_REQUEST and message.startswith("Invalid CIDR notation '10.0.0.0/33'")
    assert create("10.0.0.0/8") == (Errors.NONE, None)
    assert produce_error(broker, pki, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # 127.0.0.1 outside
    assert create("127.0.0.0/8") == (Errors.NONE, None)
    assert produce_error(broker, pki, topic) is None


def test_acl_apis_need_cluster_alter_and_describe(broker):
    with login(broker) as w:
        r = w.request(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                          principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        c = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=2, resource_name="x", resource_pattern_type=3, principal="User:alice", host="*",
            operation=2, permission_type=3)])
        assert w.request(c, 3).results[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        # the quorum-membership APIs need ALTER on the cluster too (ControllerApis)
        for req, version in ((UnregisterBrokerRequest(broker_id=7), 0),
                             (UnregisterControllerRequest(controller_id=7), 0),
                             (AddRaftVoterRequest(voter_id=7, voter_directory_id=b"\1" * 16, listeners=[]), 1),
                             (RemoveRaftVoterRequest(voter_id=7, voter_directory_id=b"\1" * 16), 0)):
            r = w.request(req, version)
            assert (r.error_code, r.error_message) == (Errors.CLUSTER_AUTHORIZATION_FAILED,
                                                       "Cluster authorization failed."), req


# ------------------------------------------------------------------ enforcement
def test_produce_needs_write_and_fetch_needs_read(broker, pki):
    topic = new_topic(broker, pki)
    assert produce_error(broker, pki, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(broker, pki, "User:alice", AclOperation.WRITE, topic)
    assert produce_error(broker, pki, topic) is None  # applied at once (the decision cache was dropped)
    with login(broker) as w:
        assert fetch_error(w, topic) == Errors.TOPIC_AUTHORIZATION_FAILED
    allow(broker, pki, "User:alice", AclOperation.READ, topic)
    with login(broker) as w:
        assert fetch_error(w, topic) == Errors.NONE
    deny = allow(broker, pki, "User:alice", AclOperation.READ, topic, permission=AclPermissionType.DENY)
    with login(broker) as w:
        assert fetch_error(w, topic) == Errors.TOPIC_AUTHORIZATION_FAILED  # DENY wins
        lo = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
        assert w.request(lo, 7).topics[0].partitions[0].error_code == Errors.NONE  # WRITE implies DESCRIBE
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.DENY)
    assert admin_client(broker, pki).delete_acls([flt])[flt].result(15) == [deny]
    with login(broker) as w:
        assert fetch_error(w, topic) == Errors.NONE


def test_prefixed_acls_and_super_users(broker, pki):
    prefix = f"team{uuid.uuid4().hex[:6]}-"
    topic = new_topic(broker, pki, prefix + "x")
    other = new_topic(broker, pki)
    allow(broker, pki, "User:bob", AclOperation.WRITE, prefix, ResourcePatternType.PREFIXED)
    assert produce_error(broker, pki, topic, "bob") is None
    assert produce_error(broker, pki, other, "bob").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(broker, pki, other, "admin") is None  # super user, no ACL needed
    with login(broker, "admin") as w:
        assert fetch_error(w, other) == Errors.NONE


def test_metadata_hides_undescribable_topics(broker, pki):
    seen = new_topic(broker, pki, "seen")
    hidden = new_topic(broker, pki, "hidden")
    allow(broker, pki, "User:alice", AclOperation.DESCRIBE, seen)
    with login(broker) as w:
        md = w.request(all_topics(include_topic_authorized_operations=True), 12)
        names = {t.name for t in md.topics}
        assert seen in names and hidden not in names
        ops = {t.name: t.topic_authorized_operations for t in md.topics}[seen]
        assert ops == 1 << 8  # DESCRIBE only
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=hidden),
                                               MetadataRequest.MetadataRequestTopic(name="no-such-topic")],
                                       allow_auto_topic_creation=True), 12)
        assert [t.error_code for t in md.topics] == [Errors.TOPIC_AUTHORIZATION_FAILED] * 2  # nothing disclosed
    with WireClient(broker.bootstrap) as w:  # PLAINTEXT: User:ANONYMOUS, no ACLs, sees nothing
        assert w.request(all_topics(), 12).topics == []
    admin = admin_client(broker, pki)
    assert {seen, hidden} <= set(admin.list_topics(timeout=10).topics)


def test_ssl_client_principal_is_the_certificate_subject(broker, pki):
    topic = new_topic(broker, pki, "mtls")
    allow(broker, pki, CLIENT_PRINCIPAL, AclOperation.READ, topic)
    with tls_wire(broker.address("SSL"), pki, client_cert=True) as w:
        md = w.request(all_topics(), 12)
        assert [t.name for t in md.topics] == [topic]
        assert fetch_error(w, topic) == Errors.NONE
        flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        assert [b.principal for b in admin_client(broker, pki).describe_acls(flt).result(10)] == [CLIENT_PRINCIPAL]


def test_other_apis_check_what_kafka_checks(broker, pki):
    topic = new_topic(broker, pki, "misc")
    with login(broker, "bob") as w:  # bob: no ACL on these
        r = w.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=f"new-{uuid.uuid4().hex[:6]}", num_partitions=1, replication_factor=1)], timeout_ms=5000), 7)
        assert r.topics[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
        r = w.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name=topic, configuration_keys=None)]), 4)
        assert r.results[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED
        r = w.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=4, resource_name="1", configuration_keys=None)]), 4)
        assert r.results[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        r = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["some-group"]), 4)
        assert r.coordinators[0].error_code == Errors.GROUP_AUTHORIZATION_FAILED
    # an idempotent producer needs IDEMPOTENT_WRITE on the CLUSTER or WRITE on some topic (KIP-679)
    with login(broker, "dave") as w:
        r = w.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 4)
        assert r.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    allow(broker, pki, "User:dave", AclOperation.IDEMPOTENT_WRITE, "kafka-cluster", rtype=ResourceType.BROKER)
    with login(broker, "dave") as w:
        r = w.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 4)
        assert r.error_code == Errors.NONE and r.producer_id >= 0


# ------------------------------------------------------------------ SCRAM credential admin
def test_scram_credentials_admin_applies_at_once_and_survives_restart(broker, pki):
    admin = admin_client(broker, pki)
    up = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw")
    assert admin.alter_user_scram_credentials([up])["carol"].result(15) is None

    def scram_ok(password):
        p = Producer({**client_security(broker, "SASL_SSL", pki, "SCRAM-SHA-256", "carol", password),
                      "error_cb": lambda e: None})
        return p.list_topics(timeout=5) is not None

    assert scram_ok("carol-pw")
    desc = admin.describe_user_scram_credentials(["carol"])["carol"].result(15)
    assert [(i.mechanism, i.iterations) for i in desc.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    with pytest.raises(Exception):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)
    broker.restart()
    admin = admin_client(broker, pki)
    assert scram_ok("carol-pw")
    with pytest.raises(Exception):
        scram_ok("wrong")
    d = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
    assert admin.alter_user_scram_credentials([d])["carol"].result(15) is None
    with pytest.raises(Exception):
        scram_ok("carol-pw")
    bad = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"pw")
    with pytest.raises(Exception, match="(?i)iterations"):
        admin.alter_user_scram_credentials([bad])["dave"].result(15)


def test_without_an_authorizer_acl_apis_say_security_disabled(sharebroker):
    with WireClient(sharebroker.bootstrap) as w:
        r = w.request(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                          principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)
        # Kafka's words (AclApis; CreateAcls and DeleteAcls say "No Authorizer is configured.")
        assert r.error_code == Errors.SECURITY_DISABLED
        assert r.error_message == "No Authorizer is configured on the broker"
    admin = AdminClient({"bootstrap.servers": sharebroker.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:a", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    with pytest.raises(Exception):
        admin.create_acls([binding])[binding].result(15)


# ------------------------------------------------------------------ operations APIs (issue 27)
def test_operations_apis_authorize_as_kafka(broker, pki):
    """Each answers its own authorization error without the ACL (CLUSTER DESCRIBE / ALTER, TOPIC
    DESCRIBE / ALTER_CONFIGS, as KafkaApis / ControllerApis) and serves the request with it."""
    from protocol.messages.alter_configs import AlterConfigsRequest as AC
    from protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest as APR
    from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest as ARL
    from protocol.messages.describe_log_dirs import DescribeLogDirsRequest as DLD
    from protocol.messages.describe_quorum import DescribeQuorumRequest as DQ
    from protocol.messages.describe_topic_partitions import DescribeTopicPartitionsRequest as DTP
    from protocol.messages.elect_leaders import ElectLeadersRequest as EL
    from protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest as LPR
    from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as OLE
    from protocol.messages.update_features import UpdateFeaturesRequest as UF

    topic = new_topic(broker, pki, "ops")
    denied = Errors.CLUSTER_AUTHORIZATION_FAILED

    def answers(w):
        ole = w.request(OLE(topics=[OLE.OffsetForLeaderTopic(topic=topic, partitions=[
            OLE.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]), 4)
        return {
            "DescribeLogDirs": w.request(DLD(topics=None), 4).error_code,
            "AlterReplicaLogDirs": w.request(ARL(dirs=[ARL.AlterReplicaLogDir(path=os.path.abspath(broker.data_dir),
                                                                              topics=[ARL.AlterReplicaLogDirTopic(
                                                                                  name=topic, partitions=[0])])]),
                                             2).results[0].partitions[0].error_code,
            "ElectLeaders": w.request(EL(topic_partitions=[EL.TopicPartitions(topic=topic, partitions=[0])]),
                                      2).error_code,
            "AlterPartitionReassignments": w.request(APR(topics=[APR.ReassignableTopic(name=topic, partitions=[
                APR.ReassignablePartition(partition_index=0, replicas=[1])])]), 1).error_code,
            "ListPartitionReassignments": w.request(LPR(topics=None), 0).error_code,
            "DescribeQuorum": w.request(DQ(topics=[DQ.TopicData(topic_name="__cluster_metadata", partitions=[
                DQ.PartitionData(partition_index=0)])]), 2).error_code,
            "UpdateFeatures": w.request(UF(feature_updates=[UF.FeatureUpdateKey(feature="share.version",
                                                                                max_version_level=2)]), 2).error_code,
            "OffsetForLeaderEpoch": ole.topics[0].partitions[0].error_code,
            "DescribeTopicPartitions": w.request(DTP(topics=[DTP.TopicRequest(name=topic)]), 0).topics[0].error_code,
            "AlterConfigs": w.request(AC(resources=[AC.AlterConfigsResource(resource_type=2, resource_name=topic,
                                                                            configs=[])]), 2).responses[0].error_code,
        }

    with login(broker, "bob") as w:
        assert answers(w) == {
            "DescribeLogDirs": denied, "AlterReplicaLogDirs": denied, "ElectLeaders": denied,
            "AlterPartitionReassignments": denied, "ListPartitionReassignments": denied, "DescribeQuorum": denied,
            "UpdateFeatures": denied, "OffsetForLeaderEpoch": Errors.TOPIC_AUTHORIZATION_FAILED,
            "DescribeTopicPartitions": Errors.TOPIC_AUTHORIZATION_FAILED,
            "AlterConfigs": Errors.TOPIC_AUTHORIZATION_FAILED}
    granted = [allow(broker, pki, "User:bob", op, "kafka-cluster", rtype=ResourceType.BROKER)
               for op in (AclOperation.DESCRIBE, AclOperation.ALTER)]
    granted += [allow(broker, pki, "User:bob", op, topic) for op in (AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS)]
    try:
        with login(broker, "bob") as w:
            got = answers(w)
        assert got == {k: 0 for k in got}, got
    finally:
        admin = admin_client(broker, pki)
        for b in granted:
            f = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                 b.permission_type)
            admin.delete_acls([f])[f].result(15)


def test_streams_group_heartbeat_authorizes_as_kafka(broker, pki):
    """KafkaApis.handleStreamsGroupHeartbeat: READ on the group, DESCRIBE on every topic the topology names,
    and internal topics created only with CREATE (else the MISSING_INTERNAL_TOPICS status names them)."""
    from protocol.messages.streams_group_heartbeat import StreamsGroupHeartbeatRequest as H
    source, app = new_topic(broker, pki, "src"), f"app-{uuid.uuid4().hex[:6]}"
    changelog = f"{app}-store-changelog"

    def join(w):
        return w.request(H(group_id=app, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, process_id="p",
                           active_tasks=[], standby_tasks=[], warmup_tasks=[], topology=H.Topology(
                               epoch=1, subtopologies=[H.Subtopology(subtopology_id="0", source_topics=[source],
                                                                     state_changelog_topics=[H.TopicInfo(
                                                                         name=changelog)])])), 1)

    with login(broker, "bob") as w:
        assert join(w).error_code == Errors.GROUP_AUTHORIZATION_FAILED
    allow(broker, pki, "User:bob", AclOperation.READ, app, rtype=ResourceType.GROUP)
    with login(broker, "bob") as w:
        assert join(w).error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    allow(broker, pki, "User:bob", AclOperation.DESCRIBE, source)
    allow(broker, pki, "User:bob", AclOperation.DESCRIBE, changelog)
    with login(broker, "bob") as w:
        r = join(w)
        assert r.error_code == 0
        assert [(s.status_code, s.status_detail) for s in r.status if s.status_code == 3] == [
            (3, f"Internal topics are missing: {changelog}; Unauthorized to CREATE on topics {changelog}.")]
    allow(broker, pki, "User:bob", AclOperation.CREATE, changelog)
    with login(broker, "bob") as w:
        r = w.request(H(group_id=app, member_id="m", member_epoch=r.member_epoch), 1)
        assert r.error_code == 0 and 3 not in [s.status_code for s in r.status]  # created now
        md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=changelog)],
                                       allow_auto_topic_creation=False), 12)
        assert (md.topics[0].error_code, len(md.topics[0].partitions)) == (0, 1)
