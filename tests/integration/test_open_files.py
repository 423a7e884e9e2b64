"""The open-file limit: logged at start-up; a topic that cannot be opened under it fails cleanly
(KAFKA_STORAGE_ERROR, nothing half-created) with a broker log line that names the limit."""
from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import until


def test_partitions_beyond_the_open_file_limit(tmp_path):
    cmd = (f"ulimit -Sn 160 && ulimit -Hn 160 && exec {sys.executable} -m broker --listen 127.0.0.1:0 "
           f"--data-dir {tmp_path / 'data'}")
    proc = subprocess.Popen(["bash", "-c", cmd], stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    try:
        ready = until(lambda: next((m for m in map(re.compile(r"accepting connections on \S+:(\d+)").search,
                                                      list(lines)) if m), None), 30, "the broker to listen")
        assert any("open-file limit 160: room for about 53 partitions" in line for line in lines)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ready.group(1)}"})
        err = admin.create_topics([NewTopic("too-many", 100, 1)])["too-many"].exception(30)
        assert err is not None and err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        until(lambda: any("open-file limit, 160, is reached" in line for line in lines), 10,
              "the broker's warning about the open-file limit")
        # Nothing was half-created, and a topic that fits still can be.
        assert "too-many" not in admin.list_topics(timeout=10).topics
        assert admin.create_topics([NewTopic("fits", 4, 1)])["fits"].exception(30) is None
        assert not any("Traceback" in line for line in lines)
    finally:
        proc.terminate()
        proc.wait(20)


# ----------------------------------------------------------------- the limit reached at run time
def _fd_ceiling(pid: int) -> int:
    """One above the highest descriptor number the process has open (RLIMIT_NOFILE bounds numbers)."""
    return max(int(n) for n in os.listdir(f"/proc/{pid}/fd")) + 1


def _set_soft_nofile(pid: int, soft: int) -> None:
    """``prlimit --pid PID --nofile=SOFT:HARD`` (the soft limit only: raising a hard one needs a capability)."""
    hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (min(soft, hard), hard))


def _connection_answer(port: int, keep: list | None = None) -> str:
    """Open a connection and send ApiVersions: "answered", "closed" (refused), never a hang. With
    ``keep``, an answered connection stays open (appended to it)."""
    from protocol.lazy_messages import ApiVersionsRequest
    from tests.wire import WireClient

    w = WireClient(f"127.0.0.1:{port}", timeout=10)
    try:
        w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    except (ConnectionError, EOFError, OSError) as e:
        w.close()
        if isinstance(e, TimeoutError):
            raise AssertionError("a connection at the open-file limit was left hanging") from e
        return "closed"
    if keep is None:
        w.close()
    else:
        keep.append(w)
    return "answered"


def test_running_out_of_descriptors_at_run_time(sharebroker_factory):
    """The open-file limit lowered under a running broker to just above what it uses: topics that
    cannot be opened are refused whole (no directory left), open partitions keep taking records
    (rolls included: the descriptor reserve), connections are answered or closed at once; with the
    limit raised again the same producer, and a new client, work without a restart, and every
    acknowledged record is readable."""
    broker = sharebroker_factory({"log.retention.check.interval.ms": 1000,
                                  "sharebroker.metrics.listener": "127.0.0.1:0"})
    pid, port = broker.proc.pid, broker.port
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # small segments: the produce below rolls several times while at the limit
    admin.create_topics([NewTopic("busy", 1, 1, config={"internal.segment.bytes": "16384"})])["busy"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 60000, "batch.num.messages": 20})
    acked: dict[int, bytes] = {}
    failed: list = []

    def delivered(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(err)

    def produce(prefix: str, n: int, wait: bool = True) -> None:
        for i in range(n):
            producer.produce("busy", f"{prefix}-{i}".encode() * 20, callback=delivered)
            producer.poll(0)
        if wait:
            assert producer.flush(90) == 0, "records still unanswered"

    produce("before", 200)
    assert len(acked) == 200 and not failed
    admin.list_topics(timeout=10)  # the admin client's connections are open before the limit drops

    _set_soft_nofile(pid, _fd_ceiling(pid))
    try:
        # topics that cannot be opened are refused with KAFKA_STORAGE_ERROR, whole
        names = [f"refused-{i}" for i in range(40)]
        results = admin.create_topics([NewTopic(n, 4, 1) for n in names], request_timeout=30)
        refused = []
        for name, fut in results.items():
            err = fut.exception(40)
            if err is not None:
                assert err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, err
                refused.append(name)
        assert refused, "no topic was refused at the open-file limit"
        left = [d for d in os.listdir(broker.data_dir) if d.rsplit("-", 1)[0] in refused]
        assert not left, f"refused topics left directories: {left}"
        # new connections are answered or closed at once, never left hanging: open more (and keep
        # them) until one is refused
        held: list = []
        try:
            until(lambda: _connection_answer(port, held) == "closed", 60, "a connection refused at the limit")
        finally:
            for w in held:
                w.close()
        # the open partition keeps taking records while the descriptor reserve lasts (each roll keeps
        # one more file open); then its rolls fail, answered with a retriable error, until the limit
        # is raised
        produce("at-limit", 1500, wait=False)
        until(lambda: producer.poll(0.1) is not None and any("roll (creating the next segment)" in line
                                                             and "failed" in line for line in broker.log_lines),
              60, "a segment roll to fail at the limit")
        assert len(acked) > 200, "nothing was acknowledged at the limit"
    finally:
        _set_soft_nofile(pid, 1 << 20)

    # the same producer (its records waiting for a roll included) and new clients work again
    # without a restart
    assert producer.flush(90) == 0, "records still unanswered"
    produce("after", 200)
    assert not failed, failed[:5]
    assert _connection_answer(port) == "answered"
    fresh = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert fresh.create_topics([NewTopic(refused[0], 4, 1)])[refused[0]].exception(30) is None
    assert refused[0] in fresh.list_topics(timeout=10).topics
    until(lambda: any("accepting connections again" in line for line in broker.log_lines), 10,
          "the broker saying it accepts connections again")
    # every acknowledged record is readable, with its value
    assert len(acked) == 1900
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("busy", 0, 0)])
        seen: dict[int, bytes] = {}

        def read_all():
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                seen[m.offset()] = m.value()
            return len(seen) >= len(acked)
        until(read_all, 30, "every acknowledged record")
        assert {o: seen.get(o) for o in acked} == acked
    finally:
        consumer.close()
    lines = list(broker.log_lines)
    assert any("storage error" in line and "Too many open files" in line for line in lines)
    # what an operator sees: the counters on /metrics and the section of the status page
    import urllib.request

    metrics = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    assert re.search(r'^sharebroker_storage_errors_total\{operation="roll \(creating the next segment\)",'
                     r'error="EMFILE"\} [1-9]', metrics, re.M), metrics
    assert re.search(r'^sharebroker_accept_errors_total\{error="EMFILE"\} [1-9]', metrics, re.M)
    page = urllib.request.urlopen(broker.metrics_url.removesuffix("metrics"), timeout=10).read().decode()
    assert 'id="storage-errors"' in page and "roll (creating the next segment)" in page
