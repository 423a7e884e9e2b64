"""Differential conformance, applications: the same real programs against the reference Apache Kafka
4.4.0 (``kafka_ref``) and against sharebroker (``ours``), their outcomes compared.

Each scenario runs an application the way a user would (aiokafka's transactional consume-transform-
produce, kcat, kafkajs and @platformatic/kafka on Node, a quixstreams exactly-once app restarted from its
changelog, a faust-streaming table, a faststream consume-transform-publish app restarted from its committed
offsets) and returns what it observed: exact counts, the records read, the
errors raised. Each scenario's test is parametrised over the two brokers and asserts the exact outcome
(so a wrong count fails even when both agree); ``test_same_results_as_kafka`` (after them, same worker)
then compares the two: every remaining difference must be listed in ``EXPECTED`` with its reason (none
today), and a listed one that went away fails too.

The Node programs (apps/*.js) use kafkajs and @platformatic/kafka installed with npm from apps/package.json
into ``~/.cache/sharebroker/node-apps`` (outside the work tree); quixstreams and faust-streaming pin a
confluent-kafka older than the test extra's, so they run in their own virtualenv made from
apps/requirements.txt in ``~/.cache/sharebroker/apps-venv``. Both are installed on first use and kept.
faststream (on aiokafka) is in the test extra: its app runs with the test interpreter.
"""
from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from broker.testing import BrokerProcess
from tests.differential.harness import assert_as_expected, differences
from tests.missing_inputs import missing_input
from tests.support import create_topic, unique

# one worker runs the module: one sharebroker for it, the installs done once
pytestmark = pytest.mark.xdist_group("differential-applications")

APPS = Path(__file__).parent / "apps"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sharebroker"


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """A sharebroker of our defaults with the reference Kafka's initial rebalance delay (0: the launcher
    sets it there), so each application's group forms as fast on both."""
    with BrokerProcess(tmp_path_factory.mktemp("differential-apps"),
                       config={"group.initial.rebalance.delay.ms": "0"}) as b:
        yield b


# (scenario, path) -> reason. Empty: every application gives the same results on both brokers.
EXPECTED: dict[tuple[str, str], str] = {}


BROKERS = ("kafka", "ours")
SCENARIOS = ("aiokafka_transactions", "kcat", "node_transactions", "quixstreams_exactly_once", "faust_table",
             "faststream_transform")
RESULTS: dict[str, dict[str, dict]] = {}  # scenario -> broker -> what the application observed


def run(request, broker: str, scenario, check) -> None:
    """``scenario(bootstrap)`` on ``broker`` (the fixture ``kafka_ref`` or ``ours``, so ``-k ours`` needs no
    Java); its result kept for ``test_same_results_as_kafka``, then ``check(result)`` asserts the exact outcome."""
    bootstrap = request.getfixturevalue("kafka_ref" if broker == "kafka" else "ours").bootstrap
    result = RESULTS.setdefault(scenario.__name__, {})[broker] = scenario(bootstrap)
    try:
        check(result)
    except AssertionError as e:
        raise AssertionError(f"{broker}: {e}\nresult: {result}") from None


# ----------------------------------------------------------------------------- aiokafka transactions
AIO_RECORDS = 20


async def _aiokafka_transactions(bootstrap: str) -> dict:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError

    source, sink = create_topic(bootstrap, 2, "aio-in"), create_topic(bootstrap, 1, "aio-out")
    group, txn_id = unique("aio-group"), unique("aio-txn")
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await plain.start()
    try:
        for i in range(AIO_RECORDS):
            await plain.send(source, key=b"k%d" % (i % 4), value=b"%d" % i, partition=i % 2)
        await plain.flush()
    finally:
        await plain.stop()

    out: dict = {}
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    await consumer.start()
    await producer.start()
    try:
        # consume-transform-produce: each batch's output and its input offsets in one transaction
        done, transactions = 0, 0
        async with asyncio.timeout(60):
            while done < AIO_RECORDS:
                batch = await consumer.getmany(timeout_ms=500)
                if not batch:
                    continue
                async with producer.transaction():
                    offsets = {}
                    for tp, msgs in batch.items():
                        for m in msgs:
                            await producer.send(sink, key=m.key, value=b"x" + m.value, partition=0)
                        offsets[tp] = msgs[-1].offset + 1
                        done += len(msgs)
                    await producer.send_offsets_to_transaction(offsets, group)
                transactions += 1
        out["transformed"] = done
        # an aborted transaction, then a committed one
        await producer.begin_transaction()
        for i in range(5):
            await producer.send(sink, value=b"aborted-%d" % i, partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(sink, value=b"last", partition=0)
        # fencing: a second producer with the same transactional.id; the first one's next steps fail
        zombie_errors = []
        await producer.begin_transaction()
        await (await producer.send(sink, value=b"zombie-before", partition=0))
        fencer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
        await fencer.start()  # InitProducerId: bumps the epoch, aborts the zombie's open transaction
        try:
            try:
                await producer.commit_transaction()
            except KafkaError as e:
                zombie_errors.append(type(e).__name__)
            async with fencer.transaction():
                await fencer.send(sink, value=b"fencer", partition=0)
        finally:
            await fencer.stop()
        out["zombie_errors"] = zombie_errors
    finally:
        await consumer.stop()
        try:
            await producer.stop()
        except Exception as e:  # noqa: BLE001 - a fenced producer may raise again when it stops
            out["zombie_stop_error"] = type(e).__name__

    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await committed.start()
    try:
        out["committed_offsets"] = [(p, await committed.committed(TopicPartition(source, p))) for p in (0, 1)]
    finally:
        await committed.stop()
    for isolation in ("read_committed", "read_uncommitted"):
        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                  auto_offset_reset="earliest", enable_auto_commit=False)
        await reader.start()
        try:
            tp = TopicPartition(sink, 0)
            reader.assign([tp])
            end = (await reader.end_offsets([tp]))[tp]
            values = []
            async with asyncio.timeout(30):
                while await reader.position(tp) < end:
                    for msgs in (await reader.getmany(tp, timeout_ms=200)).values():
                        values += [m.value.decode() for m in msgs]
            out[isolation] = {"count": len(values), "aborted": sum(v.startswith("aborted") for v in values),
                              "zombie": values.count("zombie-before"), "last": values[-1],
                              "transformed": sorted(int(v[1:]) for v in values if v.startswith("x"))}
        finally:
            await reader.stop()
    return out


def aiokafka_transactions(bootstrap: str) -> dict:
    return asyncio.run(_aiokafka_transactions(bootstrap))


def _check_aiokafka(r: dict) -> None:
    n = AIO_RECORDS
    assert r["transformed"] == n
    assert r["committed_offsets"] == [(0, n // 2), (1, n // 2)]
    assert r["read_committed"] == {"count": n + 2, "aborted": 0, "zombie": 0, "last": "fencer",
                                   "transformed": list(range(n))}
    assert r["read_uncommitted"]["count"] == n + 5 + 1 + 1 + 1
    assert r["read_uncommitted"]["aborted"] == 5
    assert r["zombie_errors"] == ["ProducerFenced"]


@pytest.mark.parametrize("broker", BROKERS)
def test_aiokafka_transactions(request, broker):
    run(request, broker, aiokafka_transactions, _check_aiokafka)


# ----------------------------------------------------------------------------- kcat
def _kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kcat {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def kcat(bootstrap: str) -> dict:
    """kcat -P with keys, headers and a null value into two partitions; -C -e reads them back; -L lists."""
    topic = create_topic(bootstrap, 2, "kcat")
    _kcat("-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", ":", "-H", "app=kcat", "-H", "run=1",
          stdin="k1:one\nk2:two\nk3:three\n")
    _kcat("-P", "-b", bootstrap, "-t", topic, "-p", "1", "-K", ":", "-Z", "-H", "app=kcat", "-H", "empty=",
          stdin="k4:four\nk5:\n")
    fmt = "%p|%o|%k|%S|%s|%h\n"
    lines = _kcat("-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt).splitlines()
    p1 = _kcat("-C", "-b", bootstrap, "-t", topic, "-p", "1", "-o", "-1", "-e", "-q", "-f", fmt).splitlines()
    meta = json.loads(_kcat("-L", "-b", bootstrap, "-t", topic, "-J"))
    ids = [b["id"] for b in meta["brokers"]]
    (listed,) = meta["topics"]
    return {
        "records": sorted(lines),
        "last_of_partition_1": p1,
        "metadata": {
            "brokers": len(ids),
            "controller_is_broker": meta["controllerid"] in ids,
            "topic": listed["topic"] == topic,
            "error": listed.get("error"),
            "partitions": [(p["partition"], p["leader"] in ids, len(p["replicas"]), len(p["isrs"]))
                           for p in listed["partitions"]],
        },
    }


def _check_kcat(r: dict) -> None:
    assert r["records"] == ["0|0|k1|3|one|app=kcat,run=1", "0|1|k2|3|two|app=kcat,run=1",
                            "0|2|k3|5|three|app=kcat,run=1", "1|0|k4|4|four|app=kcat,empty=",
                            "1|1|k5|-1||app=kcat,empty="]
    assert r["last_of_partition_1"] == ["1|1|k5|-1||app=kcat,empty="]
    assert r["metadata"] == {"brokers": 1, "controller_is_broker": True, "topic": True, "error": None,
                             "partitions": [(0, True, 1, 1), (1, True, 1, 1)]}


@pytest.mark.parametrize("broker", BROKERS)
def test_kcat(request, broker):
    run(request, broker, kcat, _check_kcat)


# ----------------------------------------------------------------------------- Node: kafkajs, @platformatic/kafka
def _installed(directory: Path, spec: Path, install) -> Path:
    """``directory`` with ``install(directory)`` done for the current ``spec`` file (a copy of it is kept
    there; a changed spec installs again). A lock file beside it orders concurrent test runs."""
    marker = directory / ("installed-" + hashlib.sha256(spec.read_bytes()).hexdigest()[:16])
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            shutil.copy(spec, directory / spec.name)
            install(directory)
            marker.touch()
    return directory


@pytest.fixture(scope="module")
def node_modules() -> Path:
    if not (shutil.which("node") and shutil.which("npm")):
        missing_input("node and npm (tools/test.sh installs them)")
    directory = _installed(CACHE / "node-apps", APPS / "package.json", lambda d: subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=d, check=True, timeout=300))
    return directory / "node_modules"


def _node_version() -> tuple[int, int]:
    out = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout
    return tuple(int(x) for x in out.strip().lstrip("v").split(".")[:2])


def _node(node_modules: Path, script: str, *args: str):
    done = subprocess.run(["node", str(APPS / script), *args], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "NODE_PATH": str(node_modules)})
    assert done.returncode == 0, f"{script}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_transactions(node_modules: Path):
    def node_transactions(bootstrap: str) -> dict:
        """kafkajs commits a transaction of 5, aborts one of 3, commits one of 2; kafkajs consumers in both
        isolation levels and a KIP-848 @platformatic/kafka consumer in read_committed read them."""
        topic = create_topic(bootstrap, 1, "kafkajs")
        out = _node(node_modules, "kafkajs_txn.js", bootstrap, topic, unique("kafkajs-txn"), unique("kafkajs"))
        if _node_version() >= (20, 19):  # @platformatic/kafka's engines (Debian 12's own nodejs is 18)
            out["platformatic"] = _node(node_modules, "platformatic_consumer.js", bootstrap, topic, unique("plat"))
        return out
    return node_transactions


def _check_node(r: dict) -> None:
    committed_offsets = [0, 1, 2, 3, 4, 10, 11]  # 5 = commit marker, 6-8 aborted, 9 = abort marker
    assert r["high_watermark"] == [13]
    assert [m["offset"] for m in r["committed"]] == committed_offsets
    assert [m["value"] for m in r["committed"]] == ["c-0", "c-1", "c-2", "c-3", "c-4", "c-8", "last"]
    assert {m["txn"] for m in r["committed"]} == {"true"}
    assert [m["offset"] for m in r["uncommitted"]] == [0, 1, 2, 3, 4, 6, 7, 8, 10, 11]
    assert [m["value"] for m in r["uncommitted"]].count("aborted-5") == 1
    assert r.get("platformatic", r["committed"]) == r["committed"]


@pytest.mark.parametrize("broker", BROKERS)
def test_node_transactions(request, broker, node_modules):
    run(request, broker, node_transactions(node_modules), _check_node)


# ----------------------------------------------------------------------------- Python applications (own venv)
@pytest.fixture(scope="module")
def apps_python() -> Path:
    def install(d: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(d / "venv")], check=True, timeout=120)
        subprocess.run([str(d / "venv" / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "-r", str(d / "requirements.txt")], check=True, timeout=600)
    return _installed(CACHE / "apps-venv", APPS / "requirements.txt", install) / "venv" / "bin" / "python"


def _run_app(python: Path, script: str, *args: str, timeout: float = 90) -> str:
    done = subprocess.run([str(python), str(APPS / script), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{script}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def _produce_json(bootstrap: str, topic: str, records: list[tuple[str, int, int]]) -> None:
    """(key, partition, i) records with the JSON value {"i": i}."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, partition, i in records:
        p.produce(topic, key=key, value=json.dumps({"i": i}), partition=partition)
    assert p.flush(30) == 0


def _read_committed(bootstrap: str, topic: str, partitions: int) -> list:
    """Every record of ``topic`` a read_committed consumer reads to the end: (partition, key, value)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, ended = [], set()
        deadline = time.monotonic() + 30
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"{topic}: {len(got)} records, not at the end after 30 s"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                ended.add(m.partition())
                continue
            got.append((m.partition(), m.key().decode(), json.loads(m.value())))
        return got
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], 15)]
    finally:
        c.close()


QUIX_KEYS, QUIX_FIRST, QUIX_SECOND = ("k0", "k1", "k2"), 10, 5


def quixstreams_exactly_once(python: Path):
    def quixstreams_exactly_once(bootstrap: str) -> dict:
        """An exactly-once stateful count, run to the end of its input; then more input and the app run
        again on an empty state directory: its counts come back from the changelog topic."""
        source, sink = create_topic(bootstrap, 2, "quix-in"), create_topic(bootstrap, 1, "quix-out")
        group, i = unique("quix"), iter(range(1000))
        with tempfile.TemporaryDirectory() as tmp:
            for run, per_key in enumerate((QUIX_FIRST, QUIX_SECOND)):
                _produce_json(bootstrap, source, [(k, n % 2, next(i)) for _ in range(per_key)
                                                  for n, k in enumerate(QUIX_KEYS)])
                state = Path(tmp) / f"state-{run}"  # a new, empty state directory for each run
                _run_app(python, "quix_count.py", bootstrap, source, sink, group, str(state),
                         str(per_key * len(QUIX_KEYS)))
        counts: dict[str, list[int]] = {}
        for _, key, value in _read_committed(bootstrap, sink, 1):
            counts.setdefault(key, []).append(value["n"])
        return {"counts": counts, "committed": _committed(bootstrap, group, source, 2)}
    return quixstreams_exactly_once


def _check_quix(r: dict) -> None:
    total = QUIX_FIRST + QUIX_SECOND
    assert r["counts"] == {k: list(range(1, total + 1)) for k in QUIX_KEYS}
    assert r["committed"] == [2 * total, total]  # k0 and k2 on partition 0, k1 on partition 1


@pytest.mark.parametrize("broker", BROKERS)
def test_quixstreams_exactly_once(request, broker, apps_python):
    run(request, broker, quixstreams_exactly_once(apps_python), _check_quix)


FAUST_KEYS, FAUST_FIRST, FAUST_SECOND = ("a", "b", "c", "d"), 20, 10


def faust_table(python: Path):
    def faust_table(bootstrap: str) -> dict:
        """A faust table counting keys with processing_guarantee exactly_once; the worker stopped (SIGTERM),
        more input, a new worker with an empty data directory recovers the table from its changelog and
        counts on. (With faust's default at_least_once the counts after the restart are off by one or more
        in about half the runs on Kafka 4.4 as on ours: a changelog write lost at shutdown, records
        processed again after a rebalance; see docs/testing.md.)"""
        source, app_id = create_topic(bootstrap, 2, "faust-in"), unique("faust")
        out, produced, i = {}, 0, iter(range(1000))
        with tempfile.TemporaryDirectory() as tmp:
            for run, per_key in enumerate((FAUST_FIRST, FAUST_SECOND)):
                _produce_json(bootstrap, source, [(k, n % 2, next(i)) for _ in range(per_key)
                                                  for n, k in enumerate(FAUST_KEYS)])
                produced += per_key * len(FAUST_KEYS)
                data = Path(tmp) / f"data-{run}"  # a new, empty data directory for each run
                _run_app(python, "faust_table.py", bootstrap, source, app_id, str(data), str(produced))
                out[f"run{run}"] = json.loads((data / "counts.json").read_text())
        out["committed"] = _committed(bootstrap, app_id, source, 2)
        return out
    return faust_table


def _check_faust(r: dict) -> None:
    total = FAUST_FIRST + FAUST_SECOND
    assert r == {"run0": dict.fromkeys(FAUST_KEYS, FAUST_FIRST), "run1": dict.fromkeys(FAUST_KEYS, total),
                 "committed": [2 * total, 2 * total]}  # a and c on partition 0, b and d on 1


FAUST_ENV = "SHAREBROKER_FAUST"


@pytest.mark.parametrize("broker", BROKERS)
def test_faust_table(request, broker, apps_python):
    """Opt-in (``SHAREBROKER_FAUST=1``): faust-streaming 0.15.3 is not deterministic, on Kafka 4.4 as on ours.
    Under exactly_once a restarted worker can count records twice: its ``Recovery._resume_streams`` resumes
    the stream partitions before ``perform_seek`` (one OffsetFetch per assigned partition, in turn), so
    records fetched in between are counted, then the seek back to the committed offset hands them over
    again (Kafka 4.4: 'c' or 'd' at 31 in 5 of 9 runs with a slow OffsetFetch; ours: a partition's second
    input twice once in 35 runs); and it commits a transaction without flushing its producer buffer, so
    offsets can be committed without their table updates (Kafka 4.4, loaded: 'c' and 'd' at 29 in 2 of
    14 runs). Its worker can also crash while stopping ("Cannot
    flush: Producer not Running", exit 1) on both. docs/testing.md, "Differential suite, applications", has the runs
    and the broker-side checks.
    A suite test must not be flaky, so it runs when asked for: on 2026-11-29 the last record of a partition
    was counted twice on Kafka 4.4 in 1 of 13 restarts (0 of 22 on ours), so no setting of ours makes the
    comparison deterministic (docs/client-notes.md, faust-streaming)."""
    if os.environ.get(FAUST_ENV) != "1":
        pytest.skip(f"faust-streaming is not deterministic on either broker (see the docstring); {FAUST_ENV}=1 runs it")
    run(request, broker, faust_table(apps_python), _check_faust)


FS_KEYS, FS_FIRST, FS_SECOND = ("k0", "k1", "k2", "k3"), 12, 6  # k0, k2 on partition 0; k1, k3 on 1


def faststream_transform(bootstrap: str) -> dict:
    """A faststream app (its Kafka broker, on aiokafka) in two consumer groups, one committing by hand after
    publishing, one with auto commit, each transforming every record into its own sink; run to the end of its
    input and stopped, then more input and the app run again: it resumes from its committed offsets."""
    source = create_topic(bootstrap, 2, "fs-in")
    sink_manual, sink_auto = create_topic(bootstrap, 2, "fs-manual"), create_topic(bootstrap, 1, "fs-auto")
    groups = unique("fs-manual"), unique("fs-auto")
    out, i = {}, iter(range(1000))
    for run, count in enumerate((FS_FIRST, FS_SECOND)):
        _produce_json(bootstrap, source, [(FS_KEYS[n % 4], n % 2, n) for n in (next(i) for _ in range(count))])
        ends = ",".join(str((FS_FIRST + (FS_SECOND if run else 0)) // 2) for _ in range(2))
        handled = json.loads(_run_app(Path(sys.executable), "faststream_transform.py", bootstrap, source,
                                      sink_manual, sink_auto, *groups, ends, timeout=60).splitlines()[-1])
        # per group, per partition: the offsets handled, in the order handled
        out[f"run{run}"] = [[[o for p, o in handled[g] if p == partition] for partition in (0, 1)] for g in groups]
    manual = _read_committed(bootstrap, sink_manual, 2)
    out["sink_manual"] = [[(k, v["i"], v["double"]) for p, k, v in manual if p == partition] for partition in (0, 1)]
    auto: dict[str, list] = {}
    for _, key, value in _read_committed(bootstrap, sink_auto, 1):
        auto.setdefault(key, []).append((value["i"], value["double"]))
    out["sink_auto"] = auto
    out["committed"] = [_committed(bootstrap, g, source, 2) for g in groups]
    return out


def _check_faststream(r: dict) -> None:
    half, total = FS_FIRST // 2, (FS_FIRST + FS_SECOND) // 2  # per partition
    run0, run1 = [list(range(half))] * 2, [list(range(half, total))] * 2
    assert r["run0"] == [run0, run0]  # both groups, each partition once, in order
    assert r["run1"] == [run1, run1]  # resumed from the committed offsets: nothing handled twice
    n = FS_FIRST + FS_SECOND
    assert r["sink_manual"] == [[(FS_KEYS[i % 4], i, 2 * i) for i in range(p, n, 2)] for p in (0, 1)]
    assert r["sink_auto"] == {k: [(i, 2 * i) for i in range(j, n, 4)] for j, k in enumerate(FS_KEYS)}
    assert r["committed"] == [[total, total]] * 2


@pytest.mark.parametrize("broker", BROKERS)
def test_faststream_transform(request, broker):
    run(request, broker, faststream_transform, _check_faststream)


# ----------------------------------------------------------------------------- the two compared
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_results_as_kafka(scenario):
    got = RESULTS.get(scenario, {})
    if set(got) != set(BROKERS):
        pytest.skip(f"{scenario} did not run on both brokers in this session (run the whole module)")
    assert_as_expected(scenario, differences(got["ours"], got["kafka"]), EXPECTED)
