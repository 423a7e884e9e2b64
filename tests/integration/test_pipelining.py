"""Pipelined requests on one connection are answered in request order.

Kafka handles one request per connection at a time (the SocketServer processor mutes a channel
while its request is in flight and unmutes it when the response is sent), so a client may write
many requests without waiting and reads the responses back in the order it sent them: the
correlation ids come back in sequence, even when an early request (a long-poll Fetch) takes far
longer than the ones behind it (a Metadata).
"""
from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.fetch import FetchRequest as F
from protocol.messages.list_offsets import ListOffsetsRequest as LO
from protocol.messages.metadata import MetadataRequest
from protocol.messages.produce import ProduceRequest as P
from protocol.records import build_batch
from tests.support import unique
from tests.wire import WireClient

LONG_POLL_MS = 1500


def create_topic(bootstrap: str, partitions: int = 1) -> str:
    name = unique("pipe")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def topic_id(w: WireClient, name: str) -> bytes:
    md = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                   allow_auto_topic_creation=False), 12)
    return md.topics[0].topic_id


def long_poll(tid: bytes, offset: int = 0, max_wait_ms: int = LONG_POLL_MS) -> F:
    return F(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
             topics=[F.FetchTopic(topic_id=tid, partitions=[
                 F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])


def metadata(name: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)


def test_slow_long_poll_fetch_is_answered_before_the_fast_metadata_behind_it(sharebroker):
    name = create_topic(sharebroker.bootstrap)
    with WireClient(sharebroker.bootstrap) as w:
        tid = topic_id(w, name)
        sent = time.monotonic()
        fetch_corr = w.send(long_poll(tid), 16)       # nothing to read: waits MaxWaitMs
        meta_corr = w.send(metadata(name), 12)        # answerable at once
        corr, fetch = w.receive(F.API_KEY, 16)
        waited = time.monotonic() - sent
        assert corr == fetch_corr, "the Fetch was sent first, so it is answered first"
        assert fetch.error_code == 0 and fetch.responses[0].partitions[0].error_code == 0
        assert waited >= LONG_POLL_MS / 1000, "the Fetch did wait for data (MaxWaitMs), so it really was slow"
        corr, md = w.receive(MetadataRequest.API_KEY, 12)
        assert corr == meta_corr and md.topics[0].name == name and md.topics[0].error_code == 0


def test_long_poll_woken_by_a_produce_on_another_connection_still_precedes_later_requests(sharebroker):
    name = create_topic(sharebroker.bootstrap)
    with WireClient(sharebroker.bootstrap) as w, WireClient(sharebroker.bootstrap) as producer:
        tid = topic_id(w, name)
        corrs = [w.send(long_poll(tid, max_wait_ms=30_000), 16)]
        corrs += [w.send(metadata(name), 12) for _ in range(5)]
        r = producer.request(P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=name, partition_data=[
            P.PartitionProduceData(index=0, records=build_batch([(None, b"wake", [])]))])]), 9)
        assert r.responses[0].partition_responses[0].error_code == 0
        corr, fetch = w.receive(F.API_KEY, 16)
        assert corr == corrs[0]
        assert fetch.responses[0].partitions[0].high_watermark == 1 and fetch.responses[0].partitions[0].records
        assert [w.receive(MetadataRequest.API_KEY, 12)[0] for _ in range(5)] == corrs[1:]


def test_many_pipelined_requests_of_mixed_apis_come_back_in_order(sharebroker):
    name = create_topic(sharebroker.bootstrap, partitions=2)
    with WireClient(sharebroker.bootstrap) as w:
        tid = topic_id(w, name)
        # (request, version) cycling through five APIs, one produce among them changes what later ones see
        kinds = [
            (ApiVersionsRequest(client_software_name="pipe", client_software_version="1"), 3),
            (metadata(name), 12),
            (LO(replica_id=-1, topics=[LO.ListOffsetsTopic(name=name, partitions=[
                LO.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in (0, 1)])]), 7),
            (F(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1,
               topics=[F.FetchTopic(topic_id=tid, partitions=[
                   F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 16),
            (P(acks=1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=name, partition_data=[
                P.PartitionProduceData(index=0, records=build_batch([(None, b"v", [])]))])]), 9),
        ]
        plan = [kinds[i % len(kinds)] for i in range(200)]
        # written in one go: the broker sees them back to back, many per read
        frames = [w.frame(req, v) for req, v in plan]
        corrs = [corr for corr, _ in frames]
        w.send_raw(b"".join(data for _, data in frames))
        produced = 0
        for (req, v), corr in zip(plan, corrs):
            got, resp = w.receive(type(req).API_KEY, v)
            assert got == corr, f"response {got} where {corr} was next"
            if isinstance(req, P):
                assert resp.responses[0].partition_responses[0].base_offset == produced
                produced += 1
            elif isinstance(req, LO):
                offsets = {p.partition_index: p.offset for t in resp.topics for p in t.partitions}
                assert offsets == {0: produced, 1: 0}, "each ListOffsets sees exactly the produces sent before it"
            elif isinstance(req, F):
                assert resp.responses[0].partitions[0].high_watermark == produced
