"""Bad input over raw sockets: the broker closes the offending connection (or answers with an
error), stays up, keeps serving other connections and real clients, and never logs a Python
traceback for something a client did.

Kafka's rules (see broker/server.py): a frame outside 0..socket.request.max.bytes, an unknown
API key, an unserved version or a body that does not parse closes the connection; ApiVersions
at an unserved version gets a v0 UNSUPPORTED_VERSION response listing the served ranges.
"""
from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from protocol.messages import (create_topics as CT, delete_records as DR, delete_topics as DT, describe_configs as DC,
                               fetch as F, find_coordinator as FC, incremental_alter_configs as IAC,
                               init_producer_id as IP, list_offsets as LO, metadata as M, produce as P)
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.streams_group_heartbeat import StreamsGroupHeartbeatRequest as SGH
from protocol.messages.request_header import RequestHeader
from protocol.records import build_batch, crc32c

MAX_REQUEST = 102400  # socket.request.max.bytes for this module's broker
INTACT = "intact"
INTACT_RECORDS = [(b"key-%03d" % i, b"value-%03d-" % i * 5) for i in range(200)]
PING_CORR = 0x7FFF0001
PING = RequestHeader(request_api_key=18, request_api_version=0, correlation_id=PING_CORR,
                     client_id="ping").encode(1)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def encode(api_key: int, version: int, req, corr: int = 1, client_id: str | None = "bad-input") -> bytes:
    flexible = req.FLEXIBLE_VERSION is not None and version >= req.FLEXIBLE_VERSION
    head = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=corr,
                         client_id=client_id).encode(2 if flexible else 1)
    return head + req.encode(version)


def header_only(api_key: int, version: int, corr: int = 1) -> bytes:
    """A v1 request header with no body."""
    return RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=corr,
                         client_id="bad-input").encode(1)


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("bad-input"),
                      config={"socket.request.max.bytes": MAX_REQUEST, "num.partitions": 1})
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for name, parts in ((INTACT, 2), ("fz", 1), ("fz2", 1), ("canary", 1)):
        admin.create_topics([NewTopic(name, parts, 1)])[name].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i, (k, v) in enumerate(INTACT_RECORDS):
        p.produce(INTACT, key=k, value=v, partition=i % 2)
    assert p.flush(15) == 0
    yield b
    alive = b.proc is not None and b.proc.poll() is None
    b.stop()
    assert alive, "the broker died:\n" + "\n".join(b.log_lines[-40:])


def connect(broker, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(s: socket.socket) -> bytes | None:
    head = recv_exact(s, 4)
    if head is None:
        return None
    return recv_exact(s, struct.unpack(">i", head)[0])


def assert_closed(s: socket.socket, what: str) -> None:
    """The broker must close the connection without answering."""
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        data = b""
    except socket.timeout:
        pytest.fail(f"{what}: the broker neither answered nor closed the connection")
    assert data == b"", f"{what}: expected the connection to be closed, got {data[:40]!r}"


def closed_or_answered(s: socket.socket) -> str:
    """After a request and a PING (ApiVersions v0): 'closed' or 'answered' (the PING came back)."""
    while True:
        f = recv_frame(s)
        if f is None:
            return "closed"
        if struct.unpack_from(">i", f)[0] == PING_CORR:
            return "answered"


def send_cases(broker, cases) -> dict[str, int]:
    """Send each payload followed by a PING, reconnecting whenever the broker closes; count outcomes."""
    outcomes = {"closed": 0, "answered": 0}
    s = None
    try:
        for payload in cases:
            s = s or connect(broker, timeout=15)
            s.sendall(frame(payload) + frame(PING))
            outcome = closed_or_answered(s)
            outcomes[outcome] += 1
            if outcome == "closed":
                s.close()
                s = None
    finally:
        if s is not None:
            s.close()
    return outcomes


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 15.0) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bad-input-reader", "enable.auto.commit": False,
                  "auto.offset.reset": "error"})
    out = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


def assert_healthy(broker, *, real_clients: bool = True) -> None:
    """The process is alive, a new connection is served, real clients work, old data is intact."""
    assert broker.proc.poll() is None, "the broker process died:\n" + "\n".join(broker.log_lines[-30:])
    with connect(broker) as s:
        s.sendall(frame(encode(18, 3, ApiVersionsRequest(client_software_name="it", client_software_version="1"),
                               corr=11)))
        f = recv_frame(s)
        assert f is not None and struct.unpack_from(">i", f)[0] == 11
        resp = ApiVersionsResponse.decode(f[4:], 3)
        assert resp.error_code == 0 and {k.api_key for k in resp.api_keys} >= {0, 1, 3, 18}
        s.sendall(frame(encode(3, 12, M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name=INTACT)],
                                                        allow_auto_topic_creation=False), corr=12)))
        f = recv_frame(s)
        resp = M.MetadataResponse.decode(f[5:], 12)
        assert [(t.name, t.error_code, len(t.partitions)) for t in resp.topics] == [(INTACT, 0, 2)]
    if not real_clients:
        return
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True})
    acks = []
    p.produce("canary", value=b"alive", on_delivery=lambda err, msg: acks.append(err))
    assert p.flush(10) == 0 and acks == [None], acks
    msgs = read_all(broker.bootstrap, INTACT, 2, len(INTACT_RECORDS))
    got = sorted((m.key(), m.value()) for m in msgs)
    assert got == sorted(INTACT_RECORDS), "previously produced data changed"
    assert sorted((m.partition(), m.offset()) for m in msgs) == sorted(
        (p, o) for p in (0, 1) for o in range(len(INTACT_RECORDS) // 2))


# ----------------------------------------------------------------------------- framing
@pytest.mark.parametrize("size", [MAX_REQUEST + 1, 2**31 - 1, -1, -(2**31), -4])
def test_frame_size_outside_limits_closes_connection(broker, size):
    with connect(broker) as s:
        s.sendall(struct.pack(">i", size))  # no body needed: the size alone is refused
        assert_closed(s, f"size prefix {size}")
    assert_healthy(broker, real_clients=size == -1)


def test_frame_at_the_size_limit_is_read(broker):
    """A frame of exactly socket.request.max.bytes is accepted (and answered: it is a valid request)."""
    req = M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name=INTACT)],
                            allow_auto_topic_creation=False)
    # pad with an unknown tagged field of the request header up to exactly the limit
    head = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=5, client_id="big")
    pad = MAX_REQUEST
    while True:
        head._unknown_tagged_fields = [(99, b"\0" * pad)]
        payload = head.encode(2) + req.encode(12)
        if len(payload) == MAX_REQUEST:
            break
        pad -= len(payload) - MAX_REQUEST if len(payload) > MAX_REQUEST else -1
    assert len(payload) == MAX_REQUEST
    with connect(broker) as s:
        s.sendall(frame(payload))
        f = recv_frame(s)
        assert f is not None and struct.unpack_from(">i", f)[0] == 5
    assert_healthy(broker, real_clients=False)


@pytest.mark.parametrize("size", range(0, 8))
def test_frame_too_short_for_a_header_closes_connection(broker, size):
    with connect(broker) as s:
        s.sendall(frame(header_only(3, 12)[:size]))
        assert_closed(s, f"{size}-byte frame")
    assert_healthy(broker, real_clients=False)


def test_random_bytes_streams(broker):
    rng = random.Random(20240601)
    for i in range(40):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
        with connect(broker, timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)  # EOF: whatever the broker made of it, it must end the connection
            while True:
                try:
                    if not s.recv(65536):
                        break
                except ConnectionResetError:
                    break
    assert_healthy(broker)


def test_random_frames(broker):
    """Well-framed random payloads: each is answered or its connection closed; nothing else."""
    rng = random.Random(7)

    def payloads():
        for i in range(300):
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(8, 400)))
            if i % 3 == 0:  # a served API key, so the body decoders see random bytes too
                payload = struct.pack(">hh", rng.choice([0, 1, 2, 3, 19, 20, 32, 44]), rng.randrange(0, 13)) \
                    + payload[4:]
            yield payload

    outcomes = send_cases(broker, payloads())
    print("random frames:", outcomes)
    assert outcomes["closed"] > 0
    assert_healthy(broker)


# ----------------------------------------------------------------------------- headers and versions
@pytest.mark.parametrize("api_key", [999, 63, 127, 32767, -1, 4, 7])
def test_unknown_api_key_closes_connection(broker, api_key):
    with connect(broker) as s:
        s.sendall(frame(header_only(api_key, 0) + b"\0" * 16))
        assert_closed(s, f"API key {api_key}")
    assert_healthy(broker, real_clients=api_key == 999)


@pytest.mark.parametrize("api_key, version", [(3, 99), (3, -1), (0, 2), (0, 99), (1, 3), (19, 1), (60, 3)])
def test_unsupported_version_closes_connection(broker, api_key, version):
    with connect(broker) as s:
        s.sendall(frame(header_only(api_key, version) + b"\0" * 16))
        assert_closed(s, f"API {api_key} v{version}")
    assert_healthy(broker, real_clients=(api_key, version) == (3, 99))


@pytest.mark.parametrize("version", [99, 6, 32767])
def test_api_versions_too_new_gets_v0_unsupported_version(broker, version):
    with connect(broker) as s:
        s.sendall(frame(encode(18, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1"),
                               corr=42)))
        served = {k.api_key: (k.min_version, k.max_version)
                  for k in ApiVersionsResponse.decode(recv_frame(s)[4:], 3).api_keys}
        # the body of a version we do not know cannot be parsed: send a v3-shaped one
        head = RequestHeader(request_api_key=18, request_api_version=version, correlation_id=43,
                             client_id="too-new").encode(2)
        s.sendall(frame(head + ApiVersionsRequest(client_software_name="x", client_software_version="1").encode(3)))
        f = recv_frame(s)
        assert f is not None, "connection closed instead of an UNSUPPORTED_VERSION response"
        assert struct.unpack_from(">i", f)[0] == 43
        resp = ApiVersionsResponse.decode(f[4:], 0)  # v0 body, response header v0
        assert resp.error_code == 35  # UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges == {18: served[18]} and served[18] == (0, 5)  # only its own range, as Kafka
        # the connection stays usable: the client retries at a version we serve
        s.sendall(frame(encode(18, 0, ApiVersionsRequest(), corr=44)))
        f = recv_frame(s)
        assert f is not None and struct.unpack_from(">i", f)[0] == 44
        assert ApiVersionsResponse.decode(f[4:], 0).error_code == 0
    assert_healthy(broker, real_clients=version == 99)


def test_header_client_id_longer_than_frame_closes_connection(broker):
    head = struct.pack(">hhih", 3, 1, 9, 5000) + b"abc"  # client id claims 5000 bytes
    with connect(broker) as s:
        s.sendall(frame(head + struct.pack(">i", -1)))
        assert_closed(s, "client id longer than the frame")
    assert_healthy(broker, real_clients=False)


# ----------------------------------------------------------------------------- truncated bodies
def _valid_requests() -> list[tuple[str, int, int, object]]:
    batch = build_batch([(b"k", b"v" * 20, [("h", b"x")])])
    return [
        ("metadata", 3, 12, M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name=INTACT)],
                                              allow_auto_topic_creation=False)),
        ("metadata-v1", 3, 1, M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name=INTACT)])),
        ("produce", 0, 9, P.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[P.ProduceRequest.TopicProduceData(
            name="fz", partition_data=[P.ProduceRequest.PartitionProduceData(index=0, records=batch)])])),
        ("produce-v3", 0, 3, P.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[P.ProduceRequest.TopicProduceData(
            name="fz", partition_data=[P.ProduceRequest.PartitionProduceData(index=0, records=batch)])])),
        ("fetch", 1, 12, F.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=100000, session_epoch=-1, topics=[
            F.FetchRequest.FetchTopic(topic=INTACT, partitions=[F.FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=100000)])])),
        ("create-topics", 19, 7, CT.CreateTopicsRequest(topics=[CT.CreateTopicsRequest.CreatableTopic(
            name="never-created", num_partitions=1, replication_factor=1, configs=[
                CT.CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="1000")])],
            validate_only=True)),
        ("describe-configs", 32, 4, DC.DescribeConfigsRequest(resources=[
            DC.DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=INTACT,
                                                              configuration_keys=["retention.ms"])])),
        ("list-offsets", 2, 7, LO.ListOffsetsRequest(replica_id=-1, topics=[LO.ListOffsetsRequest.ListOffsetsTopic(
            name=INTACT, partitions=[LO.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-2)])])),
    ]


@pytest.mark.parametrize("name, api_key, version, req", [pytest.param(*r, id=r[0]) for r in _valid_requests()])
def test_truncated_request_bodies_close_the_connection(broker, name, api_key, version, req):
    payload = encode(api_key, version, req, corr=77)
    with connect(broker) as s:  # the full request is answered...
        s.sendall(frame(payload))
        f = recv_frame(s)
        assert f is not None and struct.unpack_from(">i", f)[0] == 77
    for cut in range(len(payload) - 1, 7, -1):  # ...every proper prefix (the frame says how long it is) is not
        with connect(broker) as s:
            s.sendall(frame(payload[:cut]))
            assert_closed(s, f"{name} cut to {cut} of {len(payload)} bytes")
    assert "never-created" not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    assert_healthy(broker, real_clients=name == "produce")


def test_incomplete_frame_then_disconnect(broker):
    """A size prefix promising more than is ever sent: the broker waits, other clients are served."""
    payload = encode(3, 12, M.MetadataRequest(topics=None), corr=3)
    hanging = [connect(broker) for _ in range(5)]
    for i, s in enumerate(hanging):
        s.sendall(struct.pack(">i", len(payload)) + payload[:i * 5])
    assert_healthy(broker)  # served while five connections hold half a frame
    for s in hanging:
        s.close()
    assert_healthy(broker, real_clients=False)


# ----------------------------------------------------------------------------- bad content in valid frames
def _produce(records: bytes, corr: int = 90) -> bytes:
    return encode(0, 9, P.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[P.ProduceRequest.TopicProduceData(
        name="fz", partition_data=[P.ProduceRequest.PartitionProduceData(index=0, records=records)])]), corr=corr)


def _produce_error(broker, records: bytes) -> int:
    with connect(broker) as s:
        s.sendall(frame(_produce(records)))
        f = recv_frame(s)
        assert f is not None, "connection closed instead of a Produce error response"
        resp = P.ProduceResponse.decode(f[5:], 9)
        return resp.responses[0].partition_responses[0].error_code


def _fz_end(broker) -> int:
    with connect(broker) as s:
        s.sendall(frame(encode(2, 7, LO.ListOffsetsRequest(replica_id=-1, topics=[LO.ListOffsetsRequest.ListOffsetsTopic(
            name="fz", partitions=[LO.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))))
        return LO.ListOffsetsResponse.decode(recv_frame(s)[5:], 7).topics[0].partitions[0].offset


@pytest.mark.parametrize("damage", ["crc", "not-a-batch", "short", "magic", "two-batches"])
def test_produce_of_corrupt_batches_is_refused_with_an_error(broker, damage):
    good = build_batch([(b"k", b"v" * 50, [])])
    if damage == "crc":
        records = bytearray(good)
        records[-1] ^= 0xFF
    elif damage == "not-a-batch":
        records = bytes(random.Random(3).randrange(256) for _ in range(200))
    elif damage == "short":
        records = good[:40]
    elif damage == "magic":
        records = bytearray(good)
        records[16] = 1
    else:
        records = good + good
    end = _fz_end(broker)
    code = _produce_error(broker, bytes(records))
    assert code in (2, 87), f"expected CORRUPT_MESSAGE or INVALID_RECORD, got {code}"
    assert _fz_end(broker) == end, "a refused batch was appended"
    assert_healthy(broker, real_clients=damage == "crc")


@pytest.mark.xfail(strict=True, reason="broker/handlers/produce.py never parses record bodies: a batch with a "
                                       "valid CRC over records that do not parse is stored (Kafka: CORRUPT_MESSAGE)")
def test_produce_of_unparseable_records_with_valid_crc_is_refused(broker):
    batch = bytearray(build_batch([(b"k", b"v" * 20, [])]))
    batch[61:] = b"\xab" * (len(batch) - 61)  # the records section is garbage
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert _produce_error(broker, bytes(batch)) in (2, 87)


def test_client_closes_while_requests_are_in_flight(broker):
    """Pipelined requests, a long-polling fetch and an abrupt close: nothing breaks on the broker side."""
    meta = frame(encode(3, 12, M.MetadataRequest(topics=None), corr=1))
    long_poll = frame(encode(1, 12, F.FetchRequest(max_wait_ms=500, min_bytes=10**9, max_bytes=100000,
                                                   session_epoch=-1, topics=[F.FetchRequest.FetchTopic(
                                                       topic=INTACT, partitions=[F.FetchRequest.FetchPartition(
                                                           partition=0, fetch_offset=100,
                                                           partition_max_bytes=100000)])]), corr=2))
    for _ in range(5):
        s = connect(broker)
        s.sendall(long_poll + meta * 200)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        s.close()
    s = connect(broker)
    s.sendall(long_poll)
    s.close()
    with connect(broker) as s:  # a fetch session is opened, then the connection goes away
        s.sendall(frame(encode(1, 12, F.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=100000, session_epoch=0,
                                                     topics=[F.FetchRequest.FetchTopic(topic=INTACT, partitions=[
                                                         F.FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                                       partition_max_bytes=1000)])]),
                               corr=3)))
        assert recv_frame(s) is not None
    assert_healthy(broker)  # (the long polls expire meanwhile and find their connections gone)


# ----------------------------------------------------------------------------- mutation fuzzing
def _fuzz_seeds() -> list[tuple[int, object, tuple[int, int]]]:
    batch = build_batch([(b"k", b"v" * 20, [("h", b"x")])])
    return [
        (0, P.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[P.ProduceRequest.TopicProduceData(
            name="fz", partition_data=[P.ProduceRequest.PartitionProduceData(index=0, records=batch)])]), (3, 12)),
        (1, F.FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=100000, session_epoch=-1, topics=[
            F.FetchRequest.FetchTopic(topic="fz", partitions=[F.FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=100000)])]), (4, 12)),
        (2, LO.ListOffsetsRequest(replica_id=-1, topics=[LO.ListOffsetsRequest.ListOffsetsTopic(
            name="fz", partitions=[LO.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-2)])]),
         (1, 11)),
        (3, M.MetadataRequest(topics=[M.MetadataRequest.MetadataRequestTopic(name="fz")],
                              allow_auto_topic_creation=False), (0, 12)),
        (10, FC.FindCoordinatorRequest(key="grp", key_type=0, coordinator_keys=["grp", "g:abc:0"]), (0, 6)),
        (18, ApiVersionsRequest(client_software_name="fuzz", client_software_version="1.0"), (0, 4)),
        (20, DT.DeleteTopicsRequest(topics=[DT.DeleteTopicsRequest.DeleteTopicState(name="nope")],
                                    topic_names=["nope"]), (1, 6)),
        (21, DR.DeleteRecordsRequest(topics=[DR.DeleteRecordsRequest.DeleteRecordsTopic(
            name="fz2", partitions=[DR.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=0)])]),
         (0, 2)),
        (22, IP.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), (0, 6)),
        (32, DC.DescribeConfigsRequest(resources=[
            DC.DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name="fz",
                                                              configuration_keys=["retention.ms"]),
            DC.DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="1")],
            include_synonyms=True), (1, 4)),
        (44, IAC.IncrementalAlterConfigsRequest(resources=[IAC.IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=2, resource_name="fz", configs=[IAC.IncrementalAlterConfigsRequest.AlterableConfig(
                name="retention.ms", config_operation=0, value="100000")])], validate_only=True), (0, 1)),
        (60, DescribeClusterRequest(), (0, 2)),
        (88, SGH(group_id="fz-app", member_id="m", member_epoch=0, rebalance_timeout_ms=1000, process_id="p",
                 active_tasks=[], standby_tasks=[], warmup_tasks=[], topology=SGH.Topology(epoch=1, subtopologies=[
                     SGH.Subtopology(subtopology_id="0", source_topics=["fz"], repartition_sink_topics=["fz-r"]),
                     SGH.Subtopology(subtopology_id="1", repartition_source_topics=[SGH.TopicInfo(name="fz-r")],
                                     state_changelog_topics=[SGH.TopicInfo(name="fz-c")],
                                     copartition_groups=[SGH.CopartitionGroup(repartition_source_topics=[0])])])),
         (0, 1)),
    ]


def _mutate(rng: random.Random, body: bytes) -> bytes:
    b = bytearray(body)
    for _ in range(rng.randrange(1, 4)):
        if not b:
            break
        k = rng.randrange(len(b))
        r = rng.random()
        if r < 0.45:
            b[k] = rng.randrange(256)
        elif r < 0.65:
            b[k] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
        elif r < 0.85:
            b[k:k + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00"])
        else:
            del b[k:k + rng.randrange(1, 5)]
    return bytes(b)


def test_mutated_requests(broker):
    """Seeded mutations of valid requests of the core APIs, each followed by a PING on the same
    connection: every one is answered or closes its connection, and no handler raises."""
    rng = random.Random(932)
    outcomes = send_cases(broker, (_mutate(rng, encode(api_key, version, req, corr=5))
                                   for api_key, req, (lo, hi) in _fuzz_seeds()
                                   for version in range(lo, hi + 1) for _ in range(25)))
    print("mutated requests:", outcomes)
    assert outcomes["closed"] > 100 and outcomes["answered"] > 100, outcomes
    assert_healthy(broker)


def test_truncated_and_mutated_requests_of_every_served_api(broker):
    """Every API the broker serves (as ApiVersions lists it), at every version: the default
    request cut short at each length, and seeded mutations of it.  Topic and partition
    creation are left out: a mutated count would create thousands of partitions."""
    from protocol.messages.registry import REQUESTS

    with connect(broker) as s:
        s.sendall(frame(encode(18, 0, ApiVersionsRequest(), corr=1)))
        served = [(k.api_key, k.min_version, k.max_version)
                  for k in ApiVersionsResponse.decode(recv_frame(s)[4:], 0).api_keys]
    assert len(served) >= 20
    rng = random.Random(74)

    def payloads():
        for api_key, lo, hi in served:
            if api_key in (19, 37):
                continue
            cls = REQUESTS[api_key]
            for version in range(max(lo, cls.MIN_VERSION), hi + 1):
                body = encode(api_key, version, cls(), corr=6)
                yield from (body[:cut] for cut in range(8, len(body)))
                yield from (_mutate(rng, body) for _ in range(8))

    outcomes = send_cases(broker, payloads())
    print("every served API:", outcomes)
    assert outcomes["closed"] > 100 and outcomes["answered"] > 100, outcomes
    assert_healthy(broker)


# ----------------------------------------------------------------------------- concurrency
def test_garbage_connections_do_not_disturb_real_clients(broker):
    stop = threading.Event()
    errors: list[BaseException] = []
    sent = [0]

    def garbage(seed: int):
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                with connect(broker, timeout=10) as s:
                    kind = rng.randrange(4)
                    if kind == 0:
                        s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 500))))
                    elif kind == 1:
                        s.sendall(struct.pack(">i", MAX_REQUEST + rng.randrange(1, 10**6)))
                    elif kind == 2:
                        s.sendall(frame(header_only(rng.choice([999, 63, 3]), rng.choice([0, 99]))))
                    else:  # half a frame, held open for a while
                        s.sendall(struct.pack(">i", 1000) + b"\0" * 10)
                        stop.wait(0.2)
                    sent[0] += 1
        except OSError as e:  # connection refused / reset would mean the broker stopped accepting
            if not isinstance(e, (ConnectionResetError, BrokenPipeError)):
                errors.append(e)

    threads = [threading.Thread(target=garbage, args=(i,), daemon=True) for i in range(50)]
    for t in threads:
        t.start()
    try:
        n = 2000
        acked = {}
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5})
        for i in range(n):
            p.produce("canary", key=b"c%05d" % i, value=b"payload-%05d" % i,
                      on_delivery=lambda err, msg: acked.__setitem__(msg.key(), err or msg.offset()))
            if i % 200 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        assert all(isinstance(v, int) for v in acked.values()) and len(acked) == n
        first = min(acked.values())
        msgs = []
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "garbage-time", "enable.auto.commit": False})
        try:
            c.assign([TopicPartition("canary", 0, first)])
            deadline = time.monotonic() + 30
            while len(msgs) < n and time.monotonic() < deadline:
                msgs += [m for m in c.consume(500, 0.2) if m.error() is None]
        finally:
            c.close()
        assert [(m.key(), m.value()) for m in msgs[:n]] == [(b"c%05d" % i, b"payload-%05d" % i) for i in range(n)]
        assert sent[0] >= 50, "the garbage threads did not run"
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert not errors, errors[:3]
    assert_healthy(broker)
