"""The open-file limit: logged at start-up with the bound on segment files open at once; partitions
keep their files closed while unused, so many more fit than the limit has descriptors; a topic that
cannot be opened at the limit fails cleanly (KAFKA_STORAGE_ERROR, nothing half-created) with a broker
log line that names the limit, and everything works again once descriptors are back."""
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


def test_more_partitions_than_the_open_file_limit(tmp_path):
    cmd = (f"ulimit -Sn 160 && ulimit -Hn 160 && exec {sys.executable} -m broker --listen 127.0.0.1:0 "
           f"--data-dir {tmp_path / 'data'}")
    proc = subprocess.Popen(["bash", "-c", cmd], stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    try:
        ready = until(lambda: next((m for m in map(re.compile(r"accepting connections on \S+:(\d+)").search,
                                                      list(lines)) if m), None), 30, "the broker to listen")
        assert any("open-file limit 160: at most 80 segment files open at once" in line for line in lines)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ready.group(1)}"})
        # 300 partitions: three files each, 900 files, under a 160-descriptor limit
        assert admin.create_topics([NewTopic("many", 300, 1)])["many"].exception(60) is None
        assert len(admin.list_topics(timeout=10).topics["many"].partitions) == 300
        assert admin.create_topics([NewTopic("more", 4, 1)])["more"].exception(30) is None
        assert not any("Traceback" in line or "Too many open files" in line for line in lines)
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
    (rolls included), connections are answered or closed at once; with the
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
        # new connections are answered or closed at once, never left hanging: open more (and keep
        # them) until one is refused
        held: list = []
        try:
            until(lambda: _connection_answer(port, held) == "closed", 60, "a connection refused at the limit")
            # topics that cannot be made are refused with KAFKA_STORAGE_ERROR, whole (a new partition keeps
            # no descriptor open: only with every descriptor number in use are its files not made)
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
        finally:
            for w in held:
                w.close()
        # the open partition keeps taking records, and rolling, at the limit: a roll keeps no more
        # files open (idle segment files are released, the descriptor reserve makes room)
        rolled = len([n for n in os.listdir(os.path.join(broker.data_dir, "busy-0")) if n.endswith(".log")])
        produce("at-limit", 1500)
        assert len(acked) == 1700 and not failed
        assert len([n for n in os.listdir(os.path.join(broker.data_dir, "busy-0")) if n.endswith(".log")]) > rolled
    finally:
        _set_soft_nofile(pid, 1 << 20)

    # the same producer and new clients work without a restart
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
    assert re.search(r'^sharebroker_storage_errors_total\{operation="creating a partition",'
                     r'error="EMFILE"\} [1-9]', metrics, re.M), metrics
    assert re.search(r'^sharebroker_accept_errors_total\{error="EMFILE"\} [1-9]', metrics, re.M)
    page = urllib.request.urlopen(broker.metrics_url.removesuffix("metrics"), timeout=10).read().decode()
    assert 'id="storage-errors"' in page and "creating a partition" in page
