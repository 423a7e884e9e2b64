"""Descriptors follow the partitions in use, not the data retained (broker/log/faults.py, OpenFiles):
under a low open-file limit a broker holding many partitions, each with several rolled segments,
keeps producing, rolling and answering new connections, also after a restart under a lower limit;
idle, it holds about as many descriptors as a broker without data."""
from __future__ import annotations

import os
import re
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from tests.support import until

PARTITIONS = 120
SEGMENT_BYTES = 16384
SEGMENTS_EACH = 4  # rolled segments per partition at least
VALUE = b"v" * 1000


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _fd_targets(pid: int) -> list[str]:
    out = []
    for n in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{n}"))
        except OSError:
            pass
    return sorted(out)


def _segments(data_dir) -> int:
    return sum(1 for _root, _dirs, files in os.walk(data_dir) for f in files if f.endswith(".log"))


def _answers_api_versions(port: int) -> bool:
    """A brand-new connection's first request is answered."""
    from protocol.messages.api_versions import ApiVersionsRequest
    from tests.wire import WireClient

    with WireClient(f"127.0.0.1:{port}", timeout=10) as w:
        resp = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    return resp.error_code == 0 and len(resp.api_keys) > 50


def _produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 60000,
                         "batch.num.messages": 8})  # batches of 8 KB: a 16 KiB segment rolls after two
    failed: list = []
    try:
        for i in range(per_partition):
            for p in range(PARTITIONS):
                producer.produce(topic, VALUE, partition=p,
                                 on_delivery=lambda err, _msg: err is not None and failed.append(err))
            producer.poll(0)
        assert producer.flush(90) == 0, "records still unanswered"
    finally:
        producer.flush(10)
    assert not failed, failed[:5]


def _read_from_start(bootstrap: str, topic: str, partitions: list[int], at_least: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        seen: dict[int, int] = {p: 0 for p in partitions}

        def done():
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                assert m.value() == VALUE
                seen[m.partition()] += 1
            return all(n >= at_least for n in seen.values())
        until(done, 60, f"{at_least} records from the start of each partition")
    finally:
        consumer.close()


def test_many_partitions_with_rolled_segments_under_a_low_open_file_limit(tmp_path):
    """120 partitions with 4+ rolled segments each (over 600 segment files) under a 256-descriptor
    limit: created, produced to and rolled, every record readable from the start, new connections
    answered; idle, the descriptors return to what the broker held before it had data; then a
    restart under a 160-descriptor limit answers a new connection's first ApiVersions and serves."""
    broker = BrokerProcess(tmp_path / "data", config={"log.retention.check.interval.ms": "200",
                                                      "sharebroker.metrics.listener": "127.0.0.1:0"}, open_files=256)
    with broker:
        pid = broker.proc.pid
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _answers_api_versions(broker.port)
        admin.list_topics(timeout=10)
        baseline = _fds(pid)
        topic = NewTopic("many", PARTITIONS, 1, config={"internal.segment.bytes": str(SEGMENT_BYTES)})
        assert admin.create_topics([topic])["many"].exception(30) is None
        per_partition = (SEGMENTS_EACH + 2) * SEGMENT_BYTES // len(VALUE)
        _produce(broker.bootstrap, "many", per_partition)
        assert _segments(broker.data_dir) >= PARTITIONS * (SEGMENTS_EACH + 1), "\n".join(broker.log_lines[-40:])
        for _ in range(10):
            assert _answers_api_versions(broker.port)
        _read_from_start(broker.bootstrap, "many", [0, 57, PARTITIONS - 1], per_partition)
        # idle: every segment file closes again (two maintenance passes without use)
        until(lambda: _fds(pid) <= baseline + 4, 30,
              f"the descriptors to return to the {baseline} held before any data: {_fd_targets(pid)}")
        # producing again reopens only what it uses, and rolls go on
        _produce(broker.bootstrap, "many", SEGMENT_BYTES // len(VALUE) + 2)
        assert _fds(pid) < baseline + PARTITIONS + 20
        metrics = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
        for name in ("sharebroker_log_segment_reopens_total", "sharebroker_log_segment_releases_total"):
            assert re.search(rf"^{name} [1-9]", metrics, re.M), name
        held = re.search(r"^sharebroker_log_open_segment_descriptors (\d+)", metrics, re.M)
        assert held and int(held.group(1)) <= 128  # half the limit
        admin = None

    broker.open_files = 160
    with broker:
        assert _answers_api_versions(broker.port)
        _produce(broker.bootstrap, "many", 3)
        _read_from_start(broker.bootstrap, "many", list(range(0, PARTITIONS, 7)), per_partition)
        assert _answers_api_versions(broker.port)


def test_creating_a_topic_of_a_thousand_partitions_does_not_stall_the_event_loop(tmp_path):
    """CreateTopics of 1,000 partitions: the files are made on the worker thread, the partitions moved
    into place and opened a few dozen per loop callback, so no stall of 250 ms is logged (the loop
    watch: the loop thread's own time), and the topic is there whole, every partition writable."""
    broker = BrokerProcess(tmp_path / "data", config={"sharebroker.loop.stall.log.ms": "250"})
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.list_topics(timeout=10)
        started = len(broker.log_lines)  # start-up's own work is not the question
        assert admin.create_topics([NewTopic("wide", 1000, 1)], request_timeout=120)["wide"].exception(120) is None
        assert len(admin.list_topics(timeout=10).topics["wide"].partitions) == 1000
        err = admin.create_topics([NewTopic("wide", 3, 1)])["wide"].exception(30)
        assert err is not None and "already exists" in str(err)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        try:
            for p in (0, 511, 999):
                producer.produce("wide", b"x", partition=p)
            assert producer.flush(30) == 0
        finally:
            producer.flush(5)
        # what the loop thread itself spent (on a CPU or blocked in the kernel), not the waits for a CPU
        # a loaded machine adds
        stalls = [line for line in broker.log_lines[started:]
                  if (m := re.search(r"event loop stalled .*on CPU (\d+) ms.*blocked (\d+) ms", line))
                  and int(m.group(1)) + int(m.group(2)) >= 250]
        assert not stalls, stalls[:3]
        assert not [n for n in os.listdir(broker.data_dir) if n.endswith("-staging")]
